// bfloat16 <-> float32 by their bits (bf16 is the high half of an f32),
// rounding to nearest even with NaN to the quiet NaN, as torch does: for
// the few values the runtime writes itself (an empty GEMM's or
// convolution's bias).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace disc::runtime {

inline float bf16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

}  // namespace disc::runtime
