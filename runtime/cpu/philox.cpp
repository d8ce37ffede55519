#include "runtime/cpu/philox.h"

#include <algorithm>
#include <cstring>

#include "runtime/cpu/vector_level.h"

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

// Sixteen blocks side by side, one per lane: GCC's vector extensions, so the
// same code is AVX-512, AVX2 or SSE2 as the function that inlines it is
// compiled for. Written per word, Philox is ~25 scalar instructions an
// element; this is ~6x faster on AVX-512.
using U32x16 = uint32_t __attribute__((vector_size(64)));
using U64x8 = uint64_t __attribute__((vector_size(64)));
using I32x16 = int32_t __attribute__((vector_size(64)));
using F32x16 = float __attribute__((vector_size(64)));
using U8x16 = uint8_t __attribute__((vector_size(16)));

struct Lanes {
  U32x16 w[4];
};

// hi and lo words of a * m per lane: even and odd lanes as 64-bit products.
__attribute__((always_inline)) inline void mul_hi_lo(const U32x16& a, uint32_t m, U32x16& hi,
                                                     U32x16& lo) {
  const U64x8 wide = reinterpret_cast<const U64x8&>(a);
  const U64x8 even = (wide & 0xffffffffu) * static_cast<uint64_t>(m);
  const U64x8 odd = (wide >> 32) * static_cast<uint64_t>(m);
  const U64x8 l = (even & 0xffffffffu) | (odd << 32);
  const U64x8 h = (even >> 32) | (odd & 0xffffffff00000000ull);
  lo = reinterpret_cast<const U32x16&>(l);
  hi = reinterpret_cast<const U32x16&>(h);
}

// Blocks first .. first + 15 under `key`: word j of block first + l is w[j][l].
__attribute__((always_inline)) inline void philox16(uint64_t first, std::array<uint32_t, 2> key,
                                                    Lanes& out) {
  const U32x16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  // first is a multiple of 16, so the low word never carries into the high one.
  U32x16 c0 = lane + static_cast<uint32_t>(first), c1 = U32x16{} + static_cast<uint32_t>(first >> 32);
  U32x16 c2 = {}, c3 = {};
  for (int r = 0; r < 10; ++r) {
    if (r) key = {key[0] + kW0, key[1] + kW1};
    U32x16 hi0, lo0, hi1, lo1;
    mul_hi_lo(c0, kM0, hi0, lo0);
    mul_hi_lo(c2, kM1, hi1, lo1);
    const U32x16 n0 = hi1 ^ c1 ^ key[0], n2 = hi0 ^ c3 ^ key[1];
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
  }
  out.w[0] = c0, out.w[1] = c1, out.w[2] = c2, out.w[3] = c3;
}

}  // namespace

uint64_t stream_seed(uint64_t seed, uint64_t offset) {
  return seed * 0x9e3779b97f4a7c15ULL ^ (offset + 0x632be59bd9b4e019ULL);
}

PhiloxBlock philox4x32(PhiloxBlock counter, std::array<uint32_t, 2> key) {
  for (int r = 0; r < 10; ++r) {
    if (r) key = {key[0] + kW0, key[1] + kW1};
    round(counter, key);
  }
  return counter;
}

namespace {

// Compiled once per vector level (vector_level.h).
__attribute__((always_inline)) inline void dropout_rows(uint64_t seed, float keep, float scale,
                                                        int64_t begin, int64_t end, const float* x,
                                                        float* y, bool* mask) {
  const std::array<uint32_t, 2> key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  constexpr float kUnit = 1.0f / 16777216.0f;  // 2^-24
  for (int64_t group = begin / 64; group * 64 < end; ++group) {
    Lanes r;
    philox16(static_cast<uint64_t>(group) * 16, key, r);
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t first = group * 64 + j * 16;
      const int64_t lo = std::max(first, begin), hi = std::min(first + 16, end);
      if (lo >= hi) continue;
      const F32x16 u = __builtin_convertvector((I32x16)(r.w[j] >> 8), F32x16) * kUnit;
      const I32x16 kept = u < keep;  // all ones where kept
      if (lo == first && hi == first + 16) {
        if (x) {
          F32x16 xv;
          std::memcpy(&xv, x + (first - begin), sizeof xv);
          const F32x16 yv = kept ? xv * scale : F32x16{};
          std::memcpy(y + (first - begin), &yv, sizeof yv);
        }
        // 16 bytes at once: a lane-by-lane store was ~15% of the function.
        const U8x16 bytes = __builtin_convertvector(kept & 1, U8x16);
        std::memcpy(mask + (first - begin), &bytes, sizeof bytes);
        continue;
      }
      for (int64_t i = lo; i < hi; ++i) {
        const bool k = kept[i - first] != 0;
        mask[i - begin] = k;
        if (x) y[i - begin] = k ? x[i - begin] * scale : 0.0f;
      }
    }
  }
}

using DropoutFn = void (*)(uint64_t, float, float, int64_t, int64_t, const float*, float*, bool*);

DISC_AT_AVX512 void dropout_avx512(uint64_t seed, float keep, float scale, int64_t begin, int64_t end,
                                   const float* x, float* y, bool* mask) {
  dropout_rows(seed, keep, scale, begin, end, x, y, mask);
}

DISC_AT_AVX2 void dropout_avx2(uint64_t seed, float keep, float scale, int64_t begin, int64_t end,
                               const float* x, float* y, bool* mask) {
  dropout_rows(seed, keep, scale, begin, end, x, y, mask);
}

void dropout_baseline(uint64_t seed, float keep, float scale, int64_t begin, int64_t end,
                      const float* x, float* y, bool* mask) {
  dropout_rows(seed, keep, scale, begin, end, x, y, mask);
}

}  // namespace

void dropout_f32_at(VectorLevel level, uint64_t seed, float keep, float scale, int64_t begin,
                    int64_t end, const float* x, float* y, bool* mask) {
  by_level<DropoutFn>(level, dropout_avx512, dropout_avx2, dropout_baseline)(seed, keep, scale, begin,
                                                                              end, x, y, mask);
}

void dropout_f32(uint64_t seed, float keep, float scale, int64_t begin, int64_t end, const float* x,
                 float* y, bool* mask) {
  static const DropoutFn fn =
      by_level<DropoutFn>(vector_level(), dropout_avx512, dropout_avx2, dropout_baseline);
  fn(seed, keep, scale, begin, end, x, y, mask);
}

}  // namespace disc::runtime
