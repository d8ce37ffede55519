// Hand-vectorized runtime code (Philox dropout, the fused attention's rows)
// is written once with GCC's vector types and compiled once per x86-64
// level, then picked by cpu_isa(): so DISC_CPU_ISA caps it as it caps the
// JIT and oneDNN, and a capped run on one machine checks what a CPU of the
// lower level runs. (GCC's target_clones would pick by asking the CPU.)
//
// A vector function's body is an always_inline function of default target;
// per level, a wrapper marked DISC_AT_AVX512 / DISC_AT_AVX2 (or none, for
// the baseline) calls it, and the body is compiled into each wrapper with
// that level's instructions. by_level() picks the wrapper. Elsewhere than
// x86 there is one level: the vector types are the target's own (NEON).
#pragma once
#include <cstdint>

namespace disc::runtime {

enum class VectorLevel : uint8_t {
  kBaseline,  // x86-64 (SSE2), or any non-x86 target
  kAvx2,      // x86-64-v3
  kAvx512,    // x86-64-v4
};

// The level cpu_isa() allows.
VectorLevel vector_level();

// Whether this CPU can run `level`'s code (tests run every level it can).
bool vector_level_runs(VectorLevel level);

const char* vector_level_name(VectorLevel level);

#if defined(__x86_64__)
#define DISC_AT_AVX512 __attribute__((target("arch=x86-64-v4")))
#define DISC_AT_AVX2 __attribute__((target("arch=x86-64-v3")))
#else
#define DISC_AT_AVX512
#define DISC_AT_AVX2
#endif

// GCC vector types N lanes wide, for code written once for every level: a
// level's code uses as many lanes as its registers hold (lanes()). A type
// wider than the registers has GCC move vectors through memory and emulate
// operations piecewise (16 float lanes on AVX2 ran Philox dropout 6x and the
// attention's rows ~5x slower than on AVX-512, where 2x is the width's
// share). Specialized per width: GCC 12 drops vector_size from an alias
// whose size depends on a template parameter.
template <int N>
struct Vec;
#define DISC_VECTOR_TYPES(N)                                                   \
  template <>                                                                  \
  struct Vec<N> {                                                              \
    using U32 = uint32_t __attribute__((vector_size(4 * N)));                  \
    using I32 = int32_t __attribute__((vector_size(4 * N)));                   \
    using F32 = float __attribute__((vector_size(4 * N)));                     \
    using U64 = uint64_t __attribute__((vector_size(4 * N))); /* N / 2 lanes */ \
    using U16 = uint16_t __attribute__((vector_size(2 * N)));                  \
    using U8 = uint8_t __attribute__((vector_size(N)));                        \
  };
DISC_VECTOR_TYPES(4)
DISC_VECTOR_TYPES(8)
DISC_VECTOR_TYPES(16)
#undef DISC_VECTOR_TYPES

// N floats at p as one vector, and a vector stored at p (any alignment).
// Vectors pass between such functions only once they are inlined into a
// level's code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <int N>
__attribute__((always_inline)) inline typename Vec<N>::F32 load_lanes(const float* p) {
  typename Vec<N>::F32 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <int N>
__attribute__((always_inline)) inline void store_lanes(float* p, typename Vec<N>::F32 v) {
  __builtin_memcpy(p, &v, sizeof v);
}
#pragma GCC diagnostic pop

// 32-bit lanes in a register of the level: 16 at AVX-512, 8 at AVX2, 4 at
// SSE2 and on other targets (NEON).
constexpr int lanes(VectorLevel level) {
  return level == VectorLevel::kAvx512 ? 16 : level == VectorLevel::kAvx2 ? 8 : 4;
}

// The function for `level` among one function's per-level wrappers.
template <class Fn>
Fn by_level(VectorLevel level, Fn avx512, Fn avx2, Fn baseline) {
  switch (level) {
    case VectorLevel::kAvx512: return avx512;
    case VectorLevel::kAvx2: return avx2;
    case VectorLevel::kBaseline: break;
  }
  return baseline;
}

}  // namespace disc::runtime
