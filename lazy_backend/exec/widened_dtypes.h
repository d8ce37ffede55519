// Dtypes CUDA's kernels take and ATen's CPU kernels refuse (integer histc,
// which transformers' mixture-of-experts layers send to every accelerator).
// Libraries treat disc as an accelerator, so disc runs such an op in a
// wider dtype the CPU kernel takes, exact for the op, and casts the results
// back; counted per op as widened.<op>.
#pragma once
#include <ATen/Tensor.h>

#include <cstdint>
#include <optional>

namespace disc {

// The dtype `op` (an interned op name, lowering/ir/node.h) computes in on
// the CPU when its input has `dtype`; nullopt when the CPU kernel takes
// `dtype` itself. Asked for every op replayed on ATen: an integer lookup.
std::optional<at::ScalarType> widened_dtype(uint32_t op, at::ScalarType dtype);

}  // namespace disc
