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
// needs them. Each pass over the innermost dim has a vector<16xf32> body and
// a masked vector tail (the last n % 16) when the inputs are contiguous
// along it (checked at run time), and a strided scalar loop otherwise.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "lowering/program.h"

namespace disc::lowering {

struct KernelOutput {
  enum class Extent : uint8_t {
    kElements,   // one value per element of the space
    kPerRow,     // one per row (last-dim reductions, mean, rstd)
    // One per column, summed over all rows (bias grads, layer norm's weight
    // grads): each launch chunk writes its partial sums to row %chunk of a
    // [chunks, n] buffer, and the launcher adds the chunks up.
    kPerColumn,
  };
  // How the launcher folds a kPerColumn output's chunk partials: their sum
  // (sum, and mean, which is then divided by the number of rows), or their
  // max (amax: partials start at -inf, NaN propagates).
  enum class Combine : uint8_t { kSum, kMean, kMax };
  uint32_t op = 0;     // the group op
  uint32_t index = 0;  // its output
  Extent extent = Extent::kElements;
  Combine combine = Combine::kSum;
};

struct FusedKernel {
  std::string name;
  std::string mlir;
  FusionKind kind = FusionKind::kLoop;
  // Rank of the iteration space: kLoop >= 1, kInput / kStitch >= 2 (the
  // space is padded with leading 1s to it).
  uint32_t rank = 0;
  ir::GraphRef space;                   // the value whose sizes are the space
  std::vector<ir::GraphRef> inputs;     // values read from outside the group
  std::vector<ir::DType> input_dtypes;
  std::vector<KernelOutput> outputs;    // written contiguously, f32
  std::vector<std::pair<uint32_t, uint32_t>> runtime;  // (op, runtime slot)
  // The column reduction spans dims 1..rank-2 only (x.sum(1) of [B, S, H]):
  // the launcher runs one chunk per index of dim 0, and the [dim 0, n]
  // partial buffer is the result itself. The kernel text is the same.
  bool per_outer = false;
  // Each element's inputs are all loaded before anything is stored at it
  // (kLoop: one pass, inputs loaded first). An output may then be written
  // into the buffer of an input read at the same index (same sizes, both
  // contiguous) that nothing reads after the kernel: an optimizer's update
  // lands in the parameter's own buffer.
  bool loads_before_stores = false;
};

// The kernel for group `g`, or nullopt with `why` set when the group has an
// op, dtype or dim the codegen does not handle (its ops then run one by one).
//
// Signature (memrefs are 1-D, flat buffers):
//   @name(%in0..: memref<?xT>, %out0..: memref<?xf32>, %sizes: memref<?xindex>,
//         %strides: memref<?xindex> (input k, axis a at k*rank+a),
//         %scalars: memref<?xf64>, %begin, %end, %chunk: index)
// iterating dim 0 over [begin, end) and all other dims fully; %chunk is the
// row of the kPerColumn partial-sum buffers this launch writes.
std::optional<FusedKernel> emit_fused_kernel(const Program& p, uint32_t g,
                                             const std::vector<bool>& used_outside,
                                             std::string* why);

}  // namespace disc::lowering
