#include "runtime/cpu/philox.h"
#pragma GCC diagnostic ignored "-Wpsabi"  // vectors passed by value stay inside this file

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

#define DISC_INLINE __attribute__((always_inline)) inline

// The low words of a's 64-bit lanes times m, as 64-bit products: one
// pmuludq per register. GCC 12 compiles the portable form, (a & 0xffffffff)
// * m, as a full 64-bit multiply (vpmullq, 3 uops, on AVX-512; three
// pmuludq with shifts and adds per register below it; a mask-only draw of
// 1.5M elements on one thread at AVX-512 took 3.3 ms that way, 1.2 ms this
// way), so on x86 each level names its instruction. The asm reads only its
// operands, so GCC schedules it as any arithmetic.
template <VectorLevel L>
DISC_INLINE typename Vec<lanes(L)>::U64 mul_low_words(typename Vec<lanes(L)>::U64 a, uint32_t m) {
  using U64 = typename Vec<lanes(L)>::U64;
  const U64 mv = U64{} + m;
#if defined(__x86_64__)
  U64 r;
  if constexpr (L == VectorLevel::kAvx512) {
    asm("vpmuludq %2, %1, %0" : "=v"(r) : "v"(a), "v"(mv));
  } else if constexpr (L == VectorLevel::kAvx2) {
    asm("vpmuludq %2, %1, %0" : "=x"(r) : "x"(a), "x"(mv));
  } else {
    r = a;
    asm("pmuludq %1, %0" : "+x"(r) : "x"(mv));
  }
  return r;
#else
  return (a & 0xffffffffu) * mv;
#endif
}

// hi and lo words of a * m per lane: even and odd lanes as 64-bit products.
template <VectorLevel L, class U32 = typename Vec<lanes(L)>::U32>
DISC_INLINE void mul_hi_lo(const U32& a, uint32_t m, U32& hi, U32& lo) {
  using U64 = typename Vec<lanes(L)>::U64;
  const U64 wide = (U64)(a);
  const U64 even = mul_low_words<L>(wide, m);
  const U64 odd = mul_low_words<L>(wide >> 32, m);
  const U64 l = (even & 0xffffffffu) | (odd << 32);
  const U64 h = (even >> 32) | (odd & 0xffffffff00000000ull);
  lo = (U32)(l);
  hi = (U32)(h);
}

