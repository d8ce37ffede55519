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
using U16x16 = uint16_t __attribute__((vector_size(32)));

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

#define DISC_INLINE __attribute__((always_inline)) inline

// How dropout_rows reads and writes an element type, 16 at a time as one
// float vector; the 16-bit types convert with integer vector ops, which
// every level vectorizes.
struct F32Codec {
  using Element = float;
  DISC_INLINE static void load(const float* x, F32x16& v) { std::memcpy(&v, x, sizeof v); }
  DISC_INLINE static void store(float* y, const F32x16& v) { std::memcpy(y, &v, sizeof v); }
};

// bfloat16 is float's top half: widened exactly by a shift, narrowed to
// nearest even as c10::BFloat16 does (any NaN to the quiet NaN 0x7fc0).
struct BF16Codec {
  using Element = uint16_t;
  DISC_INLINE static void load(const uint16_t* x, F32x16& v) {
    U16x16 h;
    std::memcpy(&h, x, sizeof h);
    const U32x16 bits = __builtin_convertvector(h, U32x16) << 16;
    v = reinterpret_cast<const F32x16&>(bits);
  }
  DISC_INLINE static void store(uint16_t* y, const F32x16& v) {
    const U32x16 bits = reinterpret_cast<const U32x16&>(v);
    const U32x16 rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const U32x16 out = v == v ? rounded : U32x16{} + 0x7fc0u;
    const U16x16 h = __builtin_convertvector(out, U16x16);
    std::memcpy(y, &h, sizeof h);
  }
};

// IEEE float16 as c10::Half converts it, in integer steps (GCC 12 turns
// _Float16 vectors into one conversion per element, or libgcc calls).
struct F16Codec {
  using Element = uint16_t;
  // Exact: exponent rebiased by 112; subnormals as (2^-14 + m 2^-24) - 2^-14.
  DISC_INLINE static void load(const uint16_t* x, F32x16& v) {
    U16x16 h16;
    std::memcpy(&h16, x, sizeof h16);
    const U32x16 h = __builtin_convertvector(h16, U32x16);
    const U32x16 shifted = (h & 0x7fffu) << 13;
    const U32x16 exponent = shifted & 0x0f800000u;  // f16's 0x7c00, moved
    U32x16 bits = shifted + (112u << 23);
    bits = exponent == 0x0f800000u ? bits + (112u << 23) : bits;  // inf, NaN
    const U32x16 small = bits + (1u << 23);
    const F32x16 subnormal = reinterpret_cast<const F32x16&>(small) - 6.103515625e-05f;  // 2^-14
    bits = exponent == 0 ? reinterpret_cast<const U32x16&>(subnormal) : bits;
    bits |= (h & 0x8000u) << 16;
    v = reinterpret_cast<const F32x16&>(bits);
  }
  // To nearest even: normal results by adding the rounding bias to the
  // bits, subnormal ones by letting a float addition round at 2^-24;
  // 65520 and up carry into inf, any NaN is 0x7e00 with its sign.
  DISC_INLINE static void store(uint16_t* y, const F32x16& v) {
    const U32x16 all = reinterpret_cast<const U32x16&>(v);
    const U32x16 sign = all & 0x80000000u, bits = all ^ sign;
    const U32x16 odd = (bits >> 13) & 1u;
    const U32x16 normal = (bits - (112u << 23) + 0xfffu + odd) >> 13;
    const F32x16 magnitude = reinterpret_cast<const F32x16&>(bits);
    const F32x16 shifted = magnitude + 0.5f;  // 2^-1: its last bit is 2^-24
    const U32x16 subnormal = reinterpret_cast<const U32x16&>(shifted) - 0x3f000000u;
    U32x16 out = bits < (113u << 23) ? subnormal : normal;
    out = bits >= (143u << 23) ? (bits > 0x7f800000u ? U32x16{} + 0x7e00u : U32x16{} + 0x7c00u) : out;
    const U16x16 h = __builtin_convertvector(out | (sign >> 16), U16x16);
    std::memcpy(y, &h, sizeof h);
  }
};

// A vector through the codec and back: what the element type holds of it.
template <class Codec>
DISC_INLINE void round_trip(const F32x16& v, F32x16& out) {
  typename Codec::Element e[16];
  Codec::store(e, v);
  Codec::load(e, out);
}

