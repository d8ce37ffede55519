// runtime/cpu/attention.h against the formulas in double precision: scores,
// safe softmax, dropout by the Philox stream, and the gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "random_floats.h"
#include "runtime/components.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/philox.h"
#include "runtime/cpu/register_gemm.h"

namespace {

using disc::runtime::AttentionHead;
using disc::runtime::VectorLevel;
using disc::testing::normal_floats;
using Matrix = std::vector<double>;  // row-major

struct Expected {
  std::vector<float> o, lse, dq, dk, dv;
};

double mask_at(const AttentionHead& h, int64_t i, int64_t j) {
  const auto& m = h.mask;
  if (h.causal && j > i) return -INFINITY;
  if (!m.data) return 0;
  const int64_t at = i * m.row_stride + j * m.col_stride;
  if (m.is_bool) return static_cast<const bool*>(m.data)[at] ? 0 : -INFINITY;
  return static_cast<const float*>(m.data)[at];
}

Expected reference(const AttentionHead& h, const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, const std::vector<float>& go) {
  const int64_t lq = h.lq, lk = h.lk, d = h.d, dv = h.dv;
  std::vector<char> kept(lq * lk, 1);
  if (h.dropout_p > 0)
    disc::runtime::dropout_f32(h.seed, 1.f - h.dropout_p, 1.f, h.stream_offset, h.stream_offset + lq * lk,
                               nullptr, nullptr, reinterpret_cast<bool*>(kept.data()));
  const double inv_keep = 1.0 / (1.0 - h.dropout_p);
  Matrix p(lq * lk, 0.0), dropped(lq * lk, 0.0);
  Expected e;
  e.lse.assign(lq, INFINITY);
  for (int64_t i = 0; i < lq; ++i) {
    double mx = -INFINITY;
    std::vector<double> s(lk);
    for (int64_t j = 0; j < lk; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += double(q[i * d + c]) * k[j * d + c];
      s[j] = dot * h.scale + mask_at(h, i, j);
      mx = std::max(mx, s[j]);
    }
    if (mx == -INFINITY) continue;
    double sum = 0;
    for (int64_t j = 0; j < lk; ++j) sum += std::exp(s[j] - mx);
    e.lse[i] = static_cast<float>(mx + std::log(sum));
    for (int64_t j = 0; j < lk; ++j) {
      p[i * lk + j] = std::exp(s[j] - mx) / sum;
      dropped[i * lk + j] = kept[i * lk + j] ? p[i * lk + j] * inv_keep : 0.0;
    }
  }
  e.o.assign(lq * dv, 0.f), e.dq.assign(lq * d, 0.f), e.dk.assign(lk * d, 0.f), e.dv.assign(lk * dv, 0.f);
  Matrix dk(lk * d, 0.0), dvv(lk * dv, 0.0);
  for (int64_t i = 0; i < lq; ++i) {
    for (int64_t c = 0; c < dv; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < lk; ++j) acc += dropped[i * lk + j] * v[j * dv + c];
      e.o[i * dv + c] = static_cast<float>(acc);
    }
    std::vector<double> dp(lk);
    double row = 0;
    for (int64_t j = 0; j < lk; ++j) {
      double g = 0;
      for (int64_t c = 0; c < dv; ++c) g += double(go[i * dv + c]) * v[j * dv + c];
      dp[j] = kept[i * lk + j] ? g * inv_keep : 0.0;
      row += p[i * lk + j] * dp[j];
    }
    for (int64_t j = 0; j < lk; ++j) {
      const double ds = p[i * lk + j] * (dp[j] - row) * h.scale;
      for (int64_t c = 0; c < d; ++c) {
        e.dq[i * d + c] += static_cast<float>(ds * k[j * d + c]);
        dk[j * d + c] += ds * q[i * d + c];
      }
      for (int64_t c = 0; c < dv; ++c) dvv[j * dv + c] += dropped[i * lk + j] * go[i * dv + c];
    }
  }
  for (size_t x = 0; x < dk.size(); ++x) e.dk[x] = static_cast<float>(dk[x]);
  for (size_t x = 0; x < dvv.size(); ++x) e.dv[x] = static_cast<float>(dvv[x]);
  return e;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t x = 0; x < got.size(); ++x) {
    if (std::isinf(want[x])) {
      ASSERT_EQ(got[x], want[x]) << what << "[" << x << "]";
      continue;
    }
    ASSERT_NEAR(got[x], want[x], 2e-5 + 2e-4 * std::fabs(want[x])) << what << "[" << x << "]";
  }
}

