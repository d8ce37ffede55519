// runtime/cpu/onednn_conv: forward (bias, relu), backward-data and
// backward-weights (+ bias) against naive loops, in NCHW and NHWC, with the
// caller's layout and with oneDNN's; strides, paddings, dilations, groups,
// sizes 1 and odd; the primitive cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/bf16.h"
#include "runtime/cpu/onednn_conv.h"
#include "runtime/cpu/onednn_gemm.h"

using namespace disc::runtime;

namespace {

struct Case {
  int64_t n, ic, ih, iw, oc, kh, kw, sh, sw, ph, pw, dh, dw, groups;
};

ConvShape shape_of(const Case& c) {
  ConvShape s;
  s.batch = c.n, s.in_channels = c.ic, s.in_h = c.ih, s.in_w = c.iw;
  s.out_channels = c.oc, s.kernel_h = c.kh, s.kernel_w = c.kw, s.groups = c.groups;
  s.stride[0] = c.sh, s.stride[1] = c.sw, s.padding[0] = c.ph, s.padding[1] = c.pw;
  s.dilation[0] = c.dh, s.dilation[1] = c.dw;
  s.out_h = (c.ih + 2 * c.ph - c.dh * (c.kh - 1) - 1) / c.sh + 1;
  s.out_w = (c.iw + 2 * c.pw - c.dw * (c.kw - 1) - 1) / c.sw + 1;
  return s;
}

std::vector<float> random(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// The naive loops, NCHW. visit(n, o, y, x, c, ky, kx, src index, weight index)
// for every product term of the convolution.
template <typename F>
void each_term(const ConvShape& s, F visit) {
  const int64_t icg = s.in_channels / s.groups, ocg = s.out_channels / s.groups;
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t o = 0; o < s.out_channels; ++o)
      for (int64_t y = 0; y < s.out_h; ++y)
        for (int64_t x = 0; x < s.out_w; ++x)
          for (int64_t c = 0; c < icg; ++c)
            for (int64_t ky = 0; ky < s.kernel_h; ++ky)
              for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
                const int64_t iy = y * s.stride[0] - s.padding[0] + ky * s.dilation[0];
                const int64_t ix = x * s.stride[1] - s.padding[1] + kx * s.dilation[1];
                if (iy < 0 || iy >= s.in_h || ix < 0 || ix >= s.in_w) continue;
                const int64_t ci = (o / ocg) * icg + c;
                const int64_t src = ((n * s.in_channels + ci) * s.in_h + iy) * s.in_w + ix;
                const int64_t w = ((o * icg + c) * s.kernel_h + ky) * s.kernel_w + kx;
                const int64_t dst = ((n * s.out_channels + o) * s.out_h + y) * s.out_w + x;
                visit(src, w, dst);
              }
}

// NCHW <-> NHWC for [n, c, h, w].
std::vector<float> to_nhwc(const std::vector<float>& v, int64_t n, int64_t c, int64_t h, int64_t w) {
  std::vector<float> out(v.size());
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < c; ++b)
      for (int64_t i = 0; i < h * w; ++i) out[(a * h * w + i) * c + b] = v[(a * c + b) * h * w + i];
  return out;
}
std::vector<float> from_nhwc(const std::vector<float>& v, int64_t n, int64_t c, int64_t h, int64_t w) {
  std::vector<float> out(v.size());
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < c; ++b)
      for (int64_t i = 0; i < h * w; ++i) out[(a * c + b) * h * w + i] = v[(a * h * w + i) * c + b];
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.f + std::fabs(want[i]))) << what << " at " << i;
}

const Case kCases[] = {
    {2, 3, 7, 9, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1},    // plain, odd sizes
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1},    // every size 1
    {3, 5, 11, 7, 6, 3, 2, 2, 2, 1, 1, 1, 1, 1},   // stride 2, padding 1
    {2, 4, 9, 9, 8, 3, 3, 1, 1, 2, 2, 2, 2, 1},    // dilation 2
    {1, 6, 8, 5, 4, 3, 3, 2, 1, 1, 0, 1, 1, 2},    // groups 2, mixed strides
    {2, 16, 6, 6, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1},  // 1x1, blocked-friendly
    {1, 3, 5, 5, 2, 5, 5, 1, 1, 2, 2, 1, 1, 1},    // kernel as large as the image
    {4, 32, 13, 13, 64, 3, 3, 1, 1, 0, 0, 1, 1, 1},  // the MNIST CNN's second conv
};

