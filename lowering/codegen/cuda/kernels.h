// The CUDA target's code for fusion groups: CUDA C++ text that NVRTC
// compiles for the GPU at hand
// (runtime/cuda/nvrtc.h). The group, its inputs, outputs and runtime scalars are
// the CPU kernel's (plan_fused_kernel), and so are the values: f32
// arithmetic, bf16 loaded as its bits and rounded after every bf16 op as
// ATen rounds, the same formulas op for op (value_emitter.cpp).
//
// Shape-generic, like the CPU kernels: sizes and input strides (input k,
// axis a at k * rank + a; 0 where it broadcasts) are arguments, so one
// compiled kernel serves every size.
//   kLoop (element-wise, broadcasts): one thread per element of the space
//     in a grid-stride loop (any launch configuration);
//   kInput (sum / mean / amax over the last dim) and kStitch (softmax,
//     log_softmax, _safe_softmax and their backward, layer norm and its
//     backward): one block per row (rows grid-strided), its threads
//     striding over the row's columns in each of the CPU kernel's passes, a
//     pass's partials combined over the block by warp shuffles and shared
//     memory; blockDim.x a multiple of warpSize. Layer norm backward's
//     weight and bias gradients go to the block's own partial row
//     ([gridDim.x, n]);
//   column reductions (sum / mean / amax over the leading dims): a thread
//     per column of a chunk of rows, writing the chunk's partial row
//     ([gridDim.y, n], or one per index of dim 0 for per_outer).
//   Per-column partials are added up (and a mean divided) by the launcher,
//   as the CPU kernels' chunks are.
//
//   extern "C" __global__ void NAME(const T0* in0, ..., O0* out0, ...,
//       const long long* sizes, const long long* strides,
//       const double* scalars, long long total_or_rows)
//
// T is float, double, long long, int, unsigned char (bool) or unsigned short
// (bf16 bits); outputs are float or unsigned short, written contiguously.
#pragma once
#include <optional>
#include <string>

#include "lowering/program.h"

namespace disc::lowering {

struct CudaKernel : KernelInterface {
  // How the launcher shapes the grid (any size gives the same results):
  //   kElements  1-D, threads grid-stride over `total` elements;
  //   kRows      1-D, a block per row (grid-strided), blockDim.x a multiple
  //              of warpSize; per-column outputs have gridDim.x partial rows;
  //   kColumns   2-D, x over the columns, y over chunks of rows; per-column
  //              outputs have gridDim.y partial rows (sizes[0] if per_outer).
  enum class Launch { kElements, kRows, kColumns };
  Launch launch = Launch::kElements;
  std::string name;    // the kernel's symbol, unique to its text
  std::string source;  // CUDA C++
};

// The kernel of group `g`, or nullopt with `why` set: a row op without CUDA
// codegen, an input dtype without a C type, or a group the planner declines
// (plan_fused_kernel).
std::optional<CudaKernel> emit_cuda_kernel(const Program& p, uint32_t g, std::string* why);

}  // namespace disc::lowering
