// The compiled executor: interprets the execution plan the compiler's plan
// passes made (lowering/plan.h) and decides nothing itself. Each planned
// kernel's code (MLIR, written by the codegen pass) is JIT-compiled once,
// and launched parallel over dim 0 on ATen's thread pool; library calls run
// on oneDNN (library_calls.h, conv_calls.h, gemm_merge_exec.h); every other
// op runs its ATen CPU kernel, as in the reference executor. Kernels are
// shape-generic: sizes and strides are passed at each launch.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/base/profiler_range.h"
#include "lazy_backend/cache/persistent_cache.h"
#include "lazy_backend/device/host_cache.h"
#include "lazy_backend/device/target.h"
#include "lazy_backend/exec/attention_call.h"
#include "lazy_backend/exec/cast_cache.h"
#include "lazy_backend/exec/conv_calls.h"
#include "lazy_backend/exec/executor.h"
#include "lazy_backend/exec/gemm_merge_exec.h"
#include "lazy_backend/exec/kernel_launch.h"
#include "lazy_backend/exec/library_calls.h"
#include "lazy_backend/exec/replay.h"
#include "lazy_backend/trace/tensor_data.h"
#include "lowering/codegen/cpu/fused_kernel.h"
#include "lowering/ops.h"
#include "runtime/components.h"
#include "runtime/cpu/mlir_jit.h"
#include "runtime/options.h"

namespace disc {

namespace {

using lowering::Program;

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

void dump_kernel(const ir::Graph& g, const lowering::FusedKernel& k, const std::string& llvm_ir) {
  const std::string dir = options::text(options::Id::kDumpIr);
  if (dir.empty()) return;
  std::ostringstream base;
  static std::atomic<int> counter{0};
  base << dir << "/" << std::hex << g.hash << std::dec << "." << k.name << counter++;
  std::ofstream(base.str() + ".mlir") << k.mlir;
  std::ofstream(base.str() + ".ll") << llvm_ir;
}

// The code of each kernel the plan names, JIT-compiled.
std::vector<Kernel> compile_kernels(const ir::Graph& g, const Program& program) {
  std::vector<Kernel> kernels;
  const bool dumping = !options::text(options::Id::kDumpIr).empty();
  TORCH_INTERNAL_ASSERT(program.target == lowering::Target::kCpu &&
                            program.plan.code.size() == program.plan.kernels.size(),
                        "disc: the compiled executor runs the CPU code the codegen pass wrote");
  for (size_t k = 0; k < program.plan.kernels.size(); ++k) {
    const lowering::KernelCode& code = program.plan.code[k];
    lowering::FusedKernel spec{program.plan.kernels[k], code.name, code.text};
    std::string llvm_ir;
    auto jit = jit_compile(spec.mlir, dumping ? &llvm_ir : nullptr);
    dump_kernel(g, spec, llvm_ir);
    runtime::PackedFn fn = jit->lookup(spec.name);
    kernels.push_back({std::move(spec), std::move(jit), fn});
  }
  metrics::bump("kernels_compiled", static_cast<int64_t>(kernels.size()));
  return kernels;
}

// Runs a compiled graph by interpreting its execution plan (lowering/plan.h).
class CompiledExecutable final : public Executable {
 public:
  CompiledExecutable(const ir::Graph& g, const Program& program)
      : program_(program), plan_(program_.plan), kernels_(compile_kernels(g, program_)) {
    for (const lowering::Step& s : plan_.steps)
      replay_ops_.push_back(s.kind == lowering::Step::Kind::kOp || s.kind == lowering::Step::Kind::kLibrary
                                ? std::optional(resolve_op(program_.ops[s.op].node->op))
                                : std::nullopt);
  }

  std::vector<at::Tensor> run(const ir::Graph& g, const PublishFn& publish, RunFailure* failure) override {
    ExecutorAllocations from_host_cache;  // host_cache.h: no heap churn per step
    std::vector<std::vector<at::Tensor>> values(g.nodes.size());
    RunCounts n;
    const size_t n_steps = plan_.steps.size();
    for (size_t s = 0; s < n_steps; ++s) {
      try {
        run_step_observed(s, g, values, n);
        if (n.inputs_overwritten && !n.update_fault_checked) throw_injected_update_fault(n);
      } catch (...) {
        if (failure) failure->inputs_overwritten = n.inputs_overwritten;
        rethrow_naming(*g.nodes[plan_.steps[s].op].node);
      }
      const lowering::Step& step = plan_.steps[s];
      if (publish && !step.publish.empty()) {
        for (uint32_t o : step.publish) {
          const ir::GraphRef& r = program_.outputs[o];
          publish(o, values[r.node][r.index]);
        }
        if (s + 1 < n_steps) n.early += static_cast<int64_t>(step.publish.size());
      }
      // Values no later step reads are dropped now, so the allocator reuses
      // their memory for the next ones.
      for (const ir::GraphRef& r : step.release) {
        at::Tensor& t = values[r.node][r.index];
        n.released += t.defined();
        t = at::Tensor();
      }
    }
    n.file();
    std::vector<at::Tensor> out;
    for (const ir::GraphRef& r : program_.outputs) out.push_back(values[r.node][r.index]);
    return out;
  }

