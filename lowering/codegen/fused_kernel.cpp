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
//   fused_kernel_analysis.cpp  ops, inputs, outputs; groups the codegen declines
//   kernel_skeleton.cpp        signature, chunk loop, passes over a row
//   kernel_loads_stores.cpp    loads, stores, producers at a column
//   row_plans.cpp              the passes of each row op (softmax, layer norm, ...)
#include "lowering/codegen/fused_kernel.h"

#include "lowering/codegen/kernel_emitter.h"

namespace disc::lowering {

KernelEmitter::KernelEmitter(const Program& p, uint32_t g)
    : p_(p), group_(p.groups[g]), used_outside_(used_outside_groups(p)) {
  // One name per kind: equal groups give equal text, and the JIT cache
  // compiles each distinct kernel once per process.
  loop_ = group_.kind == FusionKind::kLoop;
  kernel_.group = g;
  kernel_.kind = group_.kind;
  kernel_.name = loop_ ? "loop_kernel" : "row_kernel";
  for (uint32_t op : group_.ops) in_group_[op] = true;
  if (!loop_) row_op_ = group_.ops.back();
}

std::optional<KernelInterface> KernelEmitter::plan(std::string* why) {
  if (!analyze(why)) return std::nullopt;
  return static_cast<const KernelInterface&>(kernel_);
}

std::optional<FusedKernel> KernelEmitter::run(std::string* why) {
  if (!analyze(why)) return std::nullopt;
  emit();
  return kernel_;
}

std::optional<KernelInterface> plan_fused_kernel(const Program& p, uint32_t g, std::string* why) {
  return KernelEmitter(p, g).plan(why);
}

std::optional<FusedKernel> emit_fused_kernel(const Program& p, uint32_t g, std::string* why) {
  return KernelEmitter(p, g).run(why);
}

}  // namespace disc::lowering
