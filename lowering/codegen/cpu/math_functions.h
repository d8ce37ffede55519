// Math functions that generated kernels call instead of math.exp: MLIR's
// own polynomial for exp reduces its argument in one step and loses up to
// ~80 ulp near the ends of the float range; these do a two-constant
// (Cody-Waite) reduction and stay within ~2 ulp. Written as MLIR functions
// of arith ops only, so that LLVM inlines them and the loop vectorizer widens
// them like any other arithmetic.
#pragma once
#include <cstdint>
#include <string>

namespace disc::lowering {

// How exp applies its 2^k: from exponent bits (any target), or by AVX-512's
// vscalefps (the x86vector dialect; vector<16xf32> only).
enum class Pow2 : uint8_t { kExponentBits, kScalef };

// `func.func private @disc_expf(f32) -> f32` (width 0) or
// `@disc_expf16(vector<16xf32>) -> vector<16xf32>` (width 16), to append to
// a kernel module that calls it.
const std::string& expf_function(uint32_t width = 0, Pow2 pow2 = Pow2::kExponentBits);

// What generated kernels use for width 16: kScalef where disc's ISA
// (runtime/cpu/cpu_isa.h) has AVX-512F (tests compare both variants:
// MlirJit/ExpVariants.*).
Pow2 host_pow2();

}  // namespace disc::lowering
