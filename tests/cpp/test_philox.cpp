// Philox4x32-10 against the known-answer vectors of its authors (Random123's
// kat_vectors), and dropout_f32: each element drawn from the word philox.h
// names (the vector code against the one-block function), its keep rate,
// scaling, and that any split of a stream draws the same numbers.
#include <gtest/gtest.h>

#include <cmath>
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
