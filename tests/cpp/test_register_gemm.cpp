// runtime/cpu/register_gemm.h at every vector level this CPU runs: each
// element of C is its k products summed in k order, one multiply-add at a
// time (bit for bit where the level fuses them), whatever its place in the
// register tiles, the column tail and the row remainder included; A read
// through any strides, B and C through row strides, nothing written outside
// C's m x n.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "random_floats.h"
#include "runtime/cpu/register_gemm.h"

namespace {

using disc::runtime::RegisterGemm;
using disc::runtime::VectorLevel;
using disc::testing::normal_floats;

constexpr float kSentinel = 7.f;

struct Case {
  int64_t m, n, k;
  bool a_transposed = false, add = false;
};

struct Operands {
  std::vector<float> a, b, c;
  int64_t lda, ldb, ldc;
};

// A as [m, k] rows (or [k, m], read transposed), B and C with rows 3
// elements longer than they need, the gaps NaN in B (a read would spread
// it) and the sentinel in C.
Operands operands(const Case& t) {
  Operands o;
  o.lda = t.a_transposed ? t.m : t.k;
  o.ldb = t.n + 3, o.ldc = t.n + 3;
  o.a = normal_floats(t.m * t.k, 1);
  o.b.assign(t.k * o.ldb, std::nanf(""));
  const std::vector<float> b = normal_floats(t.k * t.n, 2);
  for (int64_t p = 0; p < t.k; ++p)
    for (int64_t j = 0; j < t.n; ++j) o.b[p * o.ldb + j] = b[p * t.n + j];
  o.c.assign(t.m * o.ldc, kSentinel);
  const std::vector<float> c = normal_floats(t.m * t.n, 3);
  for (int64_t i = 0; i < t.m && t.add; ++i)
    for (int64_t j = 0; j < t.n; ++j) o.c[i * o.ldc + j] = c[i * t.n + j];
  return o;
}

float a_at(const Case& t, const Operands& o, int64_t i, int64_t p) {
  return t.a_transposed ? o.a[p * o.lda + i] : o.a[i * o.lda + p];
}

std::vector<float> run(VectorLevel level, const Case& t, const Operands& in) {
  Operands o = in;
  RegisterGemm g;
  g.m = t.m, g.n = t.n, g.k = t.k;
  g.a = o.a.data();
  g.a_row_stride = t.a_transposed ? 1 : o.lda;
  g.a_col_stride = t.a_transposed ? o.lda : 1;
  g.b = o.b.data(), g.b_row_stride = o.ldb;
  g.c = o.c.data(), g.c_row_stride = o.ldc, g.add = t.add;
  disc::runtime::register_gemm_at(level, g);
  return o.c;
}

void check(const Case& t) {
  const Operands in = operands(t);
  for (VectorLevel level : {VectorLevel::kBaseline, VectorLevel::kAvx2, VectorLevel::kAvx512}) {
    if (!disc::runtime::vector_level_runs(level)) continue;
    SCOPED_TRACE(std::string(disc::runtime::vector_level_name(level)) + " m " + std::to_string(t.m) +
                 " n " + std::to_string(t.n) + " k " + std::to_string(t.k));
    const std::vector<float> c = run(level, t, in);
    // The x86 levels above the baseline fuse each multiply-add.
    const bool fused = level != VectorLevel::kBaseline;
    for (int64_t i = 0; i < t.m; ++i) {
      for (int64_t j = 0; j < t.n; ++j) {
        const float start = t.add ? in.c[i * in.ldc + j] : 0.f;
        float in_order = start;
        double exact = start;
        for (int64_t p = 0; p < t.k; ++p) {
          const float x = a_at(t, in, i, p), y = in.b[p * in.ldb + j];
          in_order = fused ? std::fma(x, y, in_order) : in_order + x * y;
          exact += double(x) * y;
        }
        const float got = c[i * in.ldc + j];
        ASSERT_NEAR(got, exact, 1e-5 * t.k) << "(" << i << ", " << j << ")";
#if defined(__x86_64__)
        ASSERT_EQ(got, in_order) << "(" << i << ", " << j << ")";
#endif
      }
      for (int64_t j = t.n; j < in.ldc; ++j) ASSERT_EQ(c[i * in.ldc + j], kSentinel) << "wrote past row " << i;
    }
  }
}

TEST(RegisterGemm, WholeTilesMatchTheOrderedSum) { check({16, 64, 32}); }

// 37 columns: whole vectors, then a tail at every width; 13 rows: whole
// tiles, then a remainder at every tile height.
TEST(RegisterGemm, ColumnTailAndRowRemainder) { check({13, 37, 20}); }

TEST(RegisterGemm, TransposedAAddsIntoC) { check({21, 32, 50, /*a_transposed=*/true, /*add=*/true}); }

TEST(RegisterGemm, NarrowerThanAVectorAndOneProduct) {
  check({5, 3, 1});
  check({1, 1, 7, true, true});
}

TEST(RegisterGemm, FitsUpToTwoToTheTwentyProducts) {
  EXPECT_TRUE(disc::runtime::register_gemm_fits(128, 128, 64));
  EXPECT_FALSE(disc::runtime::register_gemm_fits(128, 128, 65));
}

}  // namespace