struct Layouts {
  ConvLayout layout;
  const char* name;
};
const Layouts kLayouts[] = {
    {{ActLayout::kNchw, ConvPlacement::kUser}, "nchw"},
    {{ActLayout::kNhwc, ConvPlacement::kUser}, "nhwc"},
    {{ActLayout::kNchw, ConvPlacement::kBest}, "nchw->best"},
    {{ActLayout::kNhwc, ConvPlacement::kBest}, "nhwc->best"},
};

// Every primitive of case `cs` in every layout, against the naive loops.
void expect_case_matches_naive_loops(const Case& cs, unsigned seed) {
  const ConvShape s = shape_of(cs);
  const size_t n_src = s.batch * s.in_channels * s.in_h * s.in_w;
  const size_t n_dst = s.batch * s.out_channels * s.out_h * s.out_w;
  const size_t n_w = s.out_channels * (s.in_channels / s.groups) * s.kernel_h * s.kernel_w;
  const std::vector<float> x = random(n_src, ++seed), w = random(n_w, ++seed),
                           b = random(s.out_channels, ++seed), dy = random(n_dst, ++seed);
  std::vector<float> y(n_dst), dx(n_src, 0.f), dw(n_w, 0.f), db(s.out_channels, 0.f);
  for (int64_t i = 0; i < static_cast<int64_t>(n_dst); ++i)
    y[i] = b[(i / (s.out_h * s.out_w)) % s.out_channels];
  each_term(s, [&](int64_t si, int64_t wi, int64_t di) {
    y[di] += x[si] * w[wi];
    dx[si] += dy[di] * w[wi];
    dw[wi] += dy[di] * x[si];
  });
  for (int64_t i = 0; i < static_cast<int64_t>(n_dst); ++i)
    db[(i / (s.out_h * s.out_w)) % s.out_channels] += dy[i];
  std::vector<float> y_relu = y;
  for (float& v : y_relu) v = std::max(v, 0.f);

  for (const Layouts& l : kLayouts) {
    SCOPED_TRACE(::testing::Message() << "case n=" << cs.n << " ic=" << cs.ic << " ih=" << cs.ih
                                      << " k=" << cs.kh << " s=" << cs.sh << " g=" << cs.groups
                                      << " " << l.name);
    const bool nhwc = l.layout.act == ActLayout::kNhwc;
    auto in_src = [&](const std::vector<float>& v) {
      return nhwc ? to_nhwc(v, s.batch, s.in_channels, s.in_h, s.in_w) : v;
    };
    auto in_dst = [&](const std::vector<float>& v) {
      return nhwc ? to_nhwc(v, s.batch, s.out_channels, s.out_h, s.out_w) : v;
    };
    auto out_src = [&](const std::vector<float>& v) {
      return nhwc ? from_nhwc(v, s.batch, s.in_channels, s.in_h, s.in_w) : v;
    };
    auto out_dst = [&](const std::vector<float>& v) {
      return nhwc ? from_nhwc(v, s.batch, s.out_channels, s.out_h, s.out_w) : v;
    };
    const std::vector<float> xs = in_src(x), dys = in_dst(dy);

    for (bool relu : {false, true}) {
      std::vector<float> got(n_dst, -7.f);
      ConvForward f{s, l.layout, xs.data(), w.data(), b.data(), got.data(), relu};
      EXPECT_TRUE(onednn_conv_forward(f).ran);
      expect_near(out_dst(got), relu ? y_relu : y, relu ? "forward + bias + relu" : "forward + bias");
    }
    std::vector<float> no_bias(n_dst);
    ConvForward f{s, l.layout, xs.data(), w.data(), nullptr, no_bias.data(), false};
    onednn_conv_forward(f);
    std::vector<float> y_no_bias = y;
    for (int64_t i = 0; i < static_cast<int64_t>(n_dst); ++i)
      y_no_bias[i] -= b[(i / (s.out_h * s.out_w)) % s.out_channels];
    expect_near(out_dst(no_bias), y_no_bias, "forward, no bias");

    std::vector<float> got_dx(n_src, -7.f);
    ConvBackwardData bd{s, l.layout, dys.data(), w.data(), got_dx.data()};
    EXPECT_TRUE(onednn_conv_backward_data(bd).ran);
    expect_near(out_src(got_dx), dx, "backward data");

    std::vector<float> got_dw(n_w, -7.f), got_db(s.out_channels, -7.f);
    ConvBackwardWeights bw{s, l.layout, xs.data(), dys.data(), got_dw.data(), got_db.data()};
    EXPECT_TRUE(onednn_conv_backward_weights(bw).ran);
    expect_near(got_dw, dw, "backward weights");
    expect_near(got_db, db, "backward bias");
    std::vector<float> only_dw(n_w, -7.f);
    bw.diff_weights = only_dw.data(), bw.diff_bias = nullptr;
    onednn_conv_backward_weights(bw);
    expect_near(only_dw, dw, "backward weights without bias");
  }
}

}  // namespace

