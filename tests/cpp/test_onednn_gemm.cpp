// runtime/cpu/onednn_gemm against a naive loop: every transpose of A and B, bias,
// relu, batched, sizes 0 / 1 / odd, and one primitive for every size.
#include "runtime/cpu/onednn_gemm.h"
#include "runtime/bf16.h"
#include "runtime/options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace disc::runtime;

namespace {

// A batch of rows x cols matrices, stored row-major or transposed
// (column-major, as x.t() of a contiguous tensor is).
struct Mat {
  int64_t batch, rows, cols;
  bool transposed;
  std::vector<float> data;
  Mat(int64_t b, int64_t r, int64_t c, bool t, std::mt19937& rng)
      : batch(b), rows(r), cols(c), transposed(t), data(b * r * c) {
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    for (float& v : data) v = d(rng);
  }
  GemmOperand operand() const {
    return {data.data(), rows * cols, transposed ? 1 : cols, transposed ? rows : 1};
  }
  float at(int64_t b, int64_t i, int64_t j) const {
    GemmOperand o = operand();
    return data[b * o.batch_stride + i * o.row_stride + j * o.col_stride];
  }
};

struct Case {
  int64_t batch, m, n, k;
  bool batched, ta, tb, bias, relu;
  bool gelu = false;  // the exact (erf) GELU instead
};

// Runs one case through oneDNN and the loop; returns how the primitive was used.
PrimitiveUse check(const Case& c) {
  std::mt19937 rng(static_cast<unsigned>(c.m * 131 + c.n * 17 + c.k + c.batch * 7));
  const int64_t batch = c.batched ? c.batch : 1;
  Mat a(batch, c.m, c.k, c.ta, rng), b(batch, c.k, c.n, c.tb, rng), bias(1, 1, c.n, false, rng);
  std::vector<float> out(batch * c.m * c.n, NAN);
  Gemm g;
  g.batched = c.batched;
  g.batch = c.batch;
  g.m = c.m, g.n = c.n, g.k = c.k;
  g.a = a.operand(), g.b = b.operand();
  g.bias = c.bias ? bias.data.data() : nullptr;
  g.c = out.data();
  g.act = c.gelu ? Activation::kGelu : c.relu ? Activation::kRelu : Activation::kNone;
  PrimitiveUse use = onednn_gemm(g);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double want = c.bias ? bias.data[j] : 0.0;
        for (int64_t l = 0; l < c.k; ++l) want += double(a.at(p, i, l)) * b.at(p, l, j);
        if (c.relu) want = std::max(want, 0.0);
        if (c.gelu) want = 0.5 * want * (1.0 + std::erf(want / std::sqrt(2.0)));
        const float got = out[(p * c.m + i) * c.n + j];
        EXPECT_NEAR(got, want, 1e-4 * (1 + c.k))
            << "b" << p << " i" << i << " j" << j << " m" << c.m << " n" << c.n << " k" << c.k
            << " ta" << c.ta << " tb" << c.tb << " bias" << c.bias << " relu" << c.relu
            << " gelu" << c.gelu;
      }
  return use;
}

// Each case on both primitives: the one made for its sizes (the default
// for a small unbatched GEMM), and the generic one.
void check_twice(const Case& c) {
  const PrimitiveUse first = check(c);
  if (c.batched) EXPECT_TRUE(first == PrimitiveUse::kCreated || first == PrimitiveUse::kReused);
  else EXPECT_TRUE(first == PrimitiveUse::kSizedCreated || first == PrimitiveUse::kSized);
  set_sized_gemms(false);
  EXPECT_NE(check(c), PrimitiveUse::kSized);
  set_sized_gemms(true);
}

}  // namespace

TEST(OnednnGemm, MatchesNaiveLoopForEveryTransposeBiasAndRelu) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool bias : {false, true})
        for (bool relu : {false, true})
          for (auto [m, n, k] : {std::tuple{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {64, 10, 784}})
            check_twice({1, m, n, k, false, ta, tb, bias, relu});
}

TEST(OnednnGemm, BatchedMatchesNaiveLoop) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t batch : {1, 3})
        check_twice({batch, 5, 7, 9, true, ta, tb, false, false});
  check_twice({4, 6, 3, 11, true, false, true, false, true});  // relu batched too
}

TEST(OnednnGemm, EmptySizesRunNoPrimitive) {
  EXPECT_EQ(check({1, 0, 5, 3, false, false, false, true, false}), PrimitiveUse::kNone);
  EXPECT_EQ(check({1, 4, 0, 3, false, false, false, false, false}), PrimitiveUse::kNone);
  EXPECT_EQ(check({0, 4, 5, 3, true, false, false, false, false}), PrimitiveUse::kNone);
  // k == 0: the product is empty, the output is the bias, rectified.
  EXPECT_EQ(check({1, 4, 5, 0, false, false, false, true, true}), PrimitiveUse::kNone);
  EXPECT_EQ(check({2, 4, 5, 0, true, false, false, false, false}), PrimitiveUse::kNone);
}

