// layout-plan: convolutions the library takes leave NHWC activations where
// every reader is layout-agnostic; a value a layout-bound op reads (a view)
// or the graph returns turns NCHW where it is made; DISC_CONV=nchw / aten
// keeps everything NCHW.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "lowering/passes/passes.h"
#include "runtime/options.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::compiled;
using disc::testing::conv2d_attrs;
using disc::testing::GraphBuilder;
using disc::testing::index_of;

namespace {

// conv -> relu -> conv -> view: a small CNN's forward.
struct Cnn {
  GraphBuilder b;
  ir::Value x = b.param({2, 3, 8, 8}), w1 = b.param({4, 3, 3, 3}), w2 = b.param({4, 4, 3, 3});
  ir::Value c1 = b.op("aten::convolution", {x, w1, b.param({4})}, {2, 4, 8, 8}, conv2d_attrs());
  ir::Value r = b.op("aten::relu", {c1}, {2, 4, 8, 8});
  ir::Value c2 = b.op("aten::convolution", {r, w2, b.param({4})}, {2, 4, 8, 8}, conv2d_attrs());
  ir::Value flat = b.op("aten::view", {c2}, {2, 256}, {GraphBuilder::ints({2, -1})});
};

struct ConvOption {
  explicit ConvOption(const char* value) { options::set(options::Id::kConv, value); }
  ~ConvOption() { options::reset(options::Id::kConv); }
};

}  // namespace

TEST(LayoutPlan, ActivationsBetweenConvolutionsStayNhwc) {
  Cnn n;
  Program p = compiled({n.flat});
  const LayoutPlan& l = p.plan.layouts;
  // The first conv's relu is its epilogue: its readers (the second conv) decide.
  EXPECT_TRUE(l.nhwc_out[index_of(p, n.c1)]);
  // The second conv is read by a view, which indexes NCHW memory.
  EXPECT_FALSE(l.nhwc_out[index_of(p, n.c2)]);
  for (const auto& to : l.to_nchw) EXPECT_TRUE(to.empty());
}

TEST(LayoutPlan, AnAtenOpOnNhwcValuesTurnsItsOutputNchwForALayoutBoundReader) {
  GraphBuilder b;
  auto x = b.param({2, 3, 8, 8});
  auto c = b.op("aten::convolution", {x, b.param({4, 3, 3, 3}), b.param({4})}, {2, 4, 8, 8}, conv2d_attrs());
  auto e = b.op("aten::exp", {c}, {2, 4, 8, 8});  // one element-wise op: no kernel, runs on ATen
  auto v = b.op("aten::view", {e}, {2, 256}, {GraphBuilder::ints({2, -1})});
  Program p = compiled({v});
  EXPECT_TRUE(p.plan.layouts.nhwc_out[index_of(p, c)]);
  EXPECT_EQ(p.plan.layouts.to_nchw[index_of(p, e)], std::vector<bool>{true});
}

TEST(LayoutPlan, NchwAndAtenOptionsKeepEveryActivationNchw) {
  for (const char* value : {"nchw", "aten"}) {
    ConvOption conv(value);
    Cnn n;
    Program p = compiled({n.flat});
    for (bool nhwc : p.plan.layouts.nhwc_out) EXPECT_FALSE(nhwc) << value;
  }
}

TEST(LayoutPlan, ATransposedConvolutionIsNotTheLibrarysAndStaysNchw) {
  GraphBuilder b;
  auto x = b.param({2, 4, 8, 8});
  auto c = b.op("aten::convolution", {x, b.param({4, 4, 3, 3}), b.param({4})}, {2, 4, 8, 8},
                conv2d_attrs(/*transposed=*/true));
  auto v = b.op("aten::relu", {c}, {2, 4, 8, 8});
  Program p = compiled({v});
  EXPECT_STREQ(conv_library_declines(p, index_of(p, c)), "transposed");
  EXPECT_FALSE(p.plan.layouts.nhwc_out[index_of(p, c)]);
}