TEST(OnednnConv, ForwardBackwardMatchNaiveLoops) {
  unsigned seed = 0;
  for (const Case& cs : kCases) expect_case_matches_naive_loops(cs, seed += 4);
}

// disc caches primitives across threads (the graph worker makes one, the
// syncing thread or a torch.compile caller runs it). Made on one thread,
// each must run right on another thread that never ran oneDNN: a primitive
// that used its maker's scratchpad overran the other thread's (on AVX2,
// backward-weights: a segfault in the model zoo).
TEST(OnednnConv, PrimitivesMadeOnOneThreadRunOnAnother) {
  clear_conv_primitives();
  unsigned seed = 100;
  for (const Case& cs : kCases) {
    seed += 4;
    std::thread maker([&] { expect_case_matches_naive_loops(cs, seed); });
    maker.join();
    std::thread user([&] { expect_case_matches_naive_loops(cs, seed); });
    user.join();
  }
}

TEST(OnednnConv, PrimitivesAreCachedPerDescriptor) {
  clear_conv_primitives();
  const ConvShape s = shape_of({2, 3, 7, 9, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1});
  std::vector<float> x(2 * 3 * 7 * 9, 1.f), w(4 * 3 * 9, 1.f), y(2 * 4 * 5 * 7);
  ConvForward f{s, {ActLayout::kNchw, ConvPlacement::kBest}, x.data(), w.data(), nullptr, y.data(), false};
  EXPECT_TRUE(onednn_conv_forward(f).created);
  EXPECT_FALSE(onednn_conv_forward(f).created);
  f.relu = true;  // another post-op: another primitive
  EXPECT_TRUE(onednn_conv_forward(f).created);
  f.layout.act = ActLayout::kNhwc;  // another layout too
  EXPECT_TRUE(onednn_conv_forward(f).created);
  clear_conv_primitives();
  EXPECT_TRUE(onednn_conv_forward(f).created);
}

TEST(OnednnConv, NhwcRunsWithoutActivationReorders) {
  // The caller's NHWC buffers are what oneDNN's kernels read: the only
  // reorder is the weights' (into oneDNN's blocked layout).
  const ConvShape s = shape_of({4, 32, 13, 13, 64, 3, 3, 1, 1, 0, 0, 1, 1, 1});
  std::vector<float> x(4 * 32 * 13 * 13, 0.5f), w(64 * 32 * 9, 0.25f), y(4 * 64 * 11 * 11);
  ConvForward f{s, {ActLayout::kNhwc, ConvPlacement::kUser}, x.data(), w.data(), nullptr, y.data(), false};
  ConvRun r = onednn_conv_forward(f);
  EXPECT_EQ(r.act_reorders, 0);
  EXPECT_EQ(r.weight_reorders, 1);
#if defined(__x86_64__)
  // Where oneDNN's best layout is blocked (x86's JIT convolutions), src and
  // dst move too. On AArch64 without SVE, Debian's oneDNN has no JIT
  // convolution: its choice differs.
  f.layout = {ActLayout::kNchw, ConvPlacement::kBest};  // nChw16c
  r = onednn_conv_forward(f);
  EXPECT_EQ(r.act_reorders, 2);
  EXPECT_EQ(r.weight_reorders, 1);
#endif
}

