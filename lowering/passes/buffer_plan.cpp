// buffer-plan: when each value's buffer is let go, and which buffers a step
// may write its results into.
//
// A value no later step reads (and that is no graph output) is released
// after the step that reads it last, so memory is reused within the run
// instead of holding every intermediate to the end. An op that writes an
// input in place (an optimizer's add_) may do so when it reads that input
// last and once; a kernel that loads every input before storing
// (KernelInterface::loads_before_stores) may write an output into the
// buffer of an input it reads last. An optimizer then updates its
// parameters and state in their buffers instead of a second copy each step.
//
//   step 4: %9 = aten::add_.Tensor(%1.0, %8.0)   last read [1, 0]  release %8.0
//
// A graph parameter's buffer is written only after the last step that may
// fail on its data (an opaque op: an index out of range): a graph that fails
// then has overwritten none of its inputs, so the sync can give every
// tensor it was to write its value from before the graph, and run the
// parts that did not fail again from the same inputs (sync/launch.cpp).
// The optimizer's updates come after the backward's last index op anyway.
//
// These are plans: the executor still checks at run time that nothing else
// shares the buffer (a view, a tensor the user holds).
#include <algorithm>
#include <map>

#include "lowering/passes/passes.h"

namespace disc::lowering {

namespace {

using Value = std::pair<uint32_t, uint32_t>;
constexpr size_t kOutput = SIZE_MAX;  // read after the run: a graph output

// The values step `s` reads.
std::vector<ir::GraphRef> reads_of(const Program& p, const Step& s) {
  if (s.kind == Step::Kind::kKernel) return p.plan.kernels[s.kernel].inputs;
  if (s.kind == Step::Kind::kGemmGroup) {
    std::vector<ir::GraphRef> reads;
    for (uint32_t m : p.gemm_groups[p.ops[s.op].gemm_group].ops)
      reads.insert(reads.end(), p.ops[m].inputs.begin(), p.ops[m].inputs.end());
    return reads;
  }
  return p.ops[s.op].inputs;
}

// Where buffers may be written in place, and from which step on graph
// parameters among them.
struct Writable {
  const std::map<Value, size_t>& last;  // value -> the last step that reads it
  size_t first_param_write;

  bool at(const Program& p, ir::GraphRef r, size_t step) const {
    if (last.at({r.node, r.index}) != step) return false;
    return step >= first_param_write || p.ops[r.node].cls != OpClass::kData;
  }
};

// The step after the last one that may fail on its data.
size_t after_last_fallible_step(const Program& p) {
  const std::vector<Step>& steps = p.plan.steps;
  for (size_t s = steps.size(); s-- > 0;)
    if (steps[s].kind == Step::Kind::kOp && may_fail_on_data(p.ops[steps[s].op].node->op)) return s + 1;
  return 0;
}

// Per kernel input: read last by this step, and writable there.
std::vector<bool> kernel_last_reads(const Program& p, const Step& s, size_t step, const Writable& w) {
  const KernelInterface& k = p.plan.kernels[s.kernel];
  if (!k.loads_before_stores) return {};
  std::vector<bool> mine;
  for (const ir::GraphRef& r : k.inputs) mine.push_back(w.at(p, r, step));
  return std::count(mine.begin(), mine.end(), true) ? mine : std::vector<bool>{};
}

// Per mutated input of an op: read last by this step, only once by it, and
// writable there.
std::vector<bool> op_last_reads(const Program& p, const Step& s, size_t step, const Writable& w) {
  const ProgramOp& op = p.ops[s.op];
  const std::vector<uint32_t>& mutated = op.node->mutated;
  std::vector<bool> mine(mutated.size(), false);
  bool any = false;
  for (size_t j = 0; j < mutated.size(); ++j) {
    const ir::GraphRef r = op.inputs[mutated[j]];
    const bool once = std::count(op.inputs.begin(), op.inputs.end(), r) == 1;
    mine[j] = once && w.at(p, r, step);
    any = any || mine[j];
  }
  return any ? mine : std::vector<bool>{};
}

}  // namespace

void plan_buffers(Program& p) {
  std::vector<Step>& steps = p.plan.steps;
  std::map<Value, size_t> last;  // value -> the last step that reads it
  for (size_t s = 0; s < steps.size(); ++s)
    for (const ir::GraphRef& r : reads_of(p, steps[s])) last[{r.node, r.index}] = s;
  for (const ir::GraphRef& r : p.outputs) last[{r.node, r.index}] = kOutput;
  for (Step& s : steps) s.release.clear();
  for (const auto& [value, step] : last)
    if (step != kOutput) steps[step].release.push_back({value.first, value.second});
  const Writable writable{last, after_last_fallible_step(p)};
  for (size_t s = 0; s < steps.size(); ++s) {
    Step& step = steps[s];
    if (step.kind == Step::Kind::kKernel) step.last_read = kernel_last_reads(p, step, s, writable);
    else if (step.kind == Step::Kind::kOp) step.last_read = op_last_reads(p, step, s, writable);
    else step.last_read.clear();
  }
}

}  // namespace disc::lowering