 private:
  // What one run did, counted locally and filed in the metrics once.
  struct RunCounts {
    int64_t fused = 0, aten = 0, views = 0, parallel_parts = 0, released = 0;
    int64_t early = 0;  // outputs published before the last step
    bool inputs_overwritten = false;  // see RunFailure
    bool update_fault_checked = false;
    void file() const {
      static metrics::Named launched("kernels_launched"), n_fused("launches.fused"),
          n_aten("launches.aten"), n_views("launches.views"), parts("launches.parallel_parts"),
          n_released("buffers.released_early"), n_early("async.early_outputs");
      launched += fused + aten;
      n_fused += fused;
      n_aten += aten;
      n_views += views;
      // How many threads shared the launches: pinned by a test, since a
      // build without OpenMP runs every kernel serially and is otherwise
      // only slow.
      parts += parallel_parts;
      n_released += released;
      n_early += early;
    }
  };

  // DISC_INJECT_FAULT=update: fail as running out of memory in an optimizer
  // update would, after the first write into an input.
  static void throw_injected_update_fault(RunCounts& n) {
    n.update_fault_checked = true;
    if (fault_injected("update")) throw std::runtime_error("DISC_INJECT_FAULT=update");
  }

  // A step, seen by torch.profiler (a range named "disc::" + its label)
  // and, with DISC_PROFILE=1, timed into counters under the same label.
  void run_step_observed(size_t s, const ir::Graph& g,
                         std::vector<std::vector<at::Tensor>>& values, RunCounts& n) {
    ProfilerRange range([&] { return "disc::" + step_label(s, g); });
    if (!profile_) return run_step(s, g, values, n);
    const auto start = std::chrono::steady_clock::now();
    run_step(s, g, values, n);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start).count();
    const std::string label = "profile." + step_label(s, g);
    metrics::bump(label + "_ns", ns);
    metrics::bump(label + ".calls");
  }

  // The generated kernel's name (its fusion kind and first op), or the op
  // and how it ran.
  std::string step_label(size_t s, const ir::Graph& g) const {
    const lowering::Step& step = plan_.steps[s];
    if (step.kind == lowering::Step::Kind::kKernel) return "fused." + kernels_[step.kernel].spec.name;
    if (step.kind == lowering::Step::Kind::kLibrary && program_.ops[step.op].attention >= 0)
      return "library.attention";  // a hand-written attention, not its bmm
    if (step.kind == lowering::Step::Kind::kGemmGroup && program_.ops[step.op].attention >= 0)
      return "library.attention_backward";
    const char* how = step.kind == lowering::Step::Kind::kParam       ? "param."
                      : step.kind == lowering::Step::Kind::kGemmGroup ? "gemm_group."
                      : step.kind == lowering::Step::Kind::kLibrary   ? "library."
                                                                      : "aten.";
    return how + ir::op_name(g.nodes[step.op].node->op);
  }

  void run_step(size_t s, const ir::Graph& g, std::vector<std::vector<at::Tensor>>& values,
                RunCounts& n) {
    const lowering::Step& step = plan_.steps[s];
    const uint32_t i = step.op;
    switch (step.kind) {
      case lowering::Step::Kind::kKernel: {
        const Kernel& k = kernels_[step.kernel];
        n.parallel_parts += launch_fused_kernel(k.spec, k.fn, g, values, reusable_buffers(step, g, values, n));
        ++n.fused;
        return;
      }
      case lowering::Step::Kind::kParam:
        values[i] = {param_tensor(*g.nodes[i].node)};
        return;
      case lowering::Step::Kind::kGemmGroup: {  // one call for all members
        const int32_t group = program_.ops[i].gemm_group;
        if (program_.gemm_groups[group].kind == lowering::GemmMergeKind::kAttentionBackward)
          run_attention_backward(program_, group, g, values);
        else
          run_gemm_group(program_, group, g, values);
        return;
      }
      case lowering::Step::Kind::kLibrary:  // GEMMs on oneDNN, epilogues, convolutions
        values[i] = run_library_call(*plan_.library[i], *g.nodes[i].node, inputs_of(i, values),
                                     *replay_ops_[s], &g);
        break;
      case lowering::Step::Kind::kOp: {
        std::vector<at::Tensor> ins = inputs_of(i, values);
        const std::optional<at::ScalarType> cast = parameter_cast(g, i, ins);
        if (cast) {
          if (std::optional<at::Tensor> kept = kept_cast(ins[0], *cast)) {
            values[i] = {*std::move(kept)};
            break;
          }
        }
        if (plan_.layouts.match_inputs[i]) match_nhwc(ins);  // NHWC and NCHW inputs: one layout
        std::vector<bool> in_place;
        if (!step.last_read.empty()) in_place = writable_in_place(step, g, ins, n);
        const ir::Node& node = *g.nodes[i].node;
        const Storages read = node.mutated.empty() ? storages_of(ins) : Storages{};
        const at::Tensor param = cast ? ins[0] : at::Tensor();
        values[i] = replay(*replay_ops_[s], node, std::move(ins),
                           in_place.empty() ? nullptr : &in_place);
        ++(only_views(node, values[i], read) ? n.views : n.aten);
        if (cast && values[i][0].scalar_type() == *cast) keep_cast(param, values[i][0]);
        break;
      }
    }
    // NHWC from a convolution, read as NCHW next.
    if (!plan_.layouts.to_nchw[i].empty()) make_nchw(values[i], plan_.layouts.to_nchw[i]);
  }

