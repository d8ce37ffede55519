// Philox4x32-10 against the known-answer vectors of its authors (Random123's
// kat_vectors), and dropout_f32: its keep rate, scaling, and that any split
// of a stream draws the same numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/philox.h"

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
  const int64_t n = 1001;  // not a multiple of 4: the last block is partial
  std::vector<char> whole(n), parts(n);
  dropout_f32(7, 0.5f, 2.0f, 0, n, nullptr, nullptr, reinterpret_cast<bool*>(whole.data()));
  for (int64_t begin : {0, 3, 500, 997}) {
    const int64_t end = begin == 0 ? 3 : begin == 3 ? 500 : begin == 500 ? 997 : n;
    dropout_f32(7, 0.5f, 2.0f, begin, end, nullptr, nullptr, reinterpret_cast<bool*>(parts.data()));
  }
  EXPECT_EQ(whole, parts);
  std::vector<char> other(n);
  dropout_f32(8, 0.5f, 2.0f, 0, n, nullptr, nullptr, reinterpret_cast<bool*>(other.data()));
  EXPECT_NE(whole, other);  // another seed, another mask
}
