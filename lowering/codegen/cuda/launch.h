// The launch shape of a CUDA kernel (kernels.h) for the sizes of one
// run, chosen on the host at each launch: one compiled kernel serves every
// sequence length and batch size, each launched to fill the GPU. Any shape
// gives the same results (the kernels are grid-strided); this one is meant
// to be fast.
#pragma once
#include <cstdint>
#include <vector>

#include "lowering/codegen/cuda/kernels.h"

namespace disc::lowering {

struct CudaLaunchShape {
  unsigned grid_x = 1, grid_y = 1, block_x = 32;
  // How many partial rows each per-column output has in this launch (the
  // launcher allocates [partial_rows, n] and combines them); 0 if none.
  unsigned partial_rows = 0;
};

// For kernel `k` over a space of `sizes` (the kernel's `sizes` argument) on
// a GPU with `multiprocessors` SMs:
//   kElements  256 threads a block, enough blocks for 8 per SM at most;
//   kRows      a block per row, a thread per ~4 columns (whole warps, 32 to
//              1024), as many blocks as fill the SMs' 2048 threads, at most
//              one per row;
//   kColumns   128 columns a block, chunks of rows so that about 4 blocks
//              run per SM (one chunk per index of dim 0 for per_outer).
CudaLaunchShape cuda_launch_shape(const CudaKernel& k, const std::vector<int64_t>& sizes, int multiprocessors);

}  // namespace disc::lowering