  // The dtype op `i` casts a parameter to, when its cast is kept across
  // graphs (cast_cache.h): a plain _to_copy (dtype only) of a parameter
  // unchanged in inference whose buffer has a version counter (not an
  // inference tensor).
  std::optional<at::ScalarType> parameter_cast(const ir::Graph& g, uint32_t i,
                                               const std::vector<at::Tensor>& ins) const {
    const ir::Node& n = *g.nodes[i].node;
    if (lowering::op_of(n.op) != lowering::Op::kToCopy || ins.size() != 1 || !cast_cache_enabled() ||
        !unchanged_in_inference(g, program_.ops[i].inputs[0].node) || !ins[0].defined() ||
        ins[0].is_inference())
      return std::nullopt;
    const ir::Attr* dtype = n.attr_operand(1);
    if (!dtype || dtype->kind != ir::Attr::Kind::kDType) return std::nullopt;
    for (size_t k : {2, 3, 4, 6}) {  // layout, device, pin_memory, memory_format
      const ir::Attr* a = n.attr_operand(k);
      if (a && a->kind != ir::Attr::Kind::kNone) return std::nullopt;
    }
    return to_aten(static_cast<ir::DType>(dtype->i));
  }

  // (Small: one per replayed op, on the executor's hot path.)
  using Storages = c10::SmallVector<const c10::StorageImpl*, 4>;

  static Storages storages_of(const std::vector<at::Tensor>& ts) {
    Storages out;
    for (const at::Tensor& t : ts)
      if (t.defined() && t.has_storage()) out.push_back(t.storage().unsafeGetStorageImpl());
    return out;
  }

  // An op that writes nothing in place and returns only views of what it
  // read (a transpose, an unsqueeze, a reshape that needed no copy) launched
  // no kernel: counted as `launches.views`, not in `kernels_launched`.
  static bool only_views(const ir::Node& node, const std::vector<at::Tensor>& outs,
                         const Storages& read) {
    if (!node.mutated.empty() || outs.empty()) return false;
    return std::all_of(outs.begin(), outs.end(), [&](const at::Tensor& t) {
      return t.defined() && t.has_storage() &&
             std::find(read.begin(), read.end(), t.storage().unsafeGetStorageImpl()) != read.end();
    });
  }

  std::vector<at::Tensor> inputs_of(uint32_t i, const std::vector<std::vector<at::Tensor>>& values) const {
    std::vector<at::Tensor> ins;
    for (const ir::GraphRef& r : program_.ops[i].inputs) ins.push_back(values[r.node][r.index]);
    return ins;
  }