// A [rows, cols] matrix in rows `stride` apart, as a head of a [B, L, H, D]
// tensor is; the gaps hold `gap`.
struct Strided {
  std::vector<float> data;
  int64_t rows, cols, stride;

  Strided(const std::vector<float>& dense, int64_t rows, int64_t cols, int64_t stride, float gap)
      : data(rows * stride, gap), rows(rows), cols(cols), stride(stride) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < cols && !dense.empty(); ++c) data[i * stride + c] = dense[i * cols + c];
  }
  disc::runtime::InRows in() const { return {data.data(), stride}; }
  disc::runtime::OutRows out() { return {data.data(), stride}; }
  std::vector<float> dense() const {
    std::vector<float> d(rows * cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < cols; ++c) d[i * cols + c] = data[i * stride + c];
    return d;
  }
  // Whether the gaps still hold `gap`: nothing wrote past a row.
  bool gaps_hold(float gap) const {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = cols; c < stride; ++c)
        if (data[i * stride + c] != gap) return false;
    return true;
  }
};

// Runs one head both ways at every vector level this CPU runs, its
// matrices dense and strided (the gaps NaN in the inputs, which a read
// would spread; a sentinel in the outputs, which a write would change), and
// compares everything.
void check(AttentionHead h) {
  if (!disc::runtime::has_onednn()) GTEST_SKIP() << "the fused attention's GEMMs are oneDNN's";
  const auto q = normal_floats(h.lq * h.d, 1), k = normal_floats(h.lk * h.d, 2),
             v = normal_floats(h.lk * h.dv, 3), go = normal_floats(h.lq * h.dv, 4);
  Expected want = reference(h, q, k, v, go);
  const float nan = std::numeric_limits<float>::quiet_NaN(), sentinel = 7.f;
  for (VectorLevel level : {VectorLevel::kBaseline, VectorLevel::kAvx2, VectorLevel::kAvx512}) {
    if (!disc::runtime::vector_level_runs(level)) continue;
    for (int64_t spread : {1, 3}) {
      SCOPED_TRACE(std::string(disc::runtime::vector_level_name(level)) +
                   (spread > 1 ? ", strided" : ", dense"));
      auto stride = [&](int64_t cols) { return spread > 1 ? spread * cols + 1 : cols; };
      const Strided sq(q, h.lq, h.d, stride(h.d), nan), sk(k, h.lk, h.d, stride(h.d), nan),
          sv(v, h.lk, h.dv, stride(h.dv), nan), sgo(go, h.lq, h.dv, stride(h.dv), nan);
      Strided o({}, h.lq, h.dv, stride(h.dv), sentinel), dq({}, h.lq, h.d, stride(h.d), sentinel),
          dk({}, h.lk, h.d, stride(h.d), sentinel), dv({}, h.lk, h.dv, stride(h.dv), sentinel);
      std::vector<float> lse(h.lq);
      disc::runtime::attention_forward_at(level, h, sq.in(), sk.in(), sv.in(), o.out(), lse.data());
      expect_near(o.dense(), want.o, "o");
      expect_near(lse, want.lse, "lse");
      // The forward's o, its gaps NaN as well.
      const Strided so(o.dense(), h.lq, h.dv, stride(h.dv), nan);
      disc::runtime::attention_backward_at(level, h, sq.in(), sk.in(), sv.in(), so.in(), lse.data(),
                                           sgo.in(), dq.out(), dk.out(), dv.out());
      expect_near(dq.dense(), want.dq, "dq");
      expect_near(dk.dense(), want.dk, "dk");
      expect_near(dv.dense(), want.dv, "dv");
      for (const Strided* out : {&o, &dq, &dk, &dv}) EXPECT_TRUE(out->gaps_hold(sentinel));
      // Without the lse: the probabilities recomputed from whole rows.
      Strided dq2({}, h.lq, h.d, stride(h.d), sentinel), dk2({}, h.lk, h.d, stride(h.d), sentinel),
          dv2({}, h.lk, h.dv, stride(h.dv), sentinel);
      disc::runtime::attention_backward_at(level, h, sq.in(), sk.in(), sv.in(), so.in(), nullptr,
                                           sgo.in(), dq2.out(), dk2.out(), dv2.out());
      expect_near(dq2.dense(), want.dq, "dq, no lse");
      expect_near(dk2.dense(), want.dk, "dk, no lse");
      expect_near(dv2.dense(), want.dv, "dv, no lse");
      for (const Strided* out : {&dq2, &dk2, &dv2}) EXPECT_TRUE(out->gaps_hold(sentinel));
    }
  }
}

