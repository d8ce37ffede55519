// The compiled executor: runs a graph as its fusion plan says. kLoop groups
// with generated code run as one JIT-compiled kernel each (MLIR -> LLVM),
// parallel over dim 0 on ATen's thread pool; every other op runs its ATen CPU
// kernel, as in the reference executor. Kernels are shape-generic: sizes and
// strides are passed at each launch.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdlib>
#include <atomic>
#include <fstream>
#include <algorithm>
#include <map>
#include <mutex>
#include <queue>
#include <set>

#include "lazy_backend/conv_calls.h"
#include "lazy_backend/executor.h"
#include "lazy_backend/gemm_merge_exec.h"
#include "lazy_backend/host_cache.h"
#include "lazy_backend/kernel_launch.h"
#include "lazy_backend/library_calls.h"
#include "lazy_backend/metrics.h"
#include "lazy_backend/persistent_cache.h"
#include "lazy_backend/replay.h"
#include "lazy_backend/tensor_data.h"
#include "lowering/codegen/fused_kernel.h"
#include "runtime/mlir_jit.h"

namespace disc {

namespace {

using lowering::Program;

constexpr size_t kMinFusedOps = 2;

struct Kernel {
  lowering::FusedKernel spec;
  std::shared_ptr<runtime::JitModule> jit;  // owns the code behind `fn`
  runtime::PackedFn fn;                     // resolved once, not per launch
};

// JIT modules by kernel text: a kernel is compiled once per process, however
// many graphs contain it (an LLVM -O3 compile costs tens of milliseconds),
// and once per machine when the persistent cache is on.
std::shared_ptr<runtime::JitModule> jit_compile(const std::string& mlir, std::string* llvm_ir) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<runtime::JitModule>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(mlir);
  if (it != cache.end() && !llvm_ir) {
    metrics::bump("kernel_cache_hits");
    return it->second;
  }
  if (!llvm_ir) {  // a dump wants the LLVM IR, which only a compile makes
    if (std::shared_ptr<runtime::JitModule> jit = load_kernel(mlir)) return cache[mlir] = jit;
  }
  std::string object;
  std::shared_ptr<runtime::JitModule> jit =
      runtime::JitModule::compile(mlir, llvm_ir, persistent_cache_enabled() ? &object : nullptr);
  store_kernel(mlir, object);
  cache[mlir] = jit;
  metrics::bump("kernels_jitted");
  return jit;
}

// One step of the schedule: a generated kernel, or a single op.
struct Step {
  int32_t kernel = -1;  // index into kernels, or -1
  uint32_t op = 0;      // the op, when kernel < 0
};

std::vector<bool> used_outside_groups(const Program& p) {
  std::vector<bool> used(p.ops.size(), false);
  for (const ir::GraphRef& r : p.outputs) used[r.node] = true;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].erased) continue;
    for (const ir::GraphRef& r : p.ops[i].inputs)
      if (p.ops[r.node].group < 0 || p.ops[r.node].group != p.ops[i].group) used[r.node] = true;
  }
  return used;
}

void dump_kernel(const ir::Graph& g, const lowering::FusedKernel& k, const std::string& llvm_ir) {
  const char* dir = std::getenv("DISC_DUMP_IR");
  if (!dir || !*dir) return;
  std::ostringstream base;
  static std::atomic<int> counter{0};
  base << dir << "/" << std::hex << g.hash << std::dec << "." << k.name << counter++;
  std::ofstream(base.str() + ".mlir") << k.mlir;
  std::ofstream(base.str() + ".ll") << llvm_ir;
}

class CompiledExecutable final : public Executable {
 public:
  CompiledExecutable(const ir::Graph& g, const Program& plan) : program_(plan) {
    std::vector<bool> used = used_outside_groups(program_);
    std::vector<int32_t> kernel_of_group(program_.groups.size(), -1);
    for (uint32_t gi = 0; gi < program_.groups.size(); ++gi) {
      std::optional<lowering::FusedKernel> spec = generate(gi, used);
      if (!spec) continue;
      std::string llvm_ir;
      auto jit = jit_compile(spec->mlir, std::getenv("DISC_DUMP_IR") ? &llvm_ir : nullptr);
      dump_kernel(g, *spec, llvm_ir);
      kernel_of_group[gi] = static_cast<int32_t>(kernels_.size());
      runtime::PackedFn fn = jit->lookup(spec->name);
      kernels_.push_back({std::move(*spec), std::move(jit), fn});
    }
    metrics::bump("kernels_compiled", static_cast<int64_t>(kernels_.size()));
    schedule(kernel_of_group);
    plan_in_place();
    plan_publishing(kernel_of_group);
    for (const Step& s : steps_)
      replay_ops_.push_back(s.kernel < 0 && program_.ops[s.op].cls != lowering::OpClass::kData
                                ? std::optional(resolve_op(program_.ops[s.op].node->op))
                                : std::nullopt);
    library_ = plan_library_calls(program_);
    gemm_groups_ = GemmGroupRunner(program_, library_);
    layouts_ = plan_conv_layouts(program_);
  }

