// Codegen of kLoop fusion groups: one MLIR function per group that computes
// every value the rest of the graph needs, over a shape-generic iteration
// space (sizes and strides are runtime arguments).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "lowering/program.h"

namespace disc::lowering {

struct LoopKernel {
  std::string name;
  std::string mlir;
  uint32_t rank = 0;                    // of the iteration space (>= 1)
  std::vector<ir::GraphRef> inputs;     // values read from outside the group
  std::vector<ir::DType> input_dtypes;
  std::vector<uint32_t> outputs;        // group ops whose output 0 is needed outside
  // Runtime scalars in argument order: (op index, runtime slot).
  std::vector<std::pair<uint32_t, uint32_t>> runtime;
};

// The kernel for group `g`, or nullopt with `why` set when the group holds an
// op or dtype the codegen does not handle yet (the ops then run one by one).
//
// Signature of the generated function (memrefs are 1-D, flat buffers):
//   @name(%in0..: memref<?xT>, %out0..: memref<?xf32>, %sizes: memref<?xindex>,
//         %strides: memref<?xindex> (input k, axis a at k*rank+a; output
//         buffers are contiguous), %scalars: memref<?xf64>, %begin, %end: index)
// iterating dim 0 over [begin, end) and all other dims fully.
std::optional<LoopKernel> emit_loop_kernel(const Program& p, uint32_t g,
                                           const std::vector<bool>& used_outside,
                                           std::string* why);

}  // namespace disc::lowering