TEST(OnednnConv, EmptyBatchRunsNothingAndEmptySumsAreZero) {
  const ConvShape s = shape_of({0, 3, 5, 5, 2, 3, 3, 1, 1, 0, 0, 1, 1, 1});
  std::vector<float> w(2 * 3 * 9, 1.f), dw(2 * 3 * 9, 5.f), db(2, 5.f);
  ConvForward f{s, {}, nullptr, w.data(), nullptr, nullptr, false};
  EXPECT_FALSE(onednn_conv_forward(f).ran);
  ConvBackwardWeights bw{s, {}, nullptr, nullptr, dw.data(), db.data()};
  EXPECT_FALSE(onednn_conv_backward_weights(bw).ran);
  EXPECT_EQ(dw, std::vector<float>(dw.size(), 0.f));
  EXPECT_EQ(db, std::vector<float>(2, 0.f));
}

TEST(OnednnConv, InconsistentSizesThrow) {
  ConvShape s = shape_of({1, 3, 5, 5, 2, 3, 3, 1, 1, 0, 0, 1, 1, 1});
  s.out_h = 4;
  std::vector<float> x(75), w(54), y(32);
  ConvForward f{s, {}, x.data(), w.data(), nullptr, y.data(), false};
  EXPECT_THROW(onednn_conv_forward(f), std::invalid_argument);
}

TEST(OnednnConv, Bf16ForwardAndBackwardMatchTheFloatLoopsToBf16Precision) {
  if (!disc::runtime::onednn_bf16_native()) GTEST_SKIP() << "no native bf16 on this CPU";
  const Case cs = kCases[2];  // stride 2, padding 1
  const ConvShape s = shape_of(cs);
  const size_t n_src = s.batch * s.in_channels * s.in_h * s.in_w;
  const size_t n_dst = s.batch * s.out_channels * s.out_h * s.out_w;
  const size_t n_w = s.out_channels * (s.in_channels / s.groups) * s.kernel_h * s.kernel_w;
  // Inputs exactly representable in bf16, so only the results round.
  auto bf16_values = [](std::vector<float> v) {
    for (float& x : v) x = disc::runtime::bf16_to_float(disc::runtime::float_to_bf16(x));
    return v;
  };
  auto bits = [](const std::vector<float>& v) {
    std::vector<uint16_t> out;
    for (float x : v) out.push_back(disc::runtime::float_to_bf16(x));
    return out;
  };
  auto values = [](const std::vector<uint16_t>& v) {
    std::vector<float> out;
    for (uint16_t x : v) out.push_back(disc::runtime::bf16_to_float(x));
    return out;
  };
  const std::vector<float> x = bf16_values(random(n_src, 1)), w = bf16_values(random(n_w, 2)),
                           dy = bf16_values(random(n_dst, 3));
  std::vector<float> y(n_dst, 0.f), dx(n_src, 0.f), dw(n_w, 0.f);
  each_term(s, [&](int64_t si, int64_t wi, int64_t di) {
    y[di] += x[si] * w[wi];
    dx[si] += dy[di] * w[wi];
    dw[wi] += dy[di] * x[si];
  });
  const ConvLayout l{ActLayout::kNchw, ConvPlacement::kBest, ConvType::kBFloat16};
  std::vector<uint16_t> xb = bits(x), wb = bits(w), dyb = bits(dy), yb(n_dst), dxb(n_src), dwb(n_w);
  ConvForward f{s, l, xb.data(), wb.data(), nullptr, yb.data(), false};
  EXPECT_TRUE(onednn_conv_forward(f).ran);
  ConvBackwardData bd{s, l, dyb.data(), wb.data(), dxb.data()};
  EXPECT_TRUE(onednn_conv_backward_data(bd).ran);
  ConvBackwardWeights bw{s, l, xb.data(), dyb.data(), dwb.data(), nullptr};
  EXPECT_TRUE(onednn_conv_backward_weights(bw).ran);
  for (auto [got, want, what] : {std::tuple{values(yb), y, "forward"},
                                 std::tuple{values(dxb), dx, "backward data"},
                                 std::tuple{values(dwb), dw, "backward weights"}})
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-2 * std::abs(want[i]) + 1e-3) << what << " at " << i;
}
