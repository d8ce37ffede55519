// library_epilogue: a relu on a float32 GEMM's or convolution's only use
// (or an exact gelu on a GEMM's, also behind one reshape) becomes its
// post-op; every other relu or gelu stays an element-wise op.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/pipeline.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::GraphBuilder;
using disc::testing::index_of;

namespace {

Program run_pass(std::vector<ir::Value> roots) {
  Program p = make_program(ir::build_graph(roots));
  library_epilogue(p);
  return p;
}

struct Linear {
  GraphBuilder b;
  ir::Value x = b.param({32, 784}), w = b.param({784, 256}), bias = b.param({256});
  ir::Value addmm = b.op("aten::addmm", {bias, x, w}, {32, 256});
  ir::Value relu = b.op("aten::relu", {addmm}, {32, 256});
};

}  // namespace

TEST(LibraryEpilogue, ReluOnAddmmBecomesItsPostOp) {
  Linear l;
  Program p = run_pass({l.relu});
  EXPECT_EQ(p.ops[index_of(p, l.relu)].epilogue_of, static_cast<int32_t>(index_of(p, l.addmm)));
  EXPECT_NE(p.to_string().find("epilogue of %"), std::string::npos);
}

TEST(LibraryEpilogue, ReluOnMmToo) {
  GraphBuilder b;
  auto x = b.param({5, 7}), w = b.param({7, 3});
  auto mm = b.op("aten::mm", {x, w}, {5, 3});
  auto r = b.op("aten::relu", {mm}, {5, 3});
  Program p = run_pass({r});
  EXPECT_EQ(p.ops[index_of(p, r)].epilogue_of, static_cast<int32_t>(index_of(p, mm)));
}

TEST(LibraryEpilogue, AbsorbedReluJoinsNoFusionGroupAndChangesTheSignature) {
  // relu -> mul would be a kLoop kernel; as an epilogue the relu stays out
  // and the mul is a lone op.
  Linear l;
  auto m = l.b.op("aten::mul.Tensor", {l.relu, l.relu}, {32, 256});
  Program p = compile(ir::build_graph({m})).program;
  const ProgramOp& relu = p.ops[index_of(p, l.relu)];
  EXPECT_GE(relu.epilogue_of, 0);
  EXPECT_LT(relu.group, 0);
  Program unmarked = p;
  unmarked.ops[index_of(p, l.relu)].epilogue_of = -1;
  EXPECT_NE(p.signature(), unmarked.signature());
}

TEST(LibraryEpilogue, GemmWithAnotherUserKeepsItsRelu) {
  // The un-rectified value is still read (by the add): no post-op may touch it.
  Linear l;
  auto other = l.b.op("aten::add.Tensor", {l.addmm, l.relu}, {32, 256});
  Program p = run_pass({other});
  EXPECT_EQ(p.ops[index_of(p, l.relu)].epilogue_of, -1);
}

TEST(LibraryEpilogue, GemmThatIsAGraphOutputKeepsItsRelu) {
  Linear l;
  Program p = run_pass({l.relu, l.addmm});
  EXPECT_EQ(p.ops[index_of(p, l.relu)].epilogue_of, -1);
}

TEST(LibraryEpilogue, NonFloat32GemmKeepsItsRelu) {
  // oneDNN runs float32 GEMMs only; a float64 mm stays on ATen.
  GraphBuilder b;
  auto x = b.param({5, 7}, ir::DType::kFloat64), w = b.param({7, 3}, ir::DType::kFloat64);
  auto mm = b.op("aten::mm", {x, w}, {5, 3});
  auto r = b.op("aten::relu", {mm}, {5, 3});
  for (auto* n : {mm.node.get(), r.node.get()}) {
    n->outputs[0].dtype = ir::DType::kFloat64;
    n->finalize();
  }
  Program p = run_pass({r});
  EXPECT_EQ(p.ops[index_of(p, r)].epilogue_of, -1);
}

TEST(LibraryEpilogue, ReluOnConvolutionBecomesItsPostOp) {
  // The CNN's Conv2d + ReLU: the relu runs inside the oneDNN convolution.
  GraphBuilder b;
  auto x = b.param({8, 1, 28, 28}), w = b.param({32, 1, 3, 3});
  auto conv = b.op("aten::convolution", {x, w}, {8, 32, 26, 26});
  auto r = b.op("aten::relu", {conv}, {8, 32, 26, 26});
  Program p = run_pass({r});
  EXPECT_EQ(p.ops[index_of(p, r)].epilogue_of, static_cast<int32_t>(index_of(p, conv)));
}