TEST(OnednnGemm, OneGenericPrimitiveServesEverySizeAndLayout) {
  clear_gemm_primitives();
  set_sized_gemms(false);
  EXPECT_EQ(check({1, 5, 8, 16, false, false, false, true, true}), PrimitiveUse::kCreated);
  EXPECT_EQ(check({1, 37, 8, 16, false, false, false, true, true}), PrimitiveUse::kReused);
  EXPECT_EQ(check({1, 1, 9, 3, false, false, false, true, true}), PrimitiveUse::kReused);
  // Another layout, post-op or rank is another primitive.
  EXPECT_EQ(check({1, 37, 9, 3, false, true, false, true, true}), PrimitiveUse::kCreated);
  EXPECT_EQ(check({1, 5, 8, 16, false, false, false, true, false}), PrimitiveUse::kCreated);
  EXPECT_EQ(check({3, 5, 8, 16, true, false, false, false, false}), PrimitiveUse::kCreated);
  EXPECT_EQ(check({7, 2, 8, 16, true, false, false, false, false}), PrimitiveUse::kReused);
  set_sized_gemms(true);
}

// Generic primitives are cached for every thread (see test_onednn_conv's
// PrimitivesMadeOnOneThreadRunOnAnother): made on one thread, each runs right
// on another, including shapes oneDNN splits along k (a scratchpad reduction).
TEST(OnednnGemm, GenericPrimitivesMadeOnOneThreadRunOnAnother) {
  clear_gemm_primitives();
  set_sized_gemms(false);
  const Case cases[] = {{1, 64, 256, 784, false, false, true, true, true},
                        {1, 4, 8, 8192, false, true, false, false, false},
                        {3, 33, 65, 129, true, false, true, false, false}};
  for (const Case& c : cases) {
    std::thread maker([&] { EXPECT_EQ(check(c), PrimitiveUse::kCreated); });
    maker.join();
    std::thread user([&] { EXPECT_EQ(check(c), PrimitiveUse::kReused); });
    user.join();
  }
  set_sized_gemms(true);
}

TEST(OnednnGemm, GeluEpilogueIsTheErfGeluOnBothPrimitives) {
  // A Linear + GELU of a transformer's feed-forward block (inference), as
  // one oneDNN call with eltwise_gelu_erf; k = 0 takes the bias path.
  for (bool sized : {true, false}) {
    set_sized_gemms(sized);
    clear_gemm_primitives();
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{16, 48, 32}, {5, 7, 3}, {300, 64, 96},
                           {4, 6, 0}})
      for (bool bias : {false, true}) {
        Case c{1, m, n, k, false, false, true, bias, false};
        c.gelu = true;
        check(c);
      }
  }
  set_sized_gemms(true);
}

TEST(OnednnGemm, EverySmallSizeGetsItsOwnPrimitiveOnItsFirstCall) {
  clear_gemm_primitives();
  const Case fc{1, 64, 10, 128, false, false, true, true, true};  // nn.Linear(128, 10) + relu
  EXPECT_EQ(check(fc), PrimitiveUse::kSizedCreated);
  EXPECT_EQ(check(fc), PrimitiveUse::kSized);
  EXPECT_EQ(check({1, 65, 10, 128, false, false, true, true, true}), PrimitiveUse::kSizedCreated);
  EXPECT_EQ(check(fc), PrimitiveUse::kSized);
  clear_gemm_primitives();
  EXPECT_EQ(check(fc), PrimitiveUse::kSizedCreated);
  // Above 2^24 multiply-adds, and batched: the generic primitive.
  EXPECT_EQ(check({1, 256, 256, 257, false, false, true, true, false}), PrimitiveUse::kCreated);
  EXPECT_EQ(check({1, 256, 256, 257, false, false, true, true, false}), PrimitiveUse::kReused);
  EXPECT_EQ(check({2, 5, 7, 9, true, false, false, false, false}), PrimitiveUse::kCreated);
}

