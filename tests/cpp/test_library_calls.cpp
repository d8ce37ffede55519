// library-calls: GEMMs with their epilogue and pre-packable weight,
// convolutions with their layout or the reason the library declines them,
// and which merged GEMM members need a buffer of their own.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "runtime/options.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::compiled;
using disc::testing::conv2d_attrs;
using disc::testing::GraphBuilder;
using disc::testing::index_of;

TEST(LibraryCalls, LinearReluIsAGemmWithReluAndItsWeight) {
  GraphBuilder b;
  auto x = b.param({32, 784}), w = b.param({256, 784}), bias = b.param({256});
  auto wt = b.op("aten::t", {w}, {784, 256});
  auto mm = b.op("aten::addmm", {bias, x, wt}, {32, 256});
  auto r = b.op("aten::relu", {mm}, {32, 256});
  Program p = compiled({r});
  const std::optional<LibraryCall>& gemm = p.plan.library[index_of(p, mm)];
  ASSERT_TRUE(gemm);
  EXPECT_EQ(gemm->kind, LibraryCall::Kind::kGemm);
  EXPECT_EQ(gemm->act, Activation::kRelu);
  EXPECT_EQ(gemm->weight_param, static_cast<int32_t>(index_of(p, w)));  // through the transpose
  EXPECT_FALSE(gemm->weight_reused);
  ASSERT_TRUE(p.plan.library[index_of(p, r)]);
  EXPECT_EQ(p.plan.library[index_of(p, r)]->kind, LibraryCall::Kind::kEpilogue);
  EXPECT_FALSE(p.plan.library[index_of(p, x)]);  // not a library op
}

TEST(LibraryCalls, AWeightTwoGemmsReadIsPackedOnceForBoth) {
  // A layer applied twice (an RNN step, activation checkpointing).
  GraphBuilder b;
  auto x = b.param({4, 16}), w = b.param({16, 16});
  auto h = b.op("aten::mm", {x, w}, {4, 16});
  auto t = b.op("aten::tanh", {h}, {4, 16});
  auto y = b.op("aten::mm", {t, w}, {4, 16});
  Program p = compiled({y});
  EXPECT_TRUE(p.plan.library[index_of(p, h)]->weight_reused);
  EXPECT_TRUE(p.plan.library[index_of(p, y)]->weight_reused);
  EXPECT_EQ(p.plan.library[index_of(p, y)]->weight_param, static_cast<int32_t>(index_of(p, w)));
}

TEST(LibraryCalls, AGemmOnAComputedMatrixHasNoWeightToPack) {
  GraphBuilder b;
  auto x = b.param({4, 16}), w = b.param({16, 16});
  auto e = b.op("aten::exp", {w}, {16, 16});
  auto y = b.op("aten::mm", {x, e}, {4, 16});
  Program p = compiled({y});
  EXPECT_EQ(p.plan.library[index_of(p, y)]->weight_param, -1);
}

TEST(LibraryCalls, MergedGemmReturnedFromTheGraphGetsABufferOfItsOwn) {
  // Q, K, V projections of one input: one merged GEMM; V is a graph output
  // (a dense copy), Q and K are read by element-wise ops (views suffice).
  GraphBuilder b;
  auto x = b.param({8, 32});
  auto q = b.op("aten::mm", {x, b.param({32, 32})}, {8, 32});
  auto k = b.op("aten::mm", {x, b.param({32, 32})}, {8, 32});
  auto v = b.op("aten::mm", {x, b.param({32, 32})}, {8, 32});
  auto s = b.op("aten::add.Tensor", {q, k}, {8, 32});
  Program p = compiled({s, v});
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  EXPECT_FALSE(p.plan.library[index_of(p, q)]->own_buffer);
  EXPECT_FALSE(p.plan.library[index_of(p, k)]->own_buffer);
  EXPECT_TRUE(p.plan.library[index_of(p, v)]->own_buffer);
}

TEST(LibraryCalls, ConvolutionsSayTheirLayoutOrWhyTheLibraryDeclines) {
  GraphBuilder b;
  auto x = b.param({2, 3, 8, 8});
  auto c = b.op("aten::convolution", {x, b.param({4, 3, 3, 3}), b.param({4})}, {2, 4, 8, 8}, conv2d_attrs());
  auto r = b.op("aten::relu", {c}, {2, 4, 8, 8});
  auto t = b.op("aten::convolution", {r, b.param({4, 4, 3, 3}), b.param({4})}, {2, 4, 8, 8},
                conv2d_attrs(/*transposed=*/true));
  Program p = compiled({t});
  const LibraryCall& conv = *p.plan.library[index_of(p, c)];
  EXPECT_EQ(conv.kind, LibraryCall::Kind::kConv);
  EXPECT_EQ(conv.act, Activation::kRelu);
  EXPECT_TRUE(conv.nhwc && conv.nhwc_out);
  EXPECT_EQ(conv.declined, nullptr);
  EXPECT_STREQ(p.plan.library[index_of(p, t)]->declined, "transposed");
  options::set(options::Id::kConv, "aten");
  Program off = compiled({t});
  options::reset(options::Id::kConv);
  EXPECT_STREQ(off.plan.library[index_of(off, c)]->declined, "disabled");
}
