#include "lowering/codegen/cuda/kernels.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "lowering/codegen/cuda/emitter.h"
#include "lowering/codegen/common/group_analysis.h"
#include "lowering/ir/hash.h"
#include "lowering/ops.h"

namespace disc::lowering {

namespace {

// The C type a buffer of dtype `t` holds, or nullptr.
const char* c_type(ir::DType t) {
  switch (t) {
    case ir::DType::kFloat32: return "float";
    case ir::DType::kFloat64: return "double";
    case ir::DType::kInt64: return "long long";
    case ir::DType::kInt32: return "int";
    case ir::DType::kBool: return "unsigned char";  // 0 or 1, as torch stores them
    case ir::DType::kBFloat16: return "unsigned short";  // the bits
    default: return nullptr;
  }
}

// A sum / mean / amax over the leading dims: its result (output 0 of the
// row op) is per column. Layer norm's backward sums per column too, but
// its outputs 1 and 2, beside a row op's output 0.
bool reduces_columns(const KernelInterface& k) {
  return std::any_of(k.outputs.begin(), k.outputs.end(), [](const KernelOutput& o) {
    return o.extent == KernelOutput::Extent::kPerColumn && o.index == 0;
  });
}

// bf16 as ATen converts: widening is a shift; narrowing rounds to nearest,
// ties to even, and a NaN becomes the quiet NaN 0x7FC0 (bfloat16.cpp).
constexpr const char* kPrelude =
    R"(static __device__ __forceinline__ float disc_bf16_to_f32(unsigned short b) {
  return __uint_as_float(static_cast<unsigned>(b) << 16);
}
static __device__ __forceinline__ unsigned short disc_f32_to_bf16(float f) {
  if (f != f) return 0x7FC0;
  const unsigned u = __float_as_uint(f);
  return static_cast<unsigned short>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static __device__ __forceinline__ float disc_round_bf16(float f) {
  return disc_bf16_to_f32(disc_f32_to_bf16(f));
}
static __device__ __forceinline__ float disc_neg_inf() { return __uint_as_float(0xff800000u); }
// max that propagates NaN from either side, as torch's amax.
static __device__ __forceinline__ float disc_max_nan(float a, float b) {
  return (a > b || a != a) ? a : b;
}
// v combined over the block by `f` (disc_add, disc_max), for every thread:
// warp shuffles, then the warps' results through shared memory. blockDim.x
// is a multiple of warpSize.
struct disc_add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct disc_max {
  __device__ float operator()(float a, float b) const { return disc_max_nan(a, b); }
};
template <class F>
static __device__ float disc_block_reduce(float v, float* part, float identity, F f) {
  for (int o = warpSize / 2; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warps = (blockDim.x + warpSize - 1) / warpSize;
  __syncthreads();
  if (threadIdx.x % warpSize == 0) part[threadIdx.x / warpSize] = v;
  __syncthreads();
  float total = identity;
  for (int w = 0; w < warps; ++w) total = f(total, part[w]);
  return total;
}
)";

}  // namespace

std::optional<CudaKernel> emit_cuda_kernel(const Program& p, uint32_t g, std::string* why) {
  std::optional<KernelInterface> k = plan_fused_kernel(p, g, why);
  if (!k) return std::nullopt;
  const bool loop = k->kind == FusionKind::kLoop;
  std::ostringstream params;
  for (size_t i = 0; i < k->inputs.size(); ++i) {
    const char* t = c_type(k->input_dtypes[i]);
    if (!t) {
      if (why) *why = "input dtype " + std::string(ir::dtype_name(k->input_dtypes[i]));
      return std::nullopt;
    }
    params << "const " << t << "* __restrict__ in" << i << ", ";
  }
  for (size_t i = 0; i < k->outputs.size(); ++i) {
    const KernelOutput& o = k->outputs[i];
    const bool bf16 = output_dtype(p, o) == ir::DType::kBFloat16;
    params << (bf16 ? "unsigned short" : "float") << "* __restrict__ out" << i << ", ";
  }
  params << "const long long* __restrict__ sizes, const long long* __restrict__ strides, "
            "const double* __restrict__ scalars, long long "
         << (loop ? "total" : "rows");
  CudaEmitter e(p, *k);
  const bool column = !loop && reduces_columns(*k);
  std::optional<std::string> body = loop ? e.loop_body() : column ? e.column_body() : e.row_body(why);
  if (!body) return std::nullopt;
  char name[40];
  std::snprintf(name, sizeof name, "disc_%s_%016llx", loop ? "loop" : "row",
                static_cast<unsigned long long>(ir::hash_string(params.str() + *body)));
  CudaKernel out;
  static_cast<KernelInterface&>(out) = *k;
  out.launch = loop ? CudaKernel::Launch::kElements : column ? CudaKernel::Launch::kColumns : CudaKernel::Launch::kRows;
  out.name = name;
  out.source = std::string(kPrelude) + "\nextern \"C\" __global__ void " + name + "(" +
               params.str() + ") {\n" + *body + "}\n";
  return out;
}

}  // namespace disc::lowering