  // The planned in-place writes that are safe in this run: the buffer is not
  // shared with another tensor (a view, a CPU tensor the user holds), no two
  // of the value's elements share memory (an expand's output: masked_fill
  // of an expanded tensor writes a [B, H, L, L] result, not the [B, H, 1, L]
  // buffer behind it) and, for a parameter, it is not still the data of a
  // storage this sync keeps.
  std::vector<bool> writable_in_place(const lowering::Step& step, const ir::Graph& g,
                                      const std::vector<at::Tensor>& ins, RunCounts& n) const {
    const lowering::ProgramOp& op = program_.ops[step.op];
    std::vector<bool> ok = step.last_read;
    for (size_t j = 0; j < ok.size(); ++j) {
      if (!ok[j]) continue;
      const uint32_t m = g.nodes[step.op].node->mutated[j];  // program_ nodes are gone
      ok[j] = sole_buffer(g, op.inputs[m].node, ins[m], 2) &&  // values[] and `ins`
              at::has_internal_overlap(ins[m]) == at::MemOverlap::No;
      n.inputs_overwritten |= ok[j] && g.nodes[op.inputs[m].node].param >= 0;
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
    if (param && (g.read_only_params.empty() || g.read_only_params[producer.param])) return false;
    return t.defined() && t.has_storage() && t.storage().use_count() == 1 &&
           static_cast<size_t>(t.use_count()) == handles + (param ? 1 : 0) &&
           !t.unsafeGetTensorImpl()->is_wrapped_number();
  }

  // The buffers kernel step `step` writes its outputs into (kernel_launch.h):
  // for each element-wise output, an input the step reads last, of the
  // output's sizes and dtype, contiguous and the sole user of its buffer.
  // The rest are allocated. An SGD update of a [256, 784] weight in its own
  // buffers instead of fresh ones: 133 -> 75 us, and no second copy of the
  // parameters and their state.
  std::vector<at::Tensor> reusable_buffers(const lowering::Step& step, const ir::Graph& g,
                                           const std::vector<std::vector<at::Tensor>>& values,
                                           RunCounts& n) const {
    const std::vector<bool>& last = step.last_read;
    if (last.empty()) return {};
    const lowering::FusedKernel& k = kernels_[step.kernel].spec;
    std::vector<at::Tensor> into(k.outputs.size());
    std::vector<bool> taken(k.inputs.size(), false);
    static metrics::Named reused("inplace.kernel_outputs");
    for (size_t j = 0; j < k.outputs.size(); ++j) {
      const lowering::KernelOutput& o = k.outputs[j];
      if (o.extent != lowering::KernelOutput::Extent::kElements) continue;
      const ir::TensorType& type = g.nodes[o.op].node->outputs[o.index];
      const c10::IntArrayRef sizes = type.sizes;
      for (size_t i = 0; i < k.inputs.size(); ++i) {
        if (taken[i] || !last[i]) continue;
        const ir::GraphRef r = k.inputs[i];
        const at::Tensor& t = values[r.node][r.index];
        if (!t.defined() || t.scalar_type() != to_aten(type.dtype) || t.sizes() != sizes ||
            !t.is_contiguous() || !sole_buffer(g, r.node, t, 1))
          continue;
        into[j] = t;
        taken[i] = true;
        ++reused;
        n.inputs_overwritten |= g.nodes[r.node].param >= 0;
        // The kernel writes this buffer: bump its version as an in-place
        // ATen op would (replay.cpp), or a weight packed from it before
        // (prepack.h, keyed by buffer and version) would be read again.
        if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
        break;
      }
    }
    return into;
  }

  const bool profile_ = options::flag(options::Id::kProfile);
  Program program_;  // its node pointers die with the first graph: read nodes from `g`
  const lowering::ExecutionPlan& plan_;
  std::vector<Kernel> kernels_;  // per plan kernel
  std::vector<std::optional<c10::OperatorHandle>> replay_ops_;  // per step: its ATen op
};

class CompiledExecutor final : public Executor {
 public:
  const char* name() const override { return "compiled"; }
  std::unique_ptr<Executable> compile(const ir::Graph& g, const Program* plan) override {
    if (!plan) return reference_executor().compile(g, nullptr);
    // The CUDA target (device/target.h): the plan's kernels are CPU code and
    // its library calls oneDNN's, and the CUDA kernels (cuda_kernels.h) are
    // not launched yet; the reference executor's ATen calls are CUDA kernels there.
    if (value_device().is_cuda()) {
      static std::once_flag warned;
      return on_reference(g, "executor.cuda_reference", warned,
                          "DISC_TARGET=cuda runs graphs on the reference executor (ATen's CUDA "
                          "kernels): generated CUDA kernels are not launched yet");
    }
    if (!plan->plan.kernels.empty() && !runtime::has_cpu_codegen()) {  // runtime/components.h
      static std::once_flag warned;
      return on_reference(g, "executor.no_cpu_codegen", warned,
                          "this build has no CPU code generator (MLIR 15 was not found when it was "
                          "built): graphs with fused kernels run on the reference executor");
    }
    try {
      if (fault_injected("codegen")) throw std::runtime_error("DISC_INJECT_FAULT=codegen");
      return std::make_unique<CompiledExecutable>(g, *plan);
    } catch (const std::exception& e) {
      static std::once_flag warned;
      return on_reference(g, "compile_failures", warned,
                          std::string("codegen failed, graph runs on the reference executor: ") + e.what());
    }
  }

 private:
  // Same results, slower: counted under `counter`, and said once (`warned`).
  static std::unique_ptr<Executable> on_reference(const ir::Graph& g, const char* counter,
                                                  std::once_flag& warned, const std::string& why) {
    metrics::bump(counter);
    std::call_once(warned, [&] { TORCH_WARN("disc: ", why); });
    return reference_executor().compile(g, nullptr);
  }
};

}  // namespace

Executor& compiled_executor() {
  static CompiledExecutor e;
  return e;
}

}  // namespace disc