TEST(OnednnGemm, StridedViewsWithoutAUnitStrideAreRejected) {
  // Every other column of a 4 x 8 matrix, and its first 4 columns: the
  // caller copies them (runtime strides would select oneDNN's slow
  // reference matmul).
  std::vector<float> x(32, 1.f), y(16, 1.f), out(16);
  GemmOperand strided{x.data(), 32, 8, 2};
  EXPECT_FALSE(gemm_operand_supported(strided, 4, 4, 1));
  EXPECT_FALSE(gemm_operand_supported({x.data(), 32, 8, 1}, 4, 4, 1));
  EXPECT_TRUE(gemm_operand_supported({x.data(), 32, 8, 1}, 4, 8, 1));
  EXPECT_TRUE(gemm_operand_supported({x.data(), 32, 1, 4}, 4, 8, 1));  // transposed
  EXPECT_TRUE(gemm_operand_supported({x.data(), 32, 0, 1}, 1, 8, 1));  // one row: any row stride
  EXPECT_FALSE(gemm_operand_supported({x.data(), 0, 8, 1}, 4, 8, 2));  // broadcast batch
  EXPECT_TRUE(gemm_operand_supported({x.data(), 0, 8, 1}, 4, 8, 1));   // one matrix
  Gemm g;
  g.m = 4, g.n = 4, g.k = 4;
  g.a = strided, g.b = {y.data(), 16, 4, 1};
  g.c = out.data();
  EXPECT_THROW(onednn_gemm(g), std::invalid_argument);
  // bmm has no bias in ATen, and oneDNN 2.6 makes no runtime-batch primitive with one.
  g.a = {x.data(), 16, 4, 1}, g.batched = true, g.bias = y.data();
  EXPECT_THROW(onednn_gemm(g), std::invalid_argument);
}


TEST(OnednnGemm, Bf16GemmAccumulatesInF32AndRoundsOnce) {
  if (!onednn_bf16_native()) GTEST_SKIP() << "no native bf16 on this CPU";
  for (auto [m, n, k, transposed_b] :
       {std::tuple<int64_t, int64_t, int64_t, bool>{64, 256, 784, true}, {5, 3, 7, false},
        {1, 1, 1, true}, {3, 4, 0, false}, {256, 256, 257, true}}) {
    std::mt19937 rng(static_cast<unsigned>(m + n + k));
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<uint16_t> a(m * k), b(k * n), bias(n), c(m * n);
    for (auto& v : a) v = float_to_bf16(d(rng));
    for (auto& v : b) v = float_to_bf16(d(rng));
    for (auto& v : bias) v = float_to_bf16(d(rng));
    Gemm g;
    g.type = GemmType::kBFloat16;
    g.m = m, g.n = n, g.k = k;
    g.a = {a.data(), 0, k, 1};
    // B [k, n] as stored: row-major, or the transpose of an [n, k] weight.
    g.b = transposed_b ? GemmOperand{b.data(), 0, 1, k} : GemmOperand{b.data(), 0, n, 1};
    g.bias = bias.data();
    g.c = c.data();
    g.act = Activation::kRelu;
    // Sized at every size, above 2^24 multiply-adds too: oneDNN's generic
    // bf16 primitive is slower than its brgemm.
    const PrimitiveUse use = onednn_gemm(g);
    if (k > 0) EXPECT_TRUE(use == PrimitiveUse::kSizedCreated || use == PrimitiveUse::kSized);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double want = bf16_to_float(bias[j]);
        for (int64_t p = 0; p < k; ++p) {
          const uint16_t bv = transposed_b ? b[j * k + p] : b[p * n + j];
          want += static_cast<double>(bf16_to_float(a[i * k + p])) * bf16_to_float(bv);
        }
        want = std::max(want, 0.0);
        // One rounding to bf16 (2^-8 relative), over f32 sums of k terms.
        ASSERT_NEAR(bf16_to_float(c[i * n + j]), want, 1e-2 * std::abs(want) + 1e-5 * k + 1e-6)
            << m << "x" << n << "x" << k << " at " << i << "," << j;
      }
  }
  EXPECT_THROW(pack_b([] { Gemm g; g.type = GemmType::kBFloat16; return g; }()),
               std::invalid_argument);
}

// DISC_ONEDNN_BF16 decides where the CPU multiplies bf16; without bf16, GEMMs
// are widened whatever it says. auto measures once per process, so every
// later answer is the first one.
TEST(OnednnGemm, Bf16GemmsAreWidenedAsTheOptionSays) {
  namespace options = disc::options;
  const bool native = onednn_bf16_native();
  options::set(options::Id::kOnednnBf16, "widened");
  EXPECT_TRUE(onednn_bf16_widened(2));
  options::set(options::Id::kOnednnBf16, "native");
  EXPECT_EQ(onednn_bf16_widened(2), !native);
  options::set(options::Id::kOnednnBf16, "auto");
  const bool measured = onednn_bf16_widened(2);
  EXPECT_EQ(onednn_bf16_widened(1), measured);
  if (!native) EXPECT_TRUE(measured);
  EXPECT_THROW(options::set(options::Id::kOnednnBf16, "fast"), std::invalid_argument);
  options::set(options::Id::kOnednnBf16, "auto");
}