// Blocks first .. first + N - 1 under `key`, one per lane, as many as the
// level's registers hold (Vec, lanes(): vector_level.h; written per word,
// Philox is ~25 scalar instructions an element): word j of block first + l
// is w[j][l]. first's low word is at most 2^32 - 16 and lanes add less than 16,
// so it never carries into the high word.
template <VectorLevel L, class U32 = typename Vec<lanes(L)>::U32>
DISC_INLINE void philox_lanes(uint64_t first, std::array<uint32_t, 2> key, U32 (&w)[4]) {
  U32 lane;
  for (int l = 0; l < lanes(L); ++l) lane[l] = static_cast<uint32_t>(l);
  U32 c0 = lane + static_cast<uint32_t>(first), c1 = U32{} + static_cast<uint32_t>(first >> 32);
  U32 c2 = {}, c3 = {};
  for (int r = 0; r < 10; ++r) {
    if (r) key = {key[0] + kW0, key[1] + kW1};
    U32 hi0, lo0, hi1, lo1;
    mul_hi_lo<L>(c0, kM0, hi0, lo0);
    mul_hi_lo<L>(c2, kM1, hi1, lo1);
    const U32 n0 = hi1 ^ c1 ^ key[0], n2 = hi0 ^ c3 ^ key[1];
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
  }
  w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
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

// How dropout_rows reads and writes an element type, N at a time as one
// float vector; the 16-bit types convert with integer vector ops, which
// every level vectorizes.
struct F32Codec {
  using Element = float;
  template <int N>
  DISC_INLINE static void load(const float* x, typename Vec<N>::F32& v) {
    std::memcpy(&v, x, sizeof v);
  }
  template <int N>
  DISC_INLINE static void store(float* y, const typename Vec<N>::F32& v) {
    std::memcpy(y, &v, sizeof v);
  }
};

// bfloat16 is float's top half: widened exactly by a shift, narrowed to
// nearest even as c10::BFloat16 does (any NaN to the quiet NaN 0x7fc0).
struct BF16Codec {
  using Element = uint16_t;
  template <int N>
  DISC_INLINE static void load(const uint16_t* x, typename Vec<N>::F32& v) {
    using U32 = typename Vec<N>::U32;
    typename Vec<N>::U16 h;
    std::memcpy(&h, x, sizeof h);
    const U32 bits = __builtin_convertvector(h, U32) << 16;
    v = (typename Vec<N>::F32)(bits);
  }
  template <int N>
  DISC_INLINE static void store(uint16_t* y, const typename Vec<N>::F32& v) {
    using U32 = typename Vec<N>::U32;
    const U32 bits = (U32)(v);
    const U32 rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const U32 out = v == v ? rounded : U32{} + 0x7fc0u;
    const typename Vec<N>::U16 h = __builtin_convertvector(out, typename Vec<N>::U16);
    std::memcpy(y, &h, sizeof h);
  }
};

// IEEE float16 as c10::Half converts it, in integer steps (GCC 12 turns
// _Float16 vectors into one conversion per element, or libgcc calls).
struct F16Codec {
  using Element = uint16_t;
  // Exact: exponent rebiased by 112; subnormals as (2^-14 + m 2^-24) - 2^-14.
  template <int N>
  DISC_INLINE static void load(const uint16_t* x, typename Vec<N>::F32& v) {
    using U32 = typename Vec<N>::U32;
    using F32 = typename Vec<N>::F32;
    typename Vec<N>::U16 h16;
    std::memcpy(&h16, x, sizeof h16);
    const U32 h = __builtin_convertvector(h16, U32);
    const U32 shifted = (h & 0x7fffu) << 13;
    const U32 exponent = shifted & 0x0f800000u;  // f16's 0x7c00, moved
    U32 bits = shifted + (112u << 23);
    bits = exponent == 0x0f800000u ? bits + (112u << 23) : bits;  // inf, NaN
    const U32 small = bits + (1u << 23);
    const F32 subnormal = (F32)(small) - 6.103515625e-05f;  // 2^-14
    bits = exponent == 0 ? (U32)(subnormal) : bits;
    bits |= (h & 0x8000u) << 16;
    v = (F32)(bits);
  }
  // To nearest even: normal results by adding the rounding bias to the
  // bits, subnormal ones by letting a float addition round at 2^-24;
  // 65520 and up carry into inf, any NaN is 0x7e00 with its sign.
  template <int N>
  DISC_INLINE static void store(uint16_t* y, const typename Vec<N>::F32& v) {
    using U32 = typename Vec<N>::U32;
    using F32 = typename Vec<N>::F32;
    const U32 all = (U32)(v);
    const U32 sign = all & 0x80000000u, bits = all ^ sign;
    const U32 odd = (bits >> 13) & 1u;
    const U32 normal = (bits - (112u << 23) + 0xfffu + odd) >> 13;
    const F32 magnitude = (F32)(bits);
    const F32 shifted = magnitude + 0.5f;  // 2^-1: its last bit is 2^-24
    const U32 subnormal = (U32)(shifted) - 0x3f000000u;
    U32 out = bits < (113u << 23) ? subnormal : normal;
    out = bits >= (143u << 23) ? (bits > 0x7f800000u ? U32{} + 0x7e00u : U32{} + 0x7c00u) : out;
    const auto h = __builtin_convertvector(out | (sign >> 16), typename Vec<N>::U16);
    std::memcpy(y, &h, sizeof h);
  }
};

// A vector through the codec and back: what the element type holds of it.
template <class Codec, int N>
DISC_INLINE void round_trip(const typename Vec<N>::F32& v, typename Vec<N>::F32& out) {
  typename Codec::Element e[N];
  Codec::template store<N>(e, v);
  Codec::template load<N>(e, out);
}

// y = x * mask * scale in float, rounded once to the element type: ATen's
// `input.mul(mask).mul_(scale)` with the mask 0 or 1 (a dropped inf or NaN
// gives NaN, a dropped negative -0) and the scale in the element type, as
// ATen's C++ multiplies by a double. Element e takes word (e % 64) / 16 of
// block e / 64 * 16 + e % 16, so every lane width draws the same mask. A
// part of N elements at either end of the range goes through a buffer of N.
// Compiled once per vector level (vector_level.h).
template <class Codec, VectorLevel L, int N = lanes(L)>
DISC_INLINE void dropout_rows(uint64_t seed, float keep, float scale, int64_t begin, int64_t end,
                              const typename Codec::Element* x, typename Codec::Element* y,
                              bool* mask) {
  using Element = typename Codec::Element;
  using F32 = typename Vec<N>::F32;
  using I32 = typename Vec<N>::I32;
  using U8 = typename Vec<N>::U8;
  const std::array<uint32_t, 2> key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  constexpr float kUnit = 1.0f / 16777216.0f;  // 2^-24
  F32 scales;
  round_trip<Codec, N>(F32{} + scale, scales);
  for (int64_t group = begin / 64; group * 64 < end; ++group) {
    for (int64_t part = 0; part < 16; part += N) {
      typename Vec<N>::U32 w[4];
      philox_lanes<L>(static_cast<uint64_t>(group * 16 + part), key, w);
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t first = group * 64 + j * 16 + part;
        const int64_t lo = std::max(first, begin), hi = std::min(first + N, end);
        if (lo >= hi) continue;
        const typename Vec<N>::U32 top = w[j] >> 8;
        const F32 u = __builtin_convertvector((I32)(top), F32) * kUnit;
        const I32 kept = u < keep;  // all ones where kept
        // N bytes at once: a lane-by-lane store was ~15% of the function.
        const U8 bytes = __builtin_convertvector(kept & 1, U8);
        const int64_t lane = lo - first, n = hi - lo;
        if (n == N) {
          std::memcpy(mask + (lo - begin), &bytes, sizeof bytes);
        } else {
          std::memcpy(mask + (lo - begin), reinterpret_cast<const char*>(&bytes) + lane, n);
        }
        if (!x) continue;
        const F32 m = kept ? F32{} + 1.0f : F32{};
        F32 xv;
        if (n == N) {
          Codec::template load<N>(x + (lo - begin), xv);
          Codec::template store<N>(y + (lo - begin), xv * m * scales);
          continue;
        }
        Element buffer[N] = {};
        std::memcpy(buffer + lane, x + (lo - begin), n * sizeof(Element));
        Codec::template load<N>(buffer, xv);
        Codec::template store<N>(buffer, xv * m * scales);
        std::memcpy(y + (lo - begin), buffer + lane, n * sizeof(Element));
      }
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
  dropout_rows<Codec, VectorLevel::kAvx512>(seed, keep, scale, begin, end, x, y, mask);
}

template <class Codec>
DISC_AT_AVX2 void dropout_avx2(uint64_t seed, float keep, float scale, int64_t begin, int64_t end,
                               const typename Codec::Element* x, typename Codec::Element* y,
                               bool* mask) {
  dropout_rows<Codec, VectorLevel::kAvx2>(seed, keep, scale, begin, end, x, y, mask);
}

template <class Codec>
void dropout_baseline(uint64_t seed, float keep, float scale, int64_t begin, int64_t end,
                      const typename Codec::Element* x, typename Codec::Element* y, bool* mask) {
  dropout_rows<Codec, VectorLevel::kBaseline>(seed, keep, scale, begin, end, x, y, mask);
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
