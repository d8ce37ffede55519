// Philox4x32-10 against the known-answer vectors of its authors (Random123's
// kat_vectors), and dropout: each element drawn from the word philox.h
// names (the vector code against the one-block function), its keep rate,
// scaling as ATen's product does, bfloat16 and float16 rounded once, and
// that any split of a stream draws the same numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/cpu/philox.h"

using disc::runtime::dropout_f32;
using disc::runtime::philox4x32;
using disc::runtime::PhiloxBlock;

TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (PhiloxBlock{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxBlock{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxBlock{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, DropoutDrawsEachElementFromItsWord) {
  const uint64_t seed = 0x0123456789abcdefULL;
  const std::array<uint32_t, 2> key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const int64_t begin = 5, end = 300;  // partial groups of 64 at both ends
  std::vector<float> x(end, 0.0f), y(end, -1.0f);
  std::vector<char> mask(end, 2);
  for (int64_t i = begin; i < end; ++i) x[i] = static_cast<float>(i % 97) - 40.0f;
  // The arrays start at element `begin`.
  dropout_f32(seed, 0.6f, 2.5f, begin, end, x.data() + begin, y.data() + begin,
              reinterpret_cast<bool*>(mask.data()) + begin);
  for (int64_t i = 0; i < end; ++i) {
    if (i < begin) {
      ASSERT_EQ(mask[i], 2) << "wrote before begin at " << i;
      continue;
    }
    const uint64_t block = static_cast<uint64_t>(i / 64) * 16 + static_cast<uint64_t>(i % 16);
    const PhiloxBlock r =
        philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0}, key);
    const bool kept = static_cast<float>(r[(i / 16) % 4] >> 8) / 16777216.0f < 0.6f;
    ASSERT_EQ(mask[i] != 0, kept) << "element " << i;
    ASSERT_EQ(y[i], kept ? x[i] * 2.5f : 0.0f) << "element " << i;
  }
}

TEST(Philox, DropoutKeepsItsShareAndScales) {
  const int64_t n = 1 << 20;
  std::vector<float> x(n, 2.0f), y(n);
  std::vector<char> mask(n);
  dropout_f32(42, 0.9f, 1.0f / 0.9f, 0, n, x.data(), y.data(), reinterpret_cast<bool*>(mask.data()));
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    kept += mask[i];
    ASSERT_FLOAT_EQ(y[i], mask[i] ? 2.0f / 0.9f : 0.0f);
  }
  // Binomial(n, 0.9): standard deviation ~307; 6 of them.
  EXPECT_NEAR(static_cast<double>(kept), 0.9 * n, 6 * std::sqrt(n * 0.9 * 0.1));
}

TEST(Philox, AnySplitOfAStreamDrawsTheSame) {
  const int64_t n = 1001;  // not a multiple of 64: the last group is partial
  std::vector<char> whole(n), parts(n);
  dropout_f32(7, 0.5f, 2.0f, 0, n, nullptr, nullptr, reinterpret_cast<bool*>(whole.data()));
  for (int64_t begin : {0, 3, 500, 997}) {  // splits inside groups
    const int64_t end = begin == 0 ? 3 : begin == 3 ? 500 : begin == 500 ? 997 : n;
    dropout_f32(7, 0.5f, 2.0f, begin, end, nullptr, nullptr, reinterpret_cast<bool*>(parts.data()) + begin);
  }
  EXPECT_EQ(whole, parts);
  std::vector<char> other(n);
  dropout_f32(8, 0.5f, 2.0f, 0, n, nullptr, nullptr, reinterpret_cast<bool*>(other.data()));
  EXPECT_NE(whole, other);  // another seed, another mask
}

// Each vector level's code (vector_level.h) draws the same mask and values:
// the mask is the composite's whatever the CPU.
TEST(Philox, EveryVectorLevelDrawsTheSame) {
  using disc::runtime::VectorLevel;
  const int64_t begin = 5, end = 1000;
  std::vector<float> x(end - begin);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 89) * 0.25f - 7.0f;
  auto draw = [&](VectorLevel level, std::vector<float>& y, std::vector<char>& mask) {
    y.assign(x.size(), -1.0f), mask.assign(x.size(), 2);
    disc::runtime::dropout_f32_at(level, 0xfeedULL, 0.7f, 1.0f / 0.7f, begin, end, x.data(), y.data(),
                                  reinterpret_cast<bool*>(mask.data()));
  };
  std::vector<float> want_y, y;
  std::vector<char> want_mask, mask;
  draw(VectorLevel::kBaseline, want_y, want_mask);
  for (VectorLevel level : {VectorLevel::kAvx2, VectorLevel::kAvx512}) {
    if (!disc::runtime::vector_level_runs(level)) continue;
    draw(level, y, mask);
    EXPECT_EQ(y, want_y) << disc::runtime::vector_level_name(level);
    EXPECT_EQ(mask, want_mask) << disc::runtime::vector_level_name(level);
  }
}

