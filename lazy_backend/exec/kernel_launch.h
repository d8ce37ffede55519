// Launches a generated kernel (lowering/codegen/cpu/fused_kernel.h) on ATen
// tensors: sizes, broadcast strides and runtime scalars of *this* graph are
// its arguments, dim 0 is split across ATen's thread pool.
#pragma once
#include <ATen/Tensor.h>

#include <vector>

#include "lowering/codegen/cpu/fused_kernel.h"
#include "runtime/cpu/mlir_jit.h"

namespace disc {

// Reads the kernel's inputs from `values` (by graph node, then output) and
// stores its outputs there. A defined `into[j]` is the buffer output j is
// written into (one of the inputs, see FusedKernel::loads_before_stores);
// the others are allocated. Returns how many parts at::parallel_for split
// the launch into: the threads that shared it.
int64_t launch_fused_kernel(const lowering::FusedKernel& spec, runtime::PackedFn fn,
                            const ir::Graph& g, std::vector<std::vector<at::Tensor>>& values,
                            const std::vector<at::Tensor>& into = {});

}  // namespace disc
