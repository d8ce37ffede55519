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
