// Codegen of fusion groups: one MLIR function per group, shape-generic
// (sizes and strides are runtime arguments).
//
//   kLoop     element-wise + broadcast: one pass over the iteration space
//   kInput    a reduction along the last dim with its element-wise producers
//   kStitch   reduction -> element-wise -> reduction along the last dim:
//               softmax       max, sum exp(x - max) (exp stored), scale
//               _safe_softmax the same; a row that is all -inf gives 0
//               log_softmax   max, sum exp(x - max), x - max - log(sum)
//               backward      sum, element-wise
//               layer norm    mean, variance, normalize + affine (and writes
//                             mean and rstd per row); its backward: two sums,
//                             then grad_input with the weight / bias grads
//                             summed per column
//             and a sum over all leading dims (a bias grad) sums per column
//
// The group's element-wise producers are computed inside the kernel, in
// every pass that reads them, and stored only where the rest of the graph
// needs them. Values are f32; bf16 and f16 tensors are loaded and stored as
// their bits and every bf16 or f16 op's result is rounded as ATen rounds it
// (bfloat16.cpp, float16.cpp). Each pass over the innermost dim has a vector<16xf32> body and
// a masked vector tail (the last n % 16) when the inputs are contiguous
// along it (checked at run time), and a strided scalar loop otherwise.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "lowering/codegen/common/group_analysis.h"
#include "lowering/program.h"

namespace disc::lowering {

// A kernel's interface (plan.h) and its code.
struct FusedKernel : KernelInterface {
  std::string name;
  std::string mlir;
};

// The kernel for group `g` (its interface as plan_fused_kernel gives it), or
// nullopt with `why` set.
//
// Signature (memrefs are 1-D, flat buffers):
//   @name(%in0..: memref<?xT>, %out0..: memref<?xf32>, %sizes: memref<?xindex>,
//         %strides: memref<?xindex> (input k, axis a at k*rank+a),
//         %scalars: memref<?xf64>, %begin, %end, %chunk: index)
// iterating dim 0 over [begin, end) and all other dims fully; %chunk is the
// row of the kPerColumn partial-sum buffers this launch writes.
std::optional<FusedKernel> emit_fused_kernel(const Program& p, uint32_t g, std::string* why);

}  // namespace disc::lowering
