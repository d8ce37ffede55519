// shape_constraints: symbols flow through GEMMs, broadcasts, reductions,
// transposes and reshapes; size-1 dims are the constant symbol 0.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "lowering/passes/passes.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::GraphBuilder;

namespace {
Program analyze(std::vector<ir::Value> roots) {
  Program p = make_program(ir::build_graph(roots));
  shape_constraints(p);
  return p;
}
const std::vector<uint32_t>& dims(const Program& p, const ir::Value& v) {
  for (const ProgramOp& op : p.ops)
    if (op.node == v.node.get()) return op.dims[v.index];
  throw std::runtime_error("value not in program");
}
}  // namespace

TEST(ShapeConstraints, LinearLayerSharesBatchAndFeatureSymbols) {
  GraphBuilder b;
  auto x = b.param({32, 784});
  auto w = b.param({256, 784});
  auto bias = b.param({256});
  auto wt = b.op("aten::transpose.int", {w}, {784, 256}, {GraphBuilder::integer(0), GraphBuilder::integer(1)});
  auto y = b.op("aten::addmm", {bias, x, wt}, {32, 256});
  auto r = b.op("aten::relu", {y}, {32, 256});
  Program p = analyze({r});
  EXPECT_EQ(dims(p, r), dims(p, y));
  EXPECT_EQ(dims(p, y)[0], dims(p, x)[0]);   // batch
  EXPECT_EQ(dims(p, y)[1], dims(p, bias)[0]);  // features, through the broadcast bias
  EXPECT_EQ(dims(p, x)[1], dims(p, w)[1]);   // the contracted dim, through the transpose
  EXPECT_EQ(p.num_symbols, 4u);  // 1 + {batch, in, out}
}

TEST(ShapeConstraints, SizeOneIsTheConstantSymbol) {
  GraphBuilder b;
  auto x = b.param({8, 1});
  auto y = b.param({8, 5});
  auto s = b.op("aten::add.Tensor", {x, y}, {8, 5});
  Program p = analyze({s});
  EXPECT_EQ(dims(p, x)[1], 0u);
  EXPECT_NE(dims(p, s)[1], 0u);
  EXPECT_EQ(dims(p, s)[0], dims(p, x)[0]);
}

TEST(ShapeConstraints, EqualSizesFromUnrelatedInputsStayDistinct) {
  // 16 == 16 by accident: no op relates them, so they are separate symbols.
  GraphBuilder b;
  auto x = b.param({16});
  auto y = b.param({16, 4});
  Program p = analyze({b.op("aten::relu", {x}, {16}), b.op("aten::relu", {y}, {16, 4})});
  EXPECT_NE(dims(p, x)[0], dims(p, y)[0]);
}

TEST(ShapeConstraints, ReshapeRecordsAProductAndKeepsTheTrailingDim) {
  GraphBuilder b;
  auto x = b.param({4, 8, 16});
  auto r = b.op("aten::reshape", {x}, {32, 16}, {GraphBuilder::ints({32, 16})});
  Program p = analyze({r});
  EXPECT_EQ(dims(p, r)[1], dims(p, x)[2]);
  ASSERT_EQ(p.products.size(), 1u);
  EXPECT_EQ(p.products[0].lhs, (std::vector<uint32_t>{dims(p, x)[0], dims(p, x)[1]}));
  EXPECT_EQ(p.products[0].rhs, (std::vector<uint32_t>{dims(p, r)[0]}));
}

TEST(ShapeConstraints, ReductionKeepsTheOtherDims) {
  GraphBuilder b;
  auto x = b.param({4, 8, 16});
  auto s = b.op("aten::sum.dim_IntList", {x}, {4, 16}, {GraphBuilder::ints({1}), GraphBuilder::boolean(false)});
  auto k = b.op("aten::sum.dim_IntList", {x}, {4, 1, 16}, {GraphBuilder::ints({-2}), GraphBuilder::boolean(true)});
  Program p = analyze({s, k});
  EXPECT_EQ(dims(p, s), (std::vector<uint32_t>{dims(p, x)[0], dims(p, x)[2]}));
  EXPECT_EQ(dims(p, k), (std::vector<uint32_t>{dims(p, x)[0], 0u, dims(p, x)[2]}));
}

TEST(ShapeConstraints, ReducingOrTransposingAScalarOverDimZeroIsFine) {
  // torch accepts dim 0 / -1 on a 0-dim tensor; there are no dims to relate.
  GraphBuilder b;
  auto x = b.param({});
  auto s = b.op("aten::sum.dim_IntList", {x}, {}, {GraphBuilder::ints({0}), GraphBuilder::boolean(false)});
  auto m = b.op("aten::amax", {x}, {}, {GraphBuilder::ints({-1}), GraphBuilder::boolean(true)});
  auto t = b.op("aten::transpose.int", {x}, {}, {GraphBuilder::integer(0), GraphBuilder::integer(-1)});
  Program p = analyze({s, m, t});
  EXPECT_TRUE(dims(p, s).empty());
  EXPECT_EQ(p.num_symbols, 1u);
}

TEST(ShapeConstraints, AResizedOutBufferDoesNotTieItsUsersTogether) {
  // abs(x), abs(y) traced as abs.out into one (CSE-merged) empty buffer: the
  // results keep their own dims; x's 2 must not become the constant 1 of y.
  GraphBuilder b;
  auto x = b.param({2});
  auto y = b.param({1});
  auto buf = b.param({0});
  auto ax = b.op_mutating("aten::abs.out", {x, buf}, 1, {2});
  auto ay = b.op_mutating("aten::abs.out", {y, buf}, 1, {1});
  Program p = analyze({ax, ay});
  EXPECT_EQ(dims(p, ay)[0], 0u);
  EXPECT_NE(dims(p, ax)[0], 0u);
  EXPECT_NE(dims(p, ax)[0], dims(p, buf)[0]);
}
