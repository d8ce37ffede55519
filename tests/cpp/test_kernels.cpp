// kernels: fusion groups the codegen can write become kernels with their
// interface; a lone element-wise op and a group the codegen declines run op
// by op (the latter listed with its reason).
#include <gtest/gtest.h>

#include "graph_builder.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::compiled;
using disc::testing::GraphBuilder;
using disc::testing::index_of;

TEST(Kernels, ElementwiseChainIsOneKernelWithItsInterface) {
  GraphBuilder b;
  auto x = b.param({64, 128}), y = b.param({64, 128});
  auto m = b.op("aten::mul.Tensor", {x, y}, {64, 128});
  auto r = b.op("aten::relu", {m}, {64, 128});
  Program p = compiled({r});
  ASSERT_EQ(p.plan.kernels.size(), 1u);
  const KernelInterface& k = p.plan.kernels[0];
  EXPECT_EQ(p.plan.kernel_of_group, std::vector<int32_t>{0});
  EXPECT_EQ(k.kind, FusionKind::kLoop);
  EXPECT_EQ(k.inputs.size(), 2u);
  ASSERT_EQ(k.outputs.size(), 1u);  // the mul stays in registers
  EXPECT_EQ(k.outputs[0].op, index_of(p, r));
  EXPECT_TRUE(k.loads_before_stores);
  EXPECT_TRUE(p.plan.declined.empty());
}

TEST(Kernels, LoneElementwiseOpRunsOnItsOwnKernel) {
  // ATen's kernel for one op is already vectorized: no kernel, no decline.
  GraphBuilder b;
  auto x = b.param({64, 128});
  Program p = compiled({b.op("aten::relu", {x}, {64, 128})});
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.plan.kernel_of_group, std::vector<int32_t>{-1});
  EXPECT_TRUE(p.plan.kernels.empty());
  EXPECT_TRUE(p.plan.declined.empty());
}

TEST(Kernels, LoneDropoutBackwardIsAKernel) {
  // ATen's promotes the bool mask and multiplies twice: one pass is faster.
  GraphBuilder b;
  auto grad = b.param({64, 128}), mask = b.param({64, 128}, ir::DType::kBool);
  auto d = b.op("aten::native_dropout_backward", {grad, mask}, {64, 128},
                {ir::Attr::of_double(ir::Attr::Kind::kDouble, 1 / 0.9)});
  Program p = compiled({d});
  ASSERT_EQ(p.plan.kernels.size(), 1u);
  EXPECT_EQ(p.plan.kernels[0].inputs.size(), 2u);
  EXPECT_TRUE(p.plan.declined.empty());
}

TEST(Kernels, SoftmaxIsAStitchKernelWritingOneValuePerElement) {
  GraphBuilder b;
  auto x = b.param({8, 128});
  auto sm = b.op("aten::_softmax", {x}, {8, 128}, {GraphBuilder::integer(1), GraphBuilder::boolean(false)});
  Program p = compiled({sm});
  ASSERT_EQ(p.plan.kernels.size(), 1u);
  EXPECT_EQ(p.plan.kernels[0].kind, FusionKind::kStitch);
  EXPECT_EQ(p.plan.kernels[0].rank, 2u);
  EXPECT_FALSE(p.plan.kernels[0].loads_before_stores);  // it reads the row three times
}

TEST(Kernels, GroupTheCodegenDeclinesRunsOpByOpWithTheReason) {
  GraphBuilder b;
  auto x = b.param({3, 4, 5, 6});
  auto e = b.op("aten::exp", {x}, {3, 4, 5, 6});
  auto s = b.op("aten::sum.dim_IntList", {e}, {3, 4, 6},
                {GraphBuilder::ints({2}), GraphBuilder::boolean(false), ir::Attr{}});
  Program p = compiled({s});
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_TRUE(p.plan.kernels.empty());
  ASSERT_EQ(p.plan.declined.size(), 1u);
  EXPECT_NE(p.plan.declined[0].why.find("reduces neither the last dim"), std::string::npos);
  EXPECT_NE(p.to_string().find("group 0 runs op by op"), std::string::npos);
}
