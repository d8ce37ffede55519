// The structural graph hash: equal for equal structure and size pattern
// (whatever the concrete sizes), different when the wiring, an op, an
// attribute, a rank or the pattern of equal dims differs; post-order and
// parameters.
#include <gtest/gtest.h>

#include "lowering/ir/graph.h"

using namespace disc::ir;

namespace {

Value leaf(std::vector<int64_t> sizes = {4}) {
  return {make_data_node({DType::kFloat32, std::move(sizes)}, std::make_shared<Payload>()), 0};
}

Value binary(const char* op, Value a, Value b) {
  auto n = std::make_shared<Node>();
  n->op = intern_op(op);
  n->inputs = {a, b};
  n->operands = {{Operand::Kind::kTensor, 0, 1}, {Operand::Kind::kTensor, 1, 1}};
  n->outputs = {a.node->outputs[a.index]};
  n->num_returns = 1;
  n->finalize();
  return {n, 0};
}

}  // namespace

TEST(GraphHash, SameStructureSameHash) {
  Graph g1 = build_graph({binary("aten::mul.Tensor", leaf(), leaf())});
  Graph g2 = build_graph({binary("aten::mul.Tensor", leaf(), leaf())});
  EXPECT_EQ(g1.hash, g2.hash);
  EXPECT_EQ(g1.params.size(), 2u);
  EXPECT_EQ(g1.num_ops(), 1u);
}

TEST(GraphHash, SharedInputDiffersFromTwoInputs) {
  // x*x and x*y have equal node hashes but different wiring.
  Value x = leaf();
  Graph square = build_graph({binary("aten::mul.Tensor", x, x)});
  Graph product = build_graph({binary("aten::mul.Tensor", leaf(), leaf())});
  EXPECT_NE(square.hash, product.hash);
  EXPECT_EQ(square.params.size(), 1u);
}

TEST(GraphHash, OpAndRankChangeTheHash) {
  Graph a = build_graph({binary("aten::mul.Tensor", leaf({4}), leaf({4}))});
  Graph c = build_graph({binary("aten::add.Tensor", leaf({4}), leaf({4}))});
  Graph d = build_graph({binary("aten::mul.Tensor", leaf({4, 4}), leaf({4, 4}))});
  EXPECT_NE(a.hash, c.hash);
  EXPECT_NE(a.hash, d.hash);
}

TEST(GraphHash, NewSizesWithTheSamePatternKeepTheHash) {
  // A new batch size: every kernel takes sizes at run time.
  Graph a = build_graph({binary("aten::mul.Tensor", leaf({32, 8}), leaf({32, 8}))});
  Graph b = build_graph({binary("aten::mul.Tensor", leaf({17, 8}), leaf({17, 8}))});
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_EQ(a.pattern, b.pattern);
  EXPECT_NE(a.dims, b.dims);
  EXPECT_EQ(a.pattern[0], kFirstSymbol);      // 32, then 17: the first symbol
  EXPECT_EQ(a.pattern[1], kFirstSymbol + 1);  // 8
}

TEST(GraphHash, EqualDimsThatStopBeingEqualChangeTheHash) {
  // [8, 8] -> [9, 8]: the pattern (s0, s0) becomes (s0, s1).
  Graph a = build_graph({binary("aten::mul.Tensor", leaf({8, 8}), leaf({8, 8}))});
  Graph b = build_graph({binary("aten::mul.Tensor", leaf({9, 8}), leaf({9, 8}))});
  EXPECT_NE(a.hash, b.hash);
  EXPECT_EQ(a.structure_hash, b.structure_hash);
}

TEST(GraphHash, SizesZeroAndOneAreSpecialized) {
  // Size 1 broadcasts and size 0 is empty: both change what a kernel does.
  Graph a = build_graph({binary("aten::mul.Tensor", leaf({3, 5}), leaf({3, 5}))});
  Graph one = build_graph({binary("aten::mul.Tensor", leaf({1, 5}), leaf({1, 5}))});
  Graph zero = build_graph({binary("aten::mul.Tensor", leaf({0, 5}), leaf({0, 5}))});
  EXPECT_NE(a.hash, one.hash);
  EXPECT_NE(a.hash, zero.hash);
  EXPECT_NE(one.hash, zero.hash);
  EXPECT_EQ(one.pattern[0], 1);
  EXPECT_EQ(zero.pattern[0], 0);
}

TEST(GraphHash, SymbolicAttributesJoinThePatternNotTheHash) {
  // view(x, [B * 4]): the size list follows B without changing the hash,
  // but only as long as it keeps its relation to the other dims.
  auto view = [](Value x, std::vector<int64_t> sizes) {
    auto n = std::make_shared<Node>();
    n->op = intern_op("aten::view");
    n->inputs = {x};
    Attr a;
    a.kind = Attr::Kind::kIntList;
    a.ints = sizes;
    a.symbolic = true;
    n->attrs = {a};
    n->operands = {{Operand::Kind::kTensor, 0, 1}, {Operand::Kind::kAttr, 0, 1}};
    n->outputs = {{DType::kFloat32, sizes}};
    n->num_returns = 1;
    n->finalize();
    return Value{n, 0};
  };
  // The graph points into the trace: keep the roots alive while it is used.
  Value va = view(leaf({6, 4}), {24}), vb = view(leaf({9, 4}), {36}), vc = view(leaf({6, 4}), {4, 6});
  Graph a = build_graph({va});
  Graph b = build_graph({vb});
  Graph c = build_graph({vc});
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_NE(a.hash, c.hash);  // rank differs
  ASSERT_EQ(a.dims.size(), 4u);  // leaf [6, 4], attr [24], output [24]
  EXPECT_EQ(a.pattern[2], a.pattern[3]);
  EXPECT_EQ(a.site(2).to_string(a), "element 0 of attribute 0 of %1 (aten::view)");
  EXPECT_EQ(a.site(0).to_string(a), "dim 0 of %0 (input 0: float32[6,4])");
}

TEST(GraphHash, PostOrderVisitsInputsFirstAndDedupes) {
  Value x = leaf();
  Value y = binary("aten::mul.Tensor", x, x);
  Value z = binary("aten::add.Tensor", y, y);
  Graph g = build_graph({z, y});
  ASSERT_EQ(g.nodes.size(), 3u);
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (const GraphRef& r : g.nodes[k].inputs) EXPECT_LT(r.node, k);
  ASSERT_EQ(g.outputs.size(), 2u);
  EXPECT_EQ(g.outputs[1].node, 1u);
}

TEST(GraphHash, DeepChainBuildsAndFreesWithoutRecursion) {
  Value v = leaf();
  for (int k = 0; k < 200000; ++k) v = binary("aten::add.Tensor", v, v);
  Graph g = build_graph({v});
  EXPECT_EQ(g.nodes.size(), 200001u);
}
