// verify: accepts well-formed graphs; errors name the node and the op.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "lowering/passes/passes.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::GraphBuilder;

TEST(Verify, AcceptsAWellFormedGraph) {
  GraphBuilder b;
  auto x = b.param({4, 8});
  Program p = make_program(ir::build_graph({b.op("aten::relu", {x}, {4, 8})}));
  EXPECT_NO_THROW(verify(p));
}

TEST(Verify, InputThatDoesNotPrecedeItsUserIsNamed) {
  GraphBuilder b;
  auto x = b.param({4});
  Program p = make_program(ir::build_graph({b.op("aten::relu", {x}, {4})}));
  p.ops[1].inputs[0].node = 1;  // a self-loop
  try {
    verify(p);
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("node %1 (aten::relu)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not precede"), std::string::npos);
  }
}

TEST(Verify, ElementwiseInputOfHigherRankIsRejected) {
  GraphBuilder b;
  auto x = b.param({2, 4});
  Program p = make_program(ir::build_graph({b.op("aten::exp", {x}, {4})}));
  EXPECT_THROW(verify(p), CompileError);
}

TEST(Verify, OutArgumentOfAnyOldShapeIsAccepted) {
  // mul.out(a, b, out=empty [0]) resized to the 0-d result: out is written,
  // not read, so its old shape need not broadcast.
  GraphBuilder b;
  auto a = b.param({}), c = b.param({}), out = b.param({0});
  ir::Value r = b.op_mutating("aten::mul.out", {a, c, out}, 2, {});
  Program p = make_program(ir::build_graph({r}));
  EXPECT_NO_THROW(verify(p));
}