// y = x * mask * scale in float, rounded once to the element type: ATen's
// `input.mul(mask).mul_(scale)` with the mask 0 or 1 (a dropped inf or NaN
// gives NaN, a dropped negative -0) and the scale in the element type, as
// ATen's C++ multiplies by a double. A part of 16 elements at either end
// of the range goes through a buffer of 16.
// Compiled once per vector level (vector_level.h).
template <class Codec>
__attribute__((always_inline)) inline void dropout_rows(uint64_t seed, float keep, float scale,
                                                        int64_t begin, int64_t end,
                                                        const typename Codec::Element* x,
                                                        typename Codec::Element* y, bool* mask) {
  using Element = typename Codec::Element;
  const std::array<uint32_t, 2> key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  constexpr float kUnit = 1.0f / 16777216.0f;  // 2^-24
  F32x16 scales;
  round_trip<Codec>(F32x16{} + scale, scales);
  for (int64_t group = begin / 64; group * 64 < end; ++group) {
    Lanes r;
    philox16(static_cast<uint64_t>(group) * 16, key, r);
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t first = group * 64 + j * 16;
      const int64_t lo = std::max(first, begin), hi = std::min(first + 16, end);
      if (lo >= hi) continue;
      const F32x16 u = __builtin_convertvector((I32x16)(r.w[j] >> 8), F32x16) * kUnit;
      const I32x16 kept = u < keep;  // all ones where kept
      // 16 bytes at once: a lane-by-lane store was ~15% of the function.
      const U8x16 bytes = __builtin_convertvector(kept & 1, U8x16);
      const int64_t lane = lo - first, n = hi - lo;
      if (n == 16) {
        std::memcpy(mask + (lo - begin), &bytes, sizeof bytes);
      } else {
        std::memcpy(mask + (lo - begin), reinterpret_cast<const char*>(&bytes) + lane, n);
      }
      if (!x) continue;
      const F32x16 m = kept ? F32x16{} + 1.0f : F32x16{};
      F32x16 xv;
      if (n == 16) {
        Codec::load(x + (lo - begin), xv);
        Codec::store(y + (lo - begin), xv * m * scales);
        continue;
      }
      Element part[16] = {};
      std::memcpy(part + lane, x + (lo - begin), n * sizeof(Element));
      Codec::load(part, xv);
      Codec::store(part, xv * m * scales);
      std::memcpy(y + (lo - begin), part + lane, n * sizeof(Element));
    }
  }
}

template <class Codec>
using DropoutFn = void (*)(uint64_t, float, float, int64_t, int64_t, const typename Codec::Element*,
                           typename Codec::Element*, bool*);

template <class Codec>
DISC_AT_AVX512 void dropout_avx512(uint64_t seed, float keep, float scale, int64_t begin, int64_t end,
                                   const typename Codec::Element* x, typename Codec::Element* y,
                                   bool* mask) {
  dropout_rows<Codec>(seed, keep, scale, begin, end, x, y, mask);
}

template <class Codec>
DISC_AT_AVX2 void dropout_avx2(uint64_t seed, float keep, float scale, int64_t begin, int64_t end,
                               const typename Codec::Element* x, typename Codec::Element* y,
                               bool* mask) {
  dropout_rows<Codec>(seed, keep, scale, begin, end, x, y, mask);
}

template <class Codec>
void dropout_baseline(uint64_t seed, float keep, float scale, int64_t begin, int64_t end,
                      const typename Codec::Element* x, typename Codec::Element* y, bool* mask) {
  dropout_rows<Codec>(seed, keep, scale, begin, end, x, y, mask);
}

template <class Codec>
DropoutFn<Codec> dropout_for(VectorLevel level) {
  return by_level<DropoutFn<Codec>>(level, dropout_avx512<Codec>, dropout_avx2<Codec>,
                                    dropout_baseline<Codec>);
}

}  // namespace

void dropout_f32_at(VectorLevel level, uint64_t seed, float keep, float scale, int64_t begin,
                    int64_t end, const float* x, float* y, bool* mask) {
  dropout_for<F32Codec>(level)(seed, keep, scale, begin, end, x, y, mask);
}

void dropout_f32(uint64_t seed, float keep, float scale, int64_t begin, int64_t end, const float* x,
                 float* y, bool* mask) {
  static const DropoutFn<F32Codec> fn = dropout_for<F32Codec>(vector_level());
  fn(seed, keep, scale, begin, end, x, y, mask);
}

void dropout_reduced_at(VectorLevel level, ReducedFloat type, uint64_t seed, float keep, float scale,
                        int64_t begin, int64_t end, const uint16_t* x, uint16_t* y, bool* mask) {
  const auto fn = type == ReducedFloat::kBFloat16 ? dropout_for<BF16Codec>(level)
                                                  : dropout_for<F16Codec>(level);
  fn(seed, keep, scale, begin, end, x, y, mask);
}

void dropout_reduced(ReducedFloat type, uint64_t seed, float keep, float scale, int64_t begin,
                     int64_t end, const uint16_t* x, uint16_t* y, bool* mask) {
  static const DropoutFn<BF16Codec> bf16 = dropout_for<BF16Codec>(vector_level());
  static const DropoutFn<F16Codec> f16 = dropout_for<F16Codec>(vector_level());
  (type == ReducedFloat::kBFloat16 ? bf16 : f16)(seed, keep, scale, begin, end, x, y, mask);
}

}  // namespace disc::runtime
