// The structural graph hash: equal for equal structure, different when the
// wiring, a shape or an attribute differs; post-order and parameters.
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

TEST(GraphHash, ShapeAndOpChangeTheHash) {
  Graph a = build_graph({binary("aten::mul.Tensor", leaf({4}), leaf({4}))});
  Graph b = build_graph({binary("aten::mul.Tensor", leaf({5}), leaf({5}))});
  Graph c = build_graph({binary("aten::add.Tensor", leaf({4}), leaf({4}))});
  EXPECT_NE(a.hash, b.hash);
  EXPECT_NE(a.hash, c.hash);
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
