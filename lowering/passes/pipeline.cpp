// The pipeline, in order. Each line: the pass, and why it runs there.
#include "lowering/passes/pipeline.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "lowering/passes/passes.h"
#include "runtime/options.h"

namespace disc::lowering {

namespace {

struct Pass {
  const char* name;
  void (*run)(Program&);
  const char* why;
};

constexpr Pass kPipeline[] = {
    {"verify", verify, "reject malformed traces before anything rewrites them"},
    {"fold", fold, "ops that cancel read the original, view chains their source; DCE next"},
    {"canonicalize", canonicalize, "CSE + DCE: fusion must see each value once"},
    {"shape-constraints", shape_constraints, "symbolic dims decide fusion legality"},
    {"attention-pattern", fuse_attention, "hand-written attention is one fused call; symbols decide it"},
    {"library-epilogue", library_epilogue, "relu after a GEMM / conv is a oneDNN post-op, not a kernel"},
    {"gemm-merge", gemm_merge, "GEMMs sharing an operand are one library call"},
    {"fusion-plan", plan_fusion, "kLoop / kInput / kStitch kernels, library calls"},
    {"verify-plan", verify_plan, "the plan is acyclic and each kernel well formed"},
    {"kernels", select_kernels, "groups the codegen can write are kernels; the rest run op by op"},
    {"layout-plan", plan_layouts, "activations between convolutions stay NHWC"},
    {"library-calls", plan_library_calls, "GEMM / conv calls, their epilogues and packable weights"},
    {"schedule", schedule, "kernels and ops in dependency order, program order among the ready"},
    {"buffer-plan", plan_buffers, "buffers freed after their last reader, dead inputs reused"},
    {"publish-plan", plan_publishing, "each output handed out as soon as it is final"},
    {"codegen", codegen, "each kernel's code for the target, from the finished plan"},
};

// <dir>/<graph hash>.<step>.<pass>.txt, so a listing reads in pipeline order.
void dump(const std::string& dir, const ir::Graph& g, size_t step, const char* pass,
          const std::string& text) {
  std::ostringstream name;
  name << dir << "/" << std::hex << g.hash << std::dec << "." << step << "." << pass << ".txt";
  std::ofstream(name.str()) << text;
}

}  // namespace

namespace {

constexpr size_t kPasses = sizeof(kPipeline) / sizeof(kPipeline[0]);
constexpr size_t kCodegen = kPasses - 1;  // the last pass writes the code

// Runs passes [begin, end) of the pipeline on r.program, timing each and
// dumping the program after it with DISC_DUMP_IR (its step number is its
// place in the pipeline, so a listing reads in order however it was split).
void run_range(CompileResult& r, const ir::Graph& graph, size_t begin, size_t end) {
  const std::string dump_dir = options::text(options::Id::kDumpIr);
  const bool dumping = !dump_dir.empty();
  if (dumping && begin == 0) dump(dump_dir, graph, 0, "input", graph.to_string());
  for (size_t k = begin; k < end; ++k) {
    const Pass& pass = kPipeline[k];
    auto start = std::chrono::steady_clock::now();
    pass.run(r.program);
    r.timings.push_back({pass.name, std::chrono::duration<double, std::milli>(
                                        std::chrono::steady_clock::now() - start).count()});
    if (dumping) dump(dump_dir, graph, k + 1, pass.name, r.program.to_string());
  }
}

}  // namespace

CompileResult plan(const ir::Graph& graph) {
  static_assert(std::string_view(kPipeline[kCodegen].name) == "codegen");
  CompileResult r{make_program(graph), {}};
  run_range(r, graph, 0, kCodegen);
  return r;
}

void write_code(CompileResult& r, const ir::Graph& graph) { run_range(r, graph, kCodegen, kPasses); }

CompileResult compile(const ir::Graph& graph) {
  CompileResult r = plan(graph);
  write_code(r, graph);
  return r;
}

std::vector<std::string> pass_names() {
  std::vector<std::string> names;
  for (const Pass& pass : kPipeline) names.push_back(pass.name);
  return names;
}

std::vector<PassInfo> pass_infos() {
  std::vector<PassInfo> infos;
  for (const Pass& pass : kPipeline) infos.push_back({pass.name, pass.why});
  return infos;
}

namespace {
[[noreturn]] void unknown_pass(const std::string& name) {
  std::string known;
  for (const Pass& pass : kPipeline) known += std::string(known.empty() ? "" : ", ") + pass.name;
  throw std::invalid_argument("unknown pass '" + name + "' (passes: " + known + ")");
}
bool is_pass(const std::string& name) {
  for (const Pass& pass : kPipeline)
    if (name == pass.name) return true;
  return false;
}
}  // namespace

std::vector<std::string> passes_until(const std::string& last) {
  if (!is_pass(last)) unknown_pass(last);
  std::vector<std::string> names;
  for (const Pass& pass : kPipeline) {
    names.push_back(pass.name);
    if (last == pass.name) break;
  }
  return names;
}

void run_passes(Program& p, const std::vector<std::string>& names) {
  for (const std::string& name : names)
    if (!is_pass(name)) unknown_pass(name);
  // Passes after shape-constraints read its symbols; without them they
  // would index empty dims, so say which pass to add instead.
  bool after_shapes = false;
  for (const Pass& pass : kPipeline) {
    const bool selected = std::find(names.begin(), names.end(), pass.name) != names.end();
    const bool has_dims = std::all_of(p.ops.begin(), p.ops.end(), [](const ProgramOp& op) {
      return op.dims.size() == op.node->outputs.size();
    });
    if (selected && after_shapes && !has_dims)
      throw std::invalid_argument(std::string(pass.name) +
                                  " needs the symbolic dims of shape-constraints: select it too, or use --until");
    if (selected) pass.run(p);
    after_shapes = after_shapes || std::string_view(pass.name) == "shape-constraints";
  }
}

}  // namespace disc::lowering
