// The CUDA target's code for fusion groups: CUDA C++ text that NVRTC
// compiles for the GPU at hand
// (runtime/nvrtc.h). The group, its inputs, outputs and runtime scalars are
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
//     log_softmax, _safe_softmax and their backward, layer norm): one block per row
//     (rows grid-strided), its threads striding over the row's columns in
//     each of the CPU kernel's passes, a pass's partials combined over the
//     block by warp shuffles and shared memory; blockDim.x a multiple of
//     warpSize. Layer norm's backward and column sums are declined.
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
  std::string name;    // the kernel's symbol, unique to its text
  std::string source;  // CUDA C++
};

// The kernel of group `g`, or nullopt with `why` set: a row op or a column
// sum without CUDA codegen yet, or a group the planner declines
// (plan_fused_kernel).
std::optional<CudaKernel> emit_cuda_kernel(const Program& p, uint32_t g, std::string* why);

}  // namespace disc::lowering