TEST(LibraryEpilogue, ConvolutionReadByItsBackwardKeepsItsRelu) {
  // A value autograd saves (read by another op) is needed un-rectified.
  GraphBuilder b;
  auto x = b.param({8, 3, 9, 9}), w = b.param({4, 3, 3, 3});
  auto conv = b.op("aten::convolution", {x, w}, {8, 4, 7, 7});
  auto r = b.op("aten::relu", {conv}, {8, 4, 7, 7});
  auto other = b.op("aten::mul.Tensor", {conv, r}, {8, 4, 7, 7});
  Program p = run_pass({other});
  EXPECT_EQ(p.ops[index_of(p, r)].epilogue_of, -1);
}

TEST(LibraryEpilogue, OnlyMmAddmmAndConvolutionTakeEpilogues) {
  // bmm runs without post-ops (oneDNN 2.6 makes no batched primitive with
  // one), convolution_backward has no relu to absorb; and a relu on an
  // element-wise op is a kLoop matter.
  GraphBuilder b;
  auto x = b.param({2, 5, 7}), w = b.param({2, 7, 3});
  auto bmm = b.op("aten::bmm", {x, w}, {2, 5, 3});
  auto r1 = b.op("aten::relu", {bmm}, {2, 5, 3});
  auto e = b.op("aten::exp", {x}, {2, 5, 7});
  auto r2 = b.op("aten::relu", {e}, {2, 5, 7});
  auto g = b.param({2, 4, 5, 5}), in = b.param({2, 3, 7, 7}), k = b.param({4, 3, 3, 3});
  auto cb = b.op("aten::convolution_backward", {g, in, k}, {2, 3, 7, 7});
  auto r3 = b.op("aten::relu", {cb}, {2, 3, 7, 7});
  Program p = run_pass({r1, r2, r3});
  EXPECT_EQ(p.ops[index_of(p, r1)].epilogue_of, -1);
  EXPECT_EQ(p.ops[index_of(p, r2)].epilogue_of, -1);
  EXPECT_EQ(p.ops[index_of(p, r3)].epilogue_of, -1);
}

TEST(LibraryEpilogue, RerunningThePassIsStable) {
  Linear l;
  Program p = run_pass({l.relu});
  library_epilogue(p);
  size_t marked = 0;
  for (const ProgramOp& op : p.ops) marked += op.epilogue_of >= 0;
  EXPECT_EQ(marked, 1u);
}

namespace {
ir::Attr approximate(const char* how) {
  ir::Attr a;
  a.kind = ir::Attr::Kind::kString;
  a.s = how;
  return a;
}
}  // namespace

TEST(LibraryEpilogue, ExactGeluBehindTheReshapeOfA3dLinearBecomesItsPostOp) {
  // nn.Linear on [4, 8, 32] -> GELU: reshape -> addmm -> reshape -> gelu.
  GraphBuilder b;
  auto x = b.param({32, 32}), w = b.param({32, 96}), bias = b.param({96});
  auto mm = b.op("aten::addmm", {bias, x, w}, {32, 96});
  auto r = b.op("aten::reshape", {mm}, {4, 8, 96}, {GraphBuilder::ints({4, 8, 96})});
  auto g = b.op("aten::gelu", {r}, {4, 8, 96}, {approximate("none")});
  Program p = run_pass({g});
  EXPECT_EQ(p.ops[index_of(p, g)].epilogue_of, static_cast<int32_t>(index_of(p, mm)));
  // The tanh approximation is not oneDNN's gelu_erf; a reshape read
  // elsewhere too keeps the un-activated values: neither is an epilogue.
  auto t = b.op("aten::gelu", {r}, {4, 8, 96}, {approximate("tanh")});
  Program q = run_pass({t});
  EXPECT_EQ(q.ops[index_of(q, t)].epilogue_of, -1);
  auto s = b.op("aten::sum", {r}, {});
  Program both = run_pass({g, s});
  EXPECT_EQ(both.ops[index_of(both, g)].epilogue_of, -1);
}
