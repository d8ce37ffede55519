// Emits MLIR text for a fusion group (see fused_kernel.h). softmax over
// [s1, s2]:
//
//   scf.for %i0 = %begin to %end {                     // rows, split across threads
//     %m = scf.if %contiguous -> f32 {                  // pass 1: max
//       vector<16xf32> loop over [0, n - n % 16), masked tail, reduce
//     } else { strided scalar loop }
//     %s = ... pass 2: e = exp(x - m), store e, sum e
//     ...      pass 3: out = e / s
//
// The group's element-wise producers are recomputed in every pass that reads
// them: a row is in cache, arithmetic is cheaper than a store and a reload.
//
// The work is split by responsibility (the emitter class: kernel_emitter.h):
//   common/group_analysis.cpp  ops, inputs, outputs; groups the codegen declines
//   kernel_skeleton.cpp        signature, chunk loop, passes over a row
//   kernel_loads_stores.cpp    loads, stores, producers at a column
//   row_plans.cpp              the passes of each row op (softmax, layer norm, ...)
#include "lowering/codegen/cpu/fused_kernel.h"

#include "lowering/codegen/cpu/kernel_emitter.h"

namespace disc::lowering {

std::optional<FusedKernel> KernelEmitter::run(std::string* why) {
  if (!analyze(why)) return std::nullopt;
  // One name per kind: equal groups give equal text, and the JIT cache
  // compiles each distinct kernel once per process.
  name_ = loop_ ? "loop_kernel" : "row_kernel";
  emit();
  FusedKernel k;
  static_cast<KernelInterface&>(k) = kernel_;
  k.name = name_;
  k.mlir = mlir_;
  return k;
}

std::optional<FusedKernel> emit_fused_kernel(const Program& p, uint32_t g, std::string* why) {
  return KernelEmitter(p, g).run(why);
}

}  // namespace disc::lowering