  std::vector<at::Tensor> run(const ir::Graph& g, const PublishFn& publish) override {
    ExecutorAllocations from_host_cache;  // host_cache.h: no heap churn per step
    std::vector<std::vector<at::Tensor>> values(g.nodes.size());
    RunCounts n;
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (profile_) {
        const auto start = std::chrono::steady_clock::now();
        run_step(s, g, values, n);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - start).count();
        const std::string label = "profile." + step_label(s, g);
        metrics::bump(label + "_ns", ns);
        metrics::bump(label + ".calls");
      } else {
        run_step(s, g, values, n);
      }
      if (publish && !publish_after_[s].empty()) {
        for (size_t o : publish_after_[s]) {
          const ir::GraphRef& r = program_.outputs[o];
          publish(o, values[r.node][r.index]);
        }
        if (s + 1 < steps_.size()) n.early += static_cast<int64_t>(publish_after_[s].size());
      }
      // Values no later step reads are dropped now, so the allocator reuses
      // their memory for the next ones instead of holding every
      // intermediate of the step until the end.
      for (const ir::GraphRef& r : release_[s]) {
        at::Tensor& t = values[r.node][r.index];
        n.released += t.defined();
        t = at::Tensor();
      }
    }
    static metrics::Named launched("kernels_launched"), fused("launches.fused"), aten("launches.aten"),
        parts("launches.parallel_parts"), released("buffers.released_early"),
        early("async.early_outputs");
    launched += n.fused + n.aten;
    fused += n.fused;
    aten += n.aten;
    // How many threads shared the launches: pinned by a test, since a build
    // without OpenMP runs every kernel serially and is otherwise only slow.
    parts += n.parallel_parts;
    released += n.released;
    early += n.early;
    std::vector<at::Tensor> out;
    for (const ir::GraphRef& r : program_.outputs) out.push_back(values[r.node][r.index]);
    return out;
  }

 private:
  // What DISC_PROFILE=1 files a step's time under: the generated kernel's
  // name (its fusion kind and first op), or the op and how it ran.
  std::string step_label(size_t s, const ir::Graph& g) const {
    const Step& step = steps_[s];
    if (step.kernel >= 0) return "fused." + kernels_[step.kernel].spec.name;
    const uint32_t i = step.op;
    const char* how = g.nodes[i].param >= 0            ? "param."
                      : program_.ops[i].gemm_group >= 0 ? "gemm_group."
                      : library_[i]                     ? "library."
                                                        : "aten.";
    return how + ir::op_name(g.nodes[i].node->op);
  }

  // What one run did, counted locally and filed in the metrics once.
  struct RunCounts {
    int64_t fused = 0, aten = 0, parallel_parts = 0, released = 0;
    int64_t early = 0;  // outputs published before the last step
  };

  void run_step(size_t s, const ir::Graph& g, std::vector<std::vector<at::Tensor>>& values,
                RunCounts& n) {
    const Step& step = steps_[s];
    if (step.kernel >= 0) {
      const Kernel& k = kernels_[step.kernel];
      n.parallel_parts += launch_fused_kernel(k.spec, k.fn, g, values, reusable_buffers(s, g, values));
      ++n.fused;
      return;
    }
    const uint32_t i = step.op;
    const ir::GraphNode& gn = g.nodes[i];
    if (gn.param >= 0) {
      values[i] = {param_tensor(*gn.node)};
      return;
    }
    if (program_.ops[i].gemm_group >= 0) {  // merged GEMMs: one call for all members
      gemm_groups_.run(program_, program_.ops[i].gemm_group, g, values);
      return;
    }
    std::vector<at::Tensor> ins;
    for (const ir::GraphRef& r : program_.ops[i].inputs) ins.push_back(values[r.node][r.index]);
    if (library_[i]) {  // GEMMs on oneDNN, epilogues, convolutions
      values[i] = run_library_call(*library_[i], *gn.node, std::move(ins), *replay_ops_[s], &g);
      if (!layouts_.to_nchw[i].empty()) make_nchw(values[i], layouts_.to_nchw[i]);
      return;
    }
    if (layouts_.match_inputs[i]) match_nhwc(ins);  // NHWC and NCHW inputs: one layout
    std::vector<bool> in_place;
    if (!last_reader_[s].empty()) in_place = writable_in_place(s, g, ins);
    values[i] = replay(*replay_ops_[s], *gn.node, std::move(ins),
                       in_place.empty() ? nullptr : &in_place);
    // NHWC from a convolution, read as NCHW next.
    if (!layouts_.to_nchw[i].empty()) make_nchw(values[i], layouts_.to_nchw[i]);
    ++n.aten;
  }

  // The kernel of group `gi`, or nullopt where its ops run one by one: a
  // lone element-wise op (ATen's kernel for it is already vectorized, and
  // fusion gains nothing), or a group the codegen declines (counted).
  std::optional<lowering::FusedKernel> generate(uint32_t gi, const std::vector<bool>& used) {
    const lowering::FusionGroup& group = program_.groups[gi];
    if (group.kind == lowering::FusionKind::kLoop && group.ops.size() < kMinFusedOps)
      return std::nullopt;
    std::string why;
    if (auto k = lowering::emit_fused_kernel(program_, gi, used, &why)) return k;
    metrics::bump("codegen.declined");
    if (std::getenv("DISC_DEBUG_COMPILE"))
      std::fprintf(stderr, "disc: group %u (%s) runs op by op: %s\n", gi,
                   lowering::fusion_kind_name(group.kind), why.c_str());
    return std::nullopt;
  }

  // Kahn's algorithm over kernels and single ops, smallest op index first:
  // a group runs once all its external inputs exist.
  void schedule(const std::vector<int32_t>& kernel_of_group) {
    const size_t n_ops = program_.ops.size();
    auto unit = [&](uint32_t i) -> int64_t {  // kernel units are numbered after ops
      if (int32_t mg = program_.ops[i].gemm_group; mg >= 0) return program_.gemm_groups[mg].ops.front();
      int32_t g = program_.ops[i].group;
      return g >= 0 && kernel_of_group[g] >= 0 ? static_cast<int64_t>(n_ops + kernel_of_group[g]) : i;
    };
    const size_t n_units = n_ops + kernels_.size();
    std::vector<std::vector<size_t>> next(n_units);
    std::vector<size_t> indegree(n_units, 0), first_op(n_units, SIZE_MAX);
    std::vector<bool> present(n_units, false);
    for (uint32_t i = 0; i < n_ops; ++i) {
      if (program_.ops[i].erased) continue;
      size_t u = unit(i);
      present[u] = true;
      first_op[u] = std::min<size_t>(first_op[u], i);
      for (const ir::GraphRef& r : program_.ops[i].inputs) {
        size_t v = unit(r.node);
        if (v == u) continue;
        next[v].push_back(u);
        ++indegree[u];
      }
    }
    using Item = std::pair<size_t, size_t>;  // (first op, unit)
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
    for (size_t u = 0; u < n_units; ++u)
      if (present[u] && indegree[u] == 0) ready.push({first_op[u], u});
    while (!ready.empty()) {
      size_t u = ready.top().second;
      ready.pop();
      steps_.push_back(u >= n_ops ? Step{static_cast<int32_t>(u - n_ops), 0}
                                  : Step{-1, static_cast<uint32_t>(u)});
      for (size_t v : next[u])
        if (--indegree[v] == 0) ready.push({first_op[v], v});
    }
  }

  // Which values each step reads last (release_); for each op that writes
  // inputs in place, which of those inputs it reads last (no later step, no
  // graph output, no other operand of the same op); for each kernel that
  // may write into input buffers, which inputs it reads last. Those values
  // are dead once the step runs, so their buffers can take its results --
  // an optimizer updates its parameters and state in their buffers instead
  // of allocating and copying a second set every step.
  void plan_in_place() {
    std::map<std::pair<uint32_t, uint32_t>, size_t> last;  // value -> last reading step
    auto read = [&](const ir::GraphRef& r, size_t step) { last[{r.node, r.index}] = step; };
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (steps_[s].kernel >= 0) {
        for (const ir::GraphRef& r : kernels_[steps_[s].kernel].spec.inputs) read(r, s);
      } else if (int32_t mg = program_.ops[steps_[s].op].gemm_group; mg >= 0) {
        for (uint32_t m : program_.gemm_groups[mg].ops)
          for (const ir::GraphRef& r : program_.ops[m].inputs) read(r, s);
      } else {
        for (const ir::GraphRef& r : program_.ops[steps_[s].op].inputs) read(r, s);
      }
    }
    for (const ir::GraphRef& r : program_.outputs) read(r, SIZE_MAX);
    release_.assign(steps_.size(), {});
    for (const auto& [value, step] : last)
      if (step != SIZE_MAX) release_[step].push_back({value.first, value.second});
    last_reader_.assign(steps_.size(), {});
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (steps_[s].kernel >= 0) {
        const lowering::FusedKernel& k = kernels_[steps_[s].kernel].spec;
        if (!k.loads_before_stores) continue;
        std::vector<bool> mine;
        for (const ir::GraphRef& r : k.inputs) mine.push_back(last[{r.node, r.index}] == s);
        if (std::count(mine.begin(), mine.end(), true)) last_reader_[s] = std::move(mine);
        continue;
      }
      const lowering::ProgramOp& op = program_.ops[steps_[s].op];
      const std::vector<uint32_t>& mutated = op.node->mutated;
      if (mutated.empty()) continue;
      std::vector<bool> mine(mutated.size(), false);
      bool any = false;
      for (size_t j = 0; j < mutated.size(); ++j) {
        const ir::GraphRef r = op.inputs[mutated[j]];
        const bool once = std::count(op.inputs.begin(), op.inputs.end(), r) == 1;
        mine[j] = once && last[{r.node, r.index}] == s;
        any = any || mine[j];
      }
      if (any) last_reader_[s] = std::move(mine);
    }
  }

  // Which graph outputs are final after each step: the step that makes an
  // output is the last to write it (outputs are never reused in place).
  // Outputs whose maker is not found are published with the results.
  void plan_publishing(const std::vector<int32_t>& kernel_of_group) {
    const size_t none = SIZE_MAX;
    std::vector<size_t> maker(program_.ops.size(), none), kernel_step(kernels_.size(), none);
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (steps_[s].kernel >= 0) {
        kernel_step[steps_[s].kernel] = s;
      } else if (int32_t mg = program_.ops[steps_[s].op].gemm_group; mg >= 0) {
        for (uint32_t m : program_.gemm_groups[mg].ops) maker[m] = s;
      } else {
        maker[steps_[s].op] = s;
      }
    }
    for (uint32_t i = 0; i < program_.ops.size(); ++i)
      if (int32_t gi = program_.ops[i].group; gi >= 0 && kernel_of_group[gi] >= 0)
        maker[i] = kernel_step[kernel_of_group[gi]];
    publish_after_.assign(steps_.size(), {});
    for (size_t o = 0; o < program_.outputs.size(); ++o)
      if (size_t s = maker[program_.outputs[o].node]; s != none) publish_after_[s].push_back(o);
  }

  // The planned in-place writes that are safe in this run: the buffer is not
  // shared with another tensor (a view, a CPU tensor the user holds) and, for
  // a parameter, not still the data of a storage this sync keeps.
  std::vector<bool> writable_in_place(size_t s, const ir::Graph& g,
                                      const std::vector<at::Tensor>& ins) const {
    const lowering::ProgramOp& op = program_.ops[steps_[s].op];
    std::vector<bool> ok = last_reader_[s];
    for (size_t j = 0; j < ok.size(); ++j) {
      if (!ok[j]) continue;
      const uint32_t m = g.nodes[steps_[s].op].node->mutated[j];  // program_ nodes are gone
      ok[j] = sole_buffer(g, op.inputs[m].node, ins[m], 2);  // values[] and `ins`
      static metrics::Named writes("inplace.writes"), copies("inplace.copies");
      ++(ok[j] ? writes : copies);
    }
    return ok;
  }

  // Whether value `t` of node `node` is the only user of its buffer: it has
  // `handles` references (the executor's own, plus a parameter's data node)
  // and no other tensor shares its storage (a view, a CPU tensor the user
  // holds), and a parameter is not still the data of a storage this sync
  // keeps. Its buffer can then be overwritten once its last reader has it.
  static bool sole_buffer(const ir::Graph& g, uint32_t node, const at::Tensor& t, size_t handles) {
    const ir::GraphNode& producer = g.nodes[node];
    const bool param = producer.param >= 0;
    if (param && (g.pinned_params.empty() || g.pinned_params[producer.param])) return false;
    return t.defined() && t.has_storage() && t.storage().use_count() == 1 &&
           static_cast<size_t>(t.use_count()) == handles + (param ? 1 : 0) &&
           !t.unsafeGetTensorImpl()->is_wrapped_number();
  }

  // The buffers kernel step `s` writes its outputs into (kernel_launch.h):
  // for each element-wise output, an input the step reads last, of the
  // output's sizes, contiguous float32 and the sole user of its buffer.
  // The rest are allocated. An SGD update of a [256, 784] weight in its own
  // buffers instead of fresh ones: 133 -> 75 us, and no second copy of the
  // parameters and their state.
  std::vector<at::Tensor> reusable_buffers(size_t s, const ir::Graph& g,
                                           const std::vector<std::vector<at::Tensor>>& values) const {
    const std::vector<bool>& last = last_reader_[s];
    if (last.empty()) return {};
    const lowering::FusedKernel& k = kernels_[steps_[s].kernel].spec;
    std::vector<at::Tensor> into(k.outputs.size());
    std::vector<bool> taken(k.inputs.size(), false);
    static metrics::Named reused("inplace.kernel_outputs");
    for (size_t j = 0; j < k.outputs.size(); ++j) {
      const lowering::KernelOutput& o = k.outputs[j];
      if (o.extent != lowering::KernelOutput::Extent::kElements) continue;
      const c10::IntArrayRef sizes = g.nodes[o.op].node->outputs[o.index].sizes;
      for (size_t i = 0; i < k.inputs.size(); ++i) {
        if (taken[i] || !last[i]) continue;
        const ir::GraphRef r = k.inputs[i];
        const at::Tensor& t = values[r.node][r.index];
        if (!t.defined() || t.scalar_type() != at::kFloat || t.sizes() != sizes ||
            !t.is_contiguous() || !sole_buffer(g, r.node, t, 1))
          continue;
        into[j] = t;
        taken[i] = true;
        ++reused;
        break;
      }
    }
    return into;
  }

  // DISC_PROFILE=1: each step's wall time goes into the metrics.
  const bool profile_ = std::getenv("DISC_PROFILE") != nullptr;
  Program program_;  // its node pointers die with the first graph: read nodes from `g`
  std::vector<Kernel> kernels_;
  std::vector<Step> steps_;
  // Per step, see plan_in_place: for an op, per mutated input; for a kernel
  // whose outputs may reuse input buffers, per kernel input.
  std::vector<std::vector<bool>> last_reader_;
  std::vector<std::vector<ir::GraphRef>> release_;  // per step: values it reads last
  std::vector<std::vector<size_t>> publish_after_;   // per step: outputs final after it
  std::vector<std::optional<c10::OperatorHandle>> replay_ops_;
  std::vector<std::optional<LibraryCall>> library_;  // per op, see library_calls.h
  GemmGroupRunner gemm_groups_;                      // merged GEMMs, gemm_merge_exec.h
  ConvLayoutPlan layouts_;  // where activations are NHWC, see conv_calls.h
};

class CompiledExecutor final : public Executor {
 public:
  const char* name() const override { return "compiled"; }
  std::unique_ptr<Executable> compile(const ir::Graph& g, const Program* plan) override {
    if (!plan) return reference_executor().compile(g, nullptr);
    try {
      if (fault_injected("codegen")) throw std::runtime_error("DISC_INJECT_FAULT=codegen");
      return std::make_unique<CompiledExecutable>(g, *plan);
    } catch (const std::exception& e) {
      // Same results, slower: counted and said once.
      metrics::bump("compile_failures");
      static std::once_flag warned;
      std::call_once(warned, [&] {
        TORCH_WARN("disc: codegen failed, graph runs on the reference executor: ", e.what());
      });
      return reference_executor().compile(g, nullptr);
    }
  }
};

}  // namespace

Executor& compiled_executor() {
  static CompiledExecutor e;
  return e;
}

}  // namespace disc
