// The graph text parser: print(parse(text)) == text for every operand and
// attribute kind, the same hash as the graph that was printed, and errors
// that name the line and the token.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "graph_builder.h"
#include "lowering/ir/parse.h"

using namespace disc;
using namespace disc::ir;
using disc::testing::GraphBuilder;

namespace {

Attr list_of(Attr::Kind k, std::vector<int64_t> ints, std::vector<double> doubles = {}) {
  Attr a;
  a.kind = k;
  a.ints = std::move(ints);
  a.doubles = std::move(doubles);
  return a;
}

// A node with what capture.cpp can produce beyond GraphBuilder's plain ops:
// tensor lists, optional tensor lists, runtime lists, writes and rng.
NodePtr rich_node(const std::vector<Value>& in) {
  auto n = std::make_shared<Node>();
  n->op = intern_op("test::everything.out");
  n->inputs = in;
  n->operands.push_back({Operand::Kind::kTensorList, 0, 2});
  n->attrs.push_back(list_of(Attr::Kind::kBoolList, {1, 0, 1}));
  n->operands.push_back({Operand::Kind::kOptionalTensorList, 2, 2, 0});
  n->runtime = {Attr::of_double(Attr::Kind::kScalarDouble, 0.1),
                Attr::of_int(Attr::Kind::kScalarInt, 3)};
  n->operands.push_back({Operand::Kind::kRuntimeList, 0, 2});
  n->runtime.push_back(Attr::of_double(Attr::Kind::kDouble, -2.5e-7));
  n->operands.push_back({Operand::Kind::kRuntime, 2, 1});
  n->outputs = {{DType::kBFloat16, {2, 0}}, {DType::kFloat32, {}, true}, {DType::kInt64, {4}}};
  n->num_returns = 2;
  n->mutated = {3};
  n->rng_runtime = 3;
  n->runtime.push_back(Attr::of_int(Attr::Kind::kInt, 1234));
  n->runtime.push_back(Attr::of_int(Attr::Kind::kInt, 8));
  n->finalize();
  return n;
}

}  // namespace

TEST(Parse, EveryAttributeKindRoundTripsWithTheSameHash) {
  GraphBuilder b;
  auto x = b.param({4, 8});
  auto y = b.param({1}, DType::kInt64);
  Attr sym_sizes = GraphBuilder::ints({32, 1});
  sym_sizes.symbolic = true;
  Attr sym_scalar = Attr::of_int(Attr::Kind::kScalarInt, 7);
  sym_scalar.symbolic = true;
  Attr str;
  str.kind = Attr::Kind::kString;
  str.s = "say \"tanh\"\\";
  auto o = b.op("test::attrs", {x, y}, {32, 1},
                {Attr::none(), GraphBuilder::integer(-3), GraphBuilder::boolean(true),
                 Attr::of_double(Attr::Kind::kDouble, 1.0), Attr::of_double(Attr::Kind::kDouble, 1e-05),
                 Attr::of_double(Attr::Kind::kDouble, 0.1),
                 Attr::of_double(Attr::Kind::kDouble, -std::numeric_limits<double>::infinity()),
                 Attr::of_int(Attr::Kind::kScalarBool, 0), GraphBuilder::scalar(2.0), str,
                 GraphBuilder::ints({}), list_of(Attr::Kind::kBoolList, {}),
                 list_of(Attr::Kind::kDoubleList, {}), list_of(Attr::Kind::kDoubleList, {}, {0.5, 3.0}),
                 Attr::of_int(Attr::Kind::kDevice, 0),
                 Attr::of_int(Attr::Kind::kDType, static_cast<int64_t>(DType::kFloat16)), sym_sizes,
                 sym_scalar},
                {GraphBuilder::scalar(0.001)});
  NodePtr rich = rich_node({x, x, x, o, y});
  Graph g = build_graph({o, {rich, 0}, {rich, 2}, o});
  std::string text = g.to_string();
  ParsedGraph parsed = parse_graph(text);
  EXPECT_EQ(parsed.graph.to_string(), text);
  EXPECT_EQ(parsed.graph.hash, g.hash);
  EXPECT_EQ(parsed.graph.pattern, g.pattern);
  ASSERT_EQ(parsed.graph.nodes.size(), g.nodes.size());
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& a = *g.nodes[k].node;
    const Node& p = *parsed.graph.nodes[k].node;
    EXPECT_EQ(p.attrs, a.attrs) << "node " << k;
    EXPECT_EQ(p.runtime, a.runtime) << "node " << k;
    EXPECT_EQ(p.outputs, a.outputs) << "node " << k;
    EXPECT_EQ(p.local_hash, a.local_hash) << "node " << k;
  }
}