AttentionHead head(int64_t lq, int64_t lk, int64_t d, int64_t dv) {
  AttentionHead h;
  h.lq = lq, h.lk = lk, h.d = d, h.dv = dv;
  h.scale = 1.f / std::sqrt(static_cast<float>(d));
  return h;
}

// What the graphs run: the functions at vector_level(), which DISC_CPU_ISA caps.
TEST(Attention, EntryPointsRunAtTheCappedLevel) {
  if (!disc::runtime::has_onednn()) GTEST_SKIP() << "the fused attention's GEMMs are oneDNN's";
  AttentionHead h = head(20, 30, 8, 8);
  h.dropout_p = 0.2f, h.seed = 3;
  const auto q = normal_floats(h.lq * h.d, 1), k = normal_floats(h.lk * h.d, 2),
             v = normal_floats(h.lk * h.dv, 3);
  std::vector<float> o(h.lq * h.dv), lse(h.lq), o_at(h.lq * h.dv), lse_at(h.lq);
  auto in = [](const std::vector<float>& x, int64_t cols) { return disc::runtime::InRows{x.data(), cols}; };
  disc::runtime::attention_forward(h, in(q, h.d), in(k, h.d), in(v, h.dv), {o.data(), h.dv}, lse.data());
  disc::runtime::attention_forward_at(disc::runtime::vector_level(), h, in(q, h.d), in(k, h.d),
                                      in(v, h.dv), {o_at.data(), h.dv}, lse_at.data());
  EXPECT_EQ(o, o_at);
  EXPECT_EQ(lse, lse_at);
}

TEST(Attention, PlainMatchesTheFormulas) { check(head(37, 53, 16, 24)); }

TEST(Attention, DropoutDrawsTheScoresStream) {
  AttentionHead h = head(40, 70, 8, 8);
  h.dropout_p = 0.3f, h.seed = 0x1234567890abcdefULL, h.stream_offset = 5 * 40 * 70;
  check(h);
}

TEST(Attention, CausalWithDropout) {
  AttentionHead h = head(33, 33, 8, 8);
  h.causal = true, h.dropout_p = 0.1f, h.seed = 7;
  check(h);
}

// Causal blocks read only the keys their rows see: lq above and below lk,
// several blocks (65536 / lk rows each).
TEST(Attention, CausalBlocksReadOnlyTheKeysTheySee) {
  for (auto [lq, lk] : {std::pair<int64_t, int64_t>{700, 256}, {150, 700}}) {
    AttentionHead h = head(lq, lk, 8, 8);
    h.causal = true, h.dropout_p = 0.1f, h.seed = 13;
    check(h);
  }
}

// More rows than one block holds: blocks of 65536 / lk rows.
TEST(Attention, ManyBlocksAccumulateTheKeyGradients) {
  AttentionHead h = head(600, 256, 8, 4);
  h.dropout_p = 0.2f, h.seed = 9;
  check(h);
}

// Heads whose GEMMs exceed the register GEMMs' 2^20 multiply-adds run them
// on oneDNN, strided heads through dense copies; a last block small enough
// runs its GEMMs in registers, adding into the same key gradients.
TEST(Attention, LargeHeadsRunOneDnnGemms) {
  AttentionHead h = head(300, 256, 32, 40);
  ASSERT_FALSE(disc::runtime::register_gemm_fits(256, 256, 40));
  h.dropout_p = 0.1f, h.seed = 21;
  check(h);
  AttentionHead causal = head(600, 300, 32, 32);
  causal.causal = true;
  check(causal);
}

TEST(Attention, AdditiveMaskBroadcastOverRows) {
  const auto bias = normal_floats(50, 5);
  AttentionHead h = head(20, 50, 8, 8);
  h.mask = {bias.data(), false, 0, 1};  // one [lk] row for every query row
  check(h);
}

TEST(Attention, BoolMaskWithFullyMaskedRowsGivesZeros) {
  const int64_t lq = 12, lk = 20;
  std::vector<char> allowed(lq * lk);
  for (int64_t i = 0; i < lq; ++i)
    for (int64_t j = 0; j < lk; ++j) allowed[i * lk + j] = i % 4 != 0 && (i + j) % 3 != 0;
  AttentionHead h = head(lq, lk, 8, 8);
  h.mask = {allowed.data(), true, lk, 1};
  h.dropout_p = 0.25f, h.seed = 11;
  check(h);
}

