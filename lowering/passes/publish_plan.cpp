// publish-plan: after which step each graph output is final, so that an
// executor hands it out then (a loss right after the forward, while the
// backward and the optimizer update still run). The step that makes an
// output is the last to write it: outputs are never written in place.
//
//   return (%7.0, %12.0)  ->  step 5: ... publish out 0 / step 11: ... publish out 1
#include "lowering/passes/passes.h"

namespace disc::lowering {

void plan_publishing(Program& p) {
  constexpr size_t kNone = SIZE_MAX;
  std::vector<Step>& steps = p.plan.steps;
  std::vector<size_t> maker(p.ops.size(), kNone);
  for (size_t s = 0; s < steps.size(); ++s) {
    const Step& step = steps[s];
    if (step.kind == Step::Kind::kKernel) {
      for (uint32_t op : p.groups[p.plan.kernels[step.kernel].group].ops) maker[op] = s;
    } else if (step.kind == Step::Kind::kGemmGroup) {
      for (uint32_t m : p.gemm_groups[p.ops[step.op].gemm_group].ops) maker[m] = s;
    } else {
      maker[step.op] = s;
    }
  }
  for (Step& s : steps) s.publish.clear();
  for (uint32_t o = 0; o < p.outputs.size(); ++o) {
    const size_t s = maker[p.outputs[o].node];
    if (s == kNone)
      throw CompileError("publish-plan", p.outputs[o].node, ir::op_name(p.ops[p.outputs[o].node].node->op),
                         "graph output " + std::to_string(o) + " is made by no step");
    steps[s].publish.push_back(o);
  }
}

}  // namespace disc::lowering
