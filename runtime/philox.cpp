#include "runtime/philox.h"

namespace disc::runtime {

namespace {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (Weyl)

inline void round(PhiloxBlock& c, const std::array<uint32_t, 2>& k) {
  const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

}  // namespace

PhiloxBlock philox4x32(PhiloxBlock counter, std::array<uint32_t, 2> key) {
  for (int r = 0; r < 10; ++r) {
    if (r) key = {key[0] + kW0, key[1] + kW1};
    round(counter, key);
  }
  return counter;
}

void dropout_f32(uint64_t seed, float keep, float scale, int64_t begin, int64_t end, const float* x,
                 float* y, bool* mask) {
  const std::array<uint32_t, 2> key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  constexpr float kUnit = 1.0f / 16777216.0f;  // 2^-24
  for (int64_t block = begin / 4; block * 4 < end; ++block) {
    const uint64_t b = static_cast<uint64_t>(block);
    const PhiloxBlock r = philox4x32({static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32), 0, 0}, key);
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t i = block * 4 + j;
      if (i < begin || i >= end) continue;
      const bool kept = static_cast<float>(r[j] >> 8) * kUnit < keep;
      mask[i] = kept;
      if (x) y[i] = kept ? x[i] * scale : 0.0f;
    }
  }
}

}  // namespace disc::runtime