// ATen's input.mul(mask).mul_(scale): a dropped inf or NaN is NaN, a dropped
// negative is -0, a kept value is x * scale.
TEST(Philox, DropoutMultipliesByTheMaskAsATenDoes) {
  const int64_t n = 256;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(n), y(n);
  std::vector<char> mask(n);
  for (int64_t i = 0; i < n; ++i) x[i] = i % 4 == 0 ? inf : i % 4 == 1 ? NAN : i % 4 == 2 ? -3.0f : 3.0f;
  dropout_f32(3, 0.5f, 2.0f, 0, n, x.data(), y.data(), reinterpret_cast<bool*>(mask.data()));
  int dropped_negatives = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = x[i] * (mask[i] ? 1.0f : 0.0f) * 2.0f;
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(y[i])) << "element " << i;
      continue;
    }
    ASSERT_EQ(y[i], want) << "element " << i;
    ASSERT_EQ(std::signbit(y[i]), std::signbit(want)) << "element " << i;
    dropped_negatives += !mask[i] && x[i] < 0;
  }
  EXPECT_GT(dropped_negatives, 0);
}

namespace {

using disc::runtime::ReducedFloat;

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even, written as a reference apart from the kernel's:
// the dropped low half against the halfway point.
uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t low = bits & 0xffffu, high = bits >> 16;
  return static_cast<uint16_t>(low > 0x8000u || (low == 0x8000u && (high & 1u)) ? high + 1 : high);
}

// float16 by its definition, in double: a portable reference apart from the
// kernel's integer steps (C++ has no _Float16 on every target).
float f16_to_float(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
  double magnitude = exponent == 0    ? std::ldexp(fraction, -24)
                     : exponent == 31 ? (fraction ? NAN : INFINITY)
                                      : std::ldexp(1024 + fraction, exponent - 25);
  return static_cast<float>(h & 0x8000 ? -magnitude : magnitude);
}

// Rounded to the nearest multiple of the quantum at its binade (2^-24 at
// the least), ties to even (nearbyint's default mode), then encoded.
uint16_t float_to_f16(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double magnitude = std::fabs(static_cast<double>(f));
  if (magnitude == 0) return sign;
  if (std::isinf(magnitude)) return sign | 0x7c00;
  int e;
  std::frexp(magnitude, &e);
  const double quantum = std::ldexp(1.0, std::max(e - 11, -24));
  const double value = std::nearbyint(magnitude / quantum) * quantum;
  if (value == 0) return sign;
  const double m = std::frexp(value, &e);
  if (e <= -14) return sign | static_cast<uint16_t>(value / std::ldexp(1.0, -24));
  if (e + 14 >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(((e + 14) << 10) | static_cast<int>(m * 2048 - 1024));
}

// Every bit pattern (NaN, inf, subnormals too) times the scale, itself
// rounded to the type: products that round both ways, tie (by 1.5),
// overflow and underflow; the same mask as the f32 kernel's. With keep 1,
// each value comes back as it was: the conversions both ways are exact.
void check_reduced(ReducedFloat type, disc::runtime::VectorLevel level, float keep) {
  const bool bf16 = type == ReducedFloat::kBFloat16;
  const int64_t begin = 3, end = begin + 3 * 65536 + 7;  // every pattern 3 times, partial ends
  const float scale = 1.0f / keep;
  std::vector<uint16_t> x(end - begin), y(end - begin);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i * 40503u);  // odd: a permutation
  std::vector<char> mask(x.size()), want_mask(x.size());
  disc::runtime::dropout_reduced_at(level, type, 99, keep, scale, begin, end, x.data(), y.data(),
                                    reinterpret_cast<bool*>(mask.data()));
  dropout_f32(99, keep, scale, begin, end, nullptr, nullptr, reinterpret_cast<bool*>(want_mask.data()));
  ASSERT_EQ(mask, want_mask);
  const float rounded_scale = bf16 ? bf16_to_float(float_to_bf16(scale)) : f16_to_float(float_to_f16(scale));
  for (size_t i = 0; i < x.size(); ++i) {
    const float wide = bf16 ? bf16_to_float(x[i]) : f16_to_float(x[i]);
    const float product = wide * (mask[i] ? 1.0f : 0.0f) * rounded_scale;
    const uint16_t want = bf16 ? float_to_bf16(product) : float_to_f16(product);
    if (std::isnan(product)) {
      ASSERT_TRUE(std::isnan(bf16 ? bf16_to_float(y[i]) : f16_to_float(y[i]))) << "element " << i;
    } else {
      ASSERT_EQ(y[i], want) << "element " << i << " of " << x[i];
    }
  }
}

}  // namespace

TEST(Philox, ReducedFloatDropoutRoundsOnceAtEveryVectorLevel) {
  using disc::runtime::VectorLevel;
  for (VectorLevel level : {VectorLevel::kBaseline, VectorLevel::kAvx2, VectorLevel::kAvx512}) {
    if (!disc::runtime::vector_level_runs(level)) continue;
    SCOPED_TRACE(disc::runtime::vector_level_name(level));
    for (float keep : {0.7f, 2.0f / 3.0f, 1.0f}) {
      check_reduced(ReducedFloat::kBFloat16, level, keep);
      check_reduced(ReducedFloat::kHalf, level, keep);
    }
  }
}
