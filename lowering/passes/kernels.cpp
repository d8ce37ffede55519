// kernels: which fusion groups run as one generated kernel each, with the
// interface the codegen will give them; the other groups' ops run one by one.
//
//   group 0 kLoop: %2 %3      -> kernel 0 (group 0 kLoop) in (%0.0, %1.0) out (%3.0)
//   group 1 kLoop: %5         -> runs op by op: a lone element-wise op
//   group 2 kInput: %7 %8     -> declined: aten::sum.dim_IntList: reduces ...
//
// A lone element-wise op gains nothing from a kernel (ATen's is already
// vectorized), unless its math outweighs its memory traffic: GELU's erf or
// tanh, which the generated kernel computes at the host's full vector
// width (ATen's CPU build dispatches AVX2 at most on some CPUs). Or unless
// ATen's kernel is slow: native_dropout_backward promotes the bool mask to
// a float tensor and multiplies twice (1.17 ms for [8, 128, 384] on 2
// threads of an AMD EPYC, where a mul takes 0.02). A group the codegen
// declines is listed with its reason (counted as codegen.declined, printed
// by DISC_DEBUG_COMPILE).
#include "lowering/codegen/common/group_analysis.h"
#include "lowering/passes/passes.h"

namespace disc::lowering {

namespace {

constexpr size_t kMinFusedLoopOps = 2;

bool worth_a_kernel(const Program& p, const FusionGroup& g) {
  if (g.kind != FusionKind::kLoop || g.ops.size() >= kMinFusedLoopOps) return true;
  const Op op = op_of(p.ops[g.ops.front()].node->op);
  return op == Op::kGelu || op == Op::kGeluBackward || op == Op::kNativeDropoutBackward;
}

}  // namespace

void select_kernels(Program& p) {
  ExecutionPlan& plan = p.plan;
  plan.kernels.clear();
  plan.declined.clear();
  plan.kernel_of_group.assign(p.groups.size(), -1);
  for (uint32_t g = 0; g < p.groups.size(); ++g) {
    if (!worth_a_kernel(p, p.groups[g])) continue;
    std::string why;
    if (std::optional<KernelInterface> k = plan_fused_kernel(p, g, &why)) {
      plan.kernel_of_group[g] = static_cast<int32_t>(plan.kernels.size());
      plan.kernels.push_back(std::move(*k));
    } else {
      plan.declined.push_back({g, why});
    }
  }
}

}  // namespace disc::lowering
