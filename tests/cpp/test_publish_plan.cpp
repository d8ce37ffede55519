// publish-plan: each graph output is handed out after the step that makes
// it, once: a loss before the backward that follows it.
#include <gtest/gtest.h>

#include "graph_builder.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::compiled;
using disc::testing::GraphBuilder;
using disc::testing::index_of;

TEST(PublishPlan, EachOutputIsPublishedOnceRightAfterItsMaker) {
  GraphBuilder b;
  auto x = b.param({8, 16}), w = b.param({16, 4});
  auto y = b.op("aten::mm", {x, w}, {8, 4});
  auto loss = b.op("aten::sum", {y}, {}, {ir::Attr{}});
  auto grad = b.op("aten::mm", {b.op("aten::t", {x}, {16, 8}), y}, {16, 4});
  Program p = compiled({loss, grad});
  std::vector<int> published(p.outputs.size(), 0);
  size_t loss_step = 0, grad_step = 0;
  for (size_t s = 0; s < p.plan.steps.size(); ++s)
    for (uint32_t o : p.plan.steps[s].publish) {
      ++published[o];
      (o == 0 ? loss_step : grad_step) = s;
    }
  EXPECT_EQ(published, (std::vector<int>{1, 1}));
  EXPECT_LT(loss_step, grad_step);  // the loss is traced first: it runs and leaves first
  EXPECT_EQ(p.plan.steps[loss_step].op, index_of(p, loss));
}

TEST(PublishPlan, AnOutputInsideAKernelLeavesWithTheKernel) {
  GraphBuilder b;
  auto x = b.param({64});
  auto e = b.op("aten::exp", {x}, {64});
  auto r = b.op("aten::relu", {e}, {64});
  Program p = compiled({r, e});
  ASSERT_EQ(p.plan.kernels.size(), 1u);
  const Step& last = p.plan.steps.back();
  EXPECT_EQ(last.kind, Step::Kind::kKernel);
  EXPECT_EQ(last.publish, (std::vector<uint32_t>{0, 1}));
}
