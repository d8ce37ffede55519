// codegen: the pipeline's last stage. Writes each planned kernel's code for
// the program's target from the finished plan, so that what an executor
// compiles (and a persistent cache keys on) is decided by the compiler, and
// disc-opt prints it:
//
//   kernel 0 kLoop group 0: in %0.0 %1.0 out %3.0  -> code 0 @loop_kernel
//                                                      func.func @loop_kernel(...
//
// The kernels pass kept only groups the analysis accepts; a target's
// emitter may still decline one (a row op without CUDA code, an input dtype
// without a C type), which is a compile error naming the group: the plan
// would otherwise run a kernel that has no code.
#include "lowering/codegen/cpu/fused_kernel.h"
#include "lowering/codegen/cuda/kernels.h"
#include "lowering/passes/passes.h"

namespace disc::lowering {

namespace {

std::optional<KernelCode> code_for(const Program& p, uint32_t group, std::string* why) {
  if (p.target == Target::kCuda) {
    std::optional<CudaKernel> k = emit_cuda_kernel(p, group, why);
    if (!k) return std::nullopt;
    return KernelCode{k->name, k->source};
  }
  std::optional<FusedKernel> k = emit_fused_kernel(p, group, why);
  if (!k) return std::nullopt;
  return KernelCode{k->name, k->mlir};
}

}  // namespace

void codegen(Program& p) {
  p.plan.code.clear();
  for (const KernelInterface& k : p.plan.kernels) {
    std::string why;
    std::optional<KernelCode> code = code_for(p, k.group, &why);
    if (!code) {
      const uint32_t first = p.groups[k.group].ops.front();
      throw CompileError("codegen", first, ir::op_name(p.ops[first].node->op),
                         "the kernel of group " + std::to_string(k.group) + " has no " +
                             target_name(p.target) + " code: " + why);
    }
    p.plan.code.push_back(std::move(*code));
  }
}

}  // namespace disc::lowering
