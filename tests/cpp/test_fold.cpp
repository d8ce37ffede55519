// fold: transpose pairs, squeeze-of-unsqueeze, neg-of-neg and alias read
// the original, reshape and expand chains read their source; nothing else
// is rewritten.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "lowering/passes/passes.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::GraphBuilder;

namespace {

Program folded(std::vector<ir::Value> outputs) {
  Program p = make_program(ir::build_graph(std::move(outputs)));
  fold(p);
  canonicalize(p);  // erases what the fold left unread
  return p;
}

ir::Value transpose(GraphBuilder& b, ir::Value x, int64_t d0, int64_t d1, std::vector<int64_t> sizes) {
  return b.op("aten::transpose.int", {x}, std::move(sizes),
              {GraphBuilder::integer(d0), GraphBuilder::integer(d1)});
}

}  // namespace

TEST(Fold, TransposeOfTransposeIsTheOriginal) {
  // Negative and swapped dims name the same pair once wrapped by the rank.
  GraphBuilder b;
  auto x = b.param({2, 3, 4});
  auto t1 = transpose(b, x, 0, 2, {4, 3, 2});
  auto t2 = transpose(b, t1, -1, 0, {2, 3, 4});
  Program p = folded({b.op("aten::exp", {t2}, {2, 3, 4})});
  EXPECT_EQ(p.live_ops(), 1u);  // the exp (parameters are not counted)
  EXPECT_EQ(p.ops.back().inputs[0], (ir::GraphRef{0, 0}));
}

TEST(Fold, ChainsFoldInOneSweepAndOutputsFollow) {
  GraphBuilder b;
  auto x = b.param({2, 3});
  auto t1 = transpose(b, x, 0, 1, {3, 2});
  auto t2 = transpose(b, t1, 1, 0, {2, 3});
  auto t3 = transpose(b, t2, 0, 1, {3, 2});
  auto t4 = transpose(b, t3, 0, 1, {2, 3});
  Program p = folded({t4});
  EXPECT_EQ(p.live_ops(), 0u);
  EXPECT_EQ(p.outputs[0], (ir::GraphRef{0, 0}));
}

TEST(Fold, DifferentDimPairsAreKept) {
  GraphBuilder b;
  auto x = b.param({2, 3, 4});
  auto t1 = transpose(b, x, 0, 1, {3, 2, 4});
  auto t2 = transpose(b, t1, 1, 2, {3, 4, 2});
  Program p = folded({t2});
  EXPECT_EQ(p.live_ops(), 2u);
}

TEST(Fold, TransposeOfADimWithItselfIsTheInput) {
  GraphBuilder b;
  auto x = b.param({2, 3});
  Program p = folded({transpose(b, x, 1, -1, {2, 3})});
  EXPECT_EQ(p.outputs[0], (ir::GraphRef{0, 0}));
}

TEST(Fold, SqueezeOfTheDimAnUnsqueezeAddedIsTheOriginal) {
  GraphBuilder b;
  auto x = b.param({2, 3});
  auto u = b.op("aten::unsqueeze", {x}, {2, 1, 3}, {GraphBuilder::integer(1)});
  auto same = b.op("aten::squeeze.dim", {u}, {2, 3}, {GraphBuilder::integer(-2)});
  auto u0 = b.op("aten::unsqueeze", {x}, {1, 2, 3}, {GraphBuilder::integer(0)});
  auto other = b.op("aten::squeeze.dim", {u0}, {1, 2, 3}, {GraphBuilder::integer(1)});  // a no-op squeeze
  Program p = folded({same, other});
  EXPECT_EQ(p.outputs[0], (ir::GraphRef{0, 0}));
  EXPECT_NE(p.outputs[1], (ir::GraphRef{0, 0}));
}

TEST(Fold, ReshapeOfReshapeReadsTheFirstInput) {
  // The inner reshape has another reader: it stays, the outer skips it.
  GraphBuilder b;
  auto x = b.param({4, 6});
  auto r1 = b.op("aten::reshape", {x}, {24}, {GraphBuilder::ints({24})});
  auto r2 = b.op("aten::reshape", {r1}, {2, 12}, {GraphBuilder::ints({2, 12})});
  Program p = folded({r2, b.op("aten::exp", {r1}, {24})});
  const ProgramOp& outer = p.ops[p.outputs[0].node];
  EXPECT_EQ(outer.node->outputs[0].sizes, (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(outer.inputs[0], (ir::GraphRef{0, 0}));
  EXPECT_EQ(p.live_ops(), 3u);  // both reshapes, the exp
}

TEST(Fold, NegOfNegAndAliasAreTheOriginal) {
  GraphBuilder b;
  auto x = b.param({5});
  auto n1 = b.op("aten::neg", {x}, {5});
  auto n2 = b.op("aten::neg", {n1}, {5});
  auto a = b.op("aten::alias", {x}, {5});
  auto n3 = b.op("aten::neg", {n2}, {5});  // odd count: one neg stays
  Program p = folded({n2, a, n3});
  EXPECT_EQ(p.outputs[0], (ir::GraphRef{0, 0}));
  EXPECT_EQ(p.outputs[1], (ir::GraphRef{0, 0}));
  EXPECT_EQ(p.ops[p.outputs[2].node].inputs[0], (ir::GraphRef{0, 0}));
  EXPECT_EQ(p.live_ops(), 1u);
}

TEST(Fold, ExpandOfExpandReadsTheFirstInput) {
  GraphBuilder b;
  auto x = b.param({3, 1});
  auto e1 = b.op("aten::expand", {x}, {3, 4}, {GraphBuilder::ints({3, 4}), GraphBuilder::boolean(false)});
  auto e2 = b.op("aten::expand", {e1}, {2, 3, 4}, {GraphBuilder::ints({2, 3, 4}), GraphBuilder::boolean(false)});
  Program p = folded({e2});
  EXPECT_EQ(p.ops[p.outputs[0].node].inputs[0], (ir::GraphRef{0, 0}));
  EXPECT_EQ(p.live_ops(), 1u);
}