TEST(Parse, ADumpedTrainingGraphRoundTrips) {
  // A DISC_DUMP_IR input file (layer norm / softmax backward), as printed.
  const std::string text =
      "graph(hash=0, params=3)\n"
      "  %0 = param 0 : float32[32]\n"
      "  %1 = param 1 : float32[8,16,32]\n"
      "  %2 = aten::reshape(%in0, sym[1, 128, 32]) -> (float32[1,128,32])  inputs(%1.0)\n"
      "  %3 = aten::native_batch_norm(%in0, None, None, None, None, True, 0.0, 1e-05) -> "
      "(float32[1,128,32], float32[128], float32[128])  inputs(%2.0)\n"
      "  %4 = aten::reshape(%in0, sym[8, 16, 32]) -> (float32[8,16,32])  inputs(%3.0)\n"
      "  %5 = param 2 : float32[32]\n"
      "  %6 = aten::_softmax(%in0, -1, False) -> (float32[8,16,32])  inputs(%4.0)\n"
      "  %7 = aten::fill_.Scalar(%in0, $Scalar(1.0)) -> (%in0 := float32[8,16,32])  inputs(%6.0)\n"
      "  %8 = aten::native_layer_norm_backward(%in0, %in1, sym[32], %in2, %in3, %in4, %in5, "
      "[True, True, True]) -> (float32[8,16,32], float32[32], float32[32])  "
      "inputs(%7.0, %1.0, %3.1, %3.2, %5.0, %0.0)\n"
      "  return (%6.0, %8.0, %8.1, %8.2)\n";
  ParsedGraph p = parse_graph(text);
  std::string again = p.graph.to_string();
  // Only the hash in the header differs: the file said 0.
  EXPECT_EQ(again.substr(again.find(',')), text.substr(text.find(',')));
  EXPECT_EQ(p.graph.params.size(), 3u);
  EXPECT_EQ(p.graph.nodes[7].node->mutated, std::vector<uint32_t>{0});
  EXPECT_EQ(p.graph.nodes[7].node->num_returns, 0u);
  EXPECT_EQ(parse_graph(again).graph.to_string(), again);
}

TEST(Parse, HandWrittenGraphsNeedNoHashAndKeepDeadNodes) {
  // No hash, comments, and a dead node: text order is graph order, so a
  // DCE test sees the op it should erase.
  ParsedGraph p = parse_graph(
      "# two exps, one unused\n"
      "graph\n"
      "  %0 = param 0 : float32[8]\n"
      "\n"
      "  %1 = aten::exp(%in0) -> (float32[8])  inputs(%0.0)\n"
      "  %2 = aten::exp(%in0) -> (float32[8])  inputs(%0.0)\n"
      "  return (%1.0)\n");
  EXPECT_EQ(p.graph.nodes.size(), 3u);
  EXPECT_EQ(p.graph.outputs, (std::vector<GraphRef>{{1, 0}}));
  EXPECT_NE(p.graph.hash, 0u);
}

TEST(Parse, AReferenceToALaterNodeIsLeftForVerify) {
  ParsedGraph p = parse_graph(
      "graph(params=1)\n"
      "  %0 = param 0 : float32[4]\n"
      "  %1 = aten::relu(%in0) -> (float32[4])  inputs(%2.0)\n"
      "  %2 = aten::relu(%in0) -> (float32[4])  inputs(%1.0)\n"
      "  return (%2.0)\n");
  EXPECT_EQ(p.graph.nodes[1].inputs[0].node, 2u);
}

namespace {
std::string error_of(const std::string& text) {
  try {
    parse_graph(text);
  } catch (const ParseError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(Parse, ErrorsNameTheLineAndTheToken) {
  const std::string head = "graph\n  %0 = param 0 : float32[4]\n";
  EXPECT_EQ(error_of(head + "  %1 = aten::relu(%in0) -> (f16x[4])  inputs(%0.0)\n  return (%1.0)\n"),
            "line 3: unknown dtype 'f16x'");
  EXPECT_EQ(error_of(head + "  %1 = aten::relu(%in0) -> (float32[4])  inputs(%7.0)\n  return (%1.0)\n"),
            "line 3: unknown value '%7.0'");
  EXPECT_EQ(error_of(head + "  %1 = aten::relu(%in0) -> (float32[4])  inputs(%0.1)\n  return (%1.0)\n"),
            "line 3: '%0.1': %0 has 1 outputs");
  EXPECT_EQ(error_of(head + "  %2 = aten::relu(%in0) -> (float32[4])  inputs(%0.0)\n"),
            "line 3: expected node %1 next");
  EXPECT_EQ(error_of(head + "  %1 = aten::relu(%in0, Sclar(1)) -> (float32[4])  inputs(%0.0)\n"),
            "line 3: unknown attribute 'Sclar'");
  EXPECT_EQ(error_of(head + "  %1 = aten::relu(%in1) -> (float32[4])  inputs(%0.0)\n"),
            "line 3: operand %in1 but the node has 1 inputs");
  EXPECT_EQ(error_of(head + "  %1 = aten::relu(%in0) -> (float32[4]  inputs(%0.0)\n"),
            "line 3: expected ',', found 'inputs'");
  EXPECT_EQ(error_of(head + "  %1 = aten::relu(%in0) -> (float32[4])  inputs(%0.0)\n"),
            "line 4: the graph has no 'return (...)' line");
  EXPECT_EQ(error_of(head + "  return (%0.0)\n  %1 = aten::relu(%in0)\n"),
            "line 4: text after 'return', found '%1'");
  EXPECT_EQ(error_of("graph(params=2)\n  %0 = param 0 : float32[4]\n  return (%0.0)\n"),
            "line 1: params=2 but the graph has 1");
  EXPECT_EQ(error_of("  %0 = param 0 : float32[4]\n"), "line 1: expected 'graph(...)' before the nodes");
}
