// canonicalize: CSE merges equal ops, never ones with runtime operands; DCE.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "lowering/passes/passes.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::GraphBuilder;

TEST(Canonicalize, EqualOpsOnEqualInputsAreComputedOnce) {
  GraphBuilder b;
  auto x = b.param({8});
  auto e1 = b.op("aten::exp", {x}, {8});
  auto e2 = b.op("aten::exp", {x}, {8});
  Program p = make_program(ir::build_graph({b.op("aten::add.Tensor", {e1, e2}, {8})}));
  canonicalize(p);
  EXPECT_EQ(p.live_ops(), 2u);  // one exp, one add
  const ProgramOp& add = p.ops.back();
  EXPECT_EQ(add.inputs[0], add.inputs[1]);
}

TEST(Canonicalize, OpsWithRuntimeScalarsAreNotMerged) {
  // Equal today, but a learning rate may differ in the next run.
  GraphBuilder b;
  auto x = b.param({8});
  auto m1 = b.op("aten::mul.Scalar", {x}, {8}, {}, {GraphBuilder::scalar(0.1)});
  auto m2 = b.op("aten::mul.Scalar", {x}, {8}, {}, {GraphBuilder::scalar(0.1)});
  Program p = make_program(ir::build_graph({b.op("aten::add.Tensor", {m1, m2}, {8})}));
  canonicalize(p);
  EXPECT_EQ(p.live_ops(), 3u);
}

TEST(Canonicalize, DifferentAttributesAreNotMerged) {
  GraphBuilder b;
  auto x = b.param({4, 8});
  auto s0 = b.op("aten::sum.dim_IntList", {x}, {8}, {GraphBuilder::ints({0}), GraphBuilder::boolean(false)});
  auto s1 = b.op("aten::sum.dim_IntList", {x}, {4}, {GraphBuilder::ints({1}), GraphBuilder::boolean(false)});
  Program p = make_program(ir::build_graph({s0, s1}));
  canonicalize(p);
  EXPECT_EQ(p.live_ops(), 2u);
}

TEST(Canonicalize, DeadOpsAreErasedButParametersKept) {
  GraphBuilder b;
  auto x = b.param({8});
  auto used = b.op("aten::relu", {x}, {8});
  Program p = make_program(ir::build_graph({used}));
  // Make the relu dead by pointing the output at the parameter.
  p.outputs[0] = {0, 0};
  canonicalize(p);
  EXPECT_TRUE(p.ops[1].erased);
  EXPECT_FALSE(p.ops[0].erased);
}
