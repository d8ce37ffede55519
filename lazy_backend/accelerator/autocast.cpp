// torch.autocast("disc"): the CPU autocast policy on the AutocastPrivateUse1
// key, one row per op in autocast_ops.def. disc runs on the CPU, so the same
// ops gain from bfloat16 / float16 (GEMMs, convolutions, attention), need
// float32 (losses, reductions that accumulate, linear algebra, FFTs) or
// promote their inputs to the widest type (cat, stack). The lower-precision
// dtype is torch.autocast's `dtype` (torch.get_autocast_dtype).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace at::autocast {
namespace {

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define AUTOCAST_OP(op, policy) KERNEL_PRIVATEUSEONE(op, policy)
#define AUTOCAST_OVERLOAD(op, overload, policy) KERNEL_PRIVATEUSEONE(op, overload, policy)
#include "lazy_backend/accelerator/autocast_ops.def"
#undef AUTOCAST_OP
#undef AUTOCAST_OVERLOAD
}

}  // namespace
}  // namespace at::autocast
