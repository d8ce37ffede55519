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

// `func.func private @disc_expf(f32) -> f32` (width 0) or
// `@disc_expf16(vector<16xf32>) -> vector<16xf32>` (width 16), to append to
// a kernel module that calls it.
const std::string& expf_function(uint32_t width = 0);

}  // namespace disc::lowering