// _softmax's rows whose every score is masked are NaN, and so is every
// gradient they reach: recomputed without an lse, the backward agrees.
TEST(Attention, FullyMaskedRowsGiveNaNWhenAsked) {
  if (!disc::runtime::has_onednn()) GTEST_SKIP() << "the fused attention's GEMMs are oneDNN's";
  const int64_t lq = 6, lk = 10, d = 8;
  std::vector<char> allowed(lq * lk, 1);
  std::fill(allowed.begin() + 2 * lk, allowed.begin() + 3 * lk, 0);  // row 2: nothing seen
  AttentionHead h = head(lq, lk, d, d);
  h.mask = {allowed.data(), true, lk, 1};
  h.nan_when_all_masked = true;
  const auto q = normal_floats(lq * d, 1), k = normal_floats(lk * d, 2), v = normal_floats(lk * d, 3),
             go = normal_floats(lq * d, 4);
  std::vector<float> o(lq * d), lse(lq), dq(lq * d), dk(lk * d), dv(lk * d);
  auto in = [](const std::vector<float>& x, int64_t cols) { return disc::runtime::InRows{x.data(), cols}; };
  disc::runtime::attention_forward(h, in(q, d), in(k, d), in(v, d), {o.data(), d}, lse.data());
  disc::runtime::attention_backward(h, in(q, d), in(k, d), in(v, d), in(o, d), nullptr, in(go, d),
                                    {dq.data(), d}, {dk.data(), d}, {dv.data(), d});
  for (int64_t i = 0; i < lq; ++i)
    for (int64_t c = 0; c < d; ++c) {
      EXPECT_EQ(std::isnan(o[i * d + c]), i == 2) << "o " << i;
      EXPECT_EQ(std::isnan(dq[i * d + c]), i == 2) << "dq " << i;
    }
  EXPECT_TRUE(std::isnan(dk[0]) && std::isnan(dv[0]));
}

#if defined(__x86_64__)
// transformers masks padding and future keys with finfo(float32).min, not
// -inf: such scores' e^x must be 0, not a subnormal, which every later
// multiply (and the GEMM with v) would take the CPU's slow path for. The
// MXCSR's sticky flags say whether any operation at all made (underflow) or
// read (denormal) one.
TEST(Attention, MaskedByFloatMinMakesNoSubnormals) {
  if (!disc::runtime::has_onednn()) GTEST_SKIP() << "the fused attention's GEMMs are oneDNN's";
  const int64_t l = 48, d = 16;
  std::vector<float> causal(l * l, 0.f);
  for (int64_t i = 0; i < l; ++i)
    for (int64_t j = i + 1; j < l; ++j) causal[i * l + j] = std::numeric_limits<float>::lowest();
  AttentionHead h = head(l, l, d, d);
  h.mask = {causal.data(), false, l, 1};
  const auto q = normal_floats(l * d, 1), k = normal_floats(l * d, 2), v = normal_floats(l * d, 3),
             go = normal_floats(l * d, 4);
  auto in = [](const std::vector<float>& x, int64_t cols) { return disc::runtime::InRows{x.data(), cols}; };
  constexpr unsigned kDenormal = 1u << 1, kUnderflow = 1u << 4;
  for (VectorLevel level : {VectorLevel::kBaseline, VectorLevel::kAvx2, VectorLevel::kAvx512}) {
    if (!disc::runtime::vector_level_runs(level)) continue;
    SCOPED_TRACE(disc::runtime::vector_level_name(level));
    std::vector<float> o(l * d), lse(l), dq(l * d), dk(l * d), dv(l * d);
    _mm_setcsr(_mm_getcsr() & ~(kDenormal | kUnderflow));
    disc::runtime::attention_forward_at(level, h, in(q, d), in(k, d), in(v, d), {o.data(), d}, lse.data());
    disc::runtime::attention_backward_at(level, h, in(q, d), in(k, d), in(v, d), in(o, d), nullptr, in(go, d),
                                         {dq.data(), d}, {dk.data(), d}, {dv.data(), d});
    EXPECT_EQ(_mm_getcsr() & (kDenormal | kUnderflow), 0u);
    EXPECT_EQ(o[0], v[0]);  // row 0 sees key 0 alone: its probability is exactly 1
  }
}
#endif

}  // namespace
