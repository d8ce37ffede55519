// gemm_merge: GEMMs sharing an operand become one group; independent
// equal-shape ones only when batched merging is on; never a group whose
// members depend on each other.
#include <gtest/gtest.h>

#include <algorithm>

#include "graph_builder.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/pipeline.h"
#include "runtime/options.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::GraphBuilder;
using disc::testing::index_of;

namespace {

struct MergeOptions {
  bool on = true;
  bool batched = false;
};

// Runs shape constraints, the epilogue pass and gemm_merge with `merge`.
Program run_pass(std::vector<ir::Value> roots, MergeOptions merge = {}) {
  options::set(options::Id::kGemmMerge, merge.on ? "1" : "0");
  options::set(options::Id::kGemmMergeBatched, merge.batched ? "1" : "0");
  Program p = make_program(ir::build_graph(roots));
  shape_constraints(p);
  library_epilogue(p);
  gemm_merge(p);
  options::reset(options::Id::kGemmMerge);
  options::reset(options::Id::kGemmMergeBatched);
  return p;
}

// Program indices of `vs`, in program order (as a group lists its members).
std::vector<uint32_t> indices(const Program& p, std::vector<ir::Value> vs) {
  std::vector<uint32_t> out;
  for (const ir::Value& v : vs) out.push_back(index_of(p, v));
  std::sort(out.begin(), out.end());
  return out;
}

// x @ W^T + b for three weights of one hidden state: Q, K, V projections.
struct Qkv {
  GraphBuilder b;
  ir::Value x = b.param({32, 64});
  ir::Value proj(int64_t n) {
    auto w = b.param({n, 64}), bias = b.param({n});
    auto wt = b.op("aten::transpose.int", {w}, {64, n}, {GraphBuilder::integer(0), GraphBuilder::integer(1)});
    auto one = ir::Attr::of_int(ir::Attr::Kind::kScalarInt, 1);
    return b.op("aten::addmm", {bias, x, wt}, {32, n}, {one, one});
  }
  ir::Value q = proj(64), k = proj(64), v = proj(16);
};

}  // namespace

TEST(GemmMerge, QkvProjectionsOfOneInputBecomeOneSharedLhsGroup) {
  Qkv m;
  Program p = run_pass({m.q, m.k, m.v});
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  EXPECT_EQ(p.gemm_groups[0].kind, GemmMergeKind::kSharedLhs);
  EXPECT_EQ(p.gemm_groups[0].ops, indices(p, {m.q, m.k, m.v}));  // n differs: fine
  EXPECT_EQ(p.library_launches(), 1u);
  EXPECT_NE(p.to_string().find("gemm group 0 shared_lhs: %"), std::string::npos);
}

TEST(GemmMerge, TurnedOffLeavesEveryGemmAlone) {
  Qkv m;
  Program p = run_pass({m.q, m.k, m.v}, {.on = false});
  EXPECT_TRUE(p.gemm_groups.empty());
  EXPECT_EQ(p.library_launches(), 3u);
}

TEST(GemmMerge, GroupIsInTheSignature) {
  Qkv m;
  Program on = run_pass({m.q, m.k, m.v}), off = run_pass({m.q, m.k, m.v}, {.on = false});
  EXPECT_NE(on.signature(), off.signature());
}

TEST(GemmMerge, WeightGradientsSharingTheInputBecomeOneSharedRhsGroup) {
  // nn.Linear's weight grad is (g^T @ x)^T: three of them read the same x as B.
  GraphBuilder b;
  auto x = b.param({32, 64});
  std::vector<ir::Value> grads;
  for (int i = 0; i < 3; ++i) {
    auto g = b.param({32, 48});
    auto gt = b.op("aten::transpose.int", {g}, {48, 32}, {GraphBuilder::integer(0), GraphBuilder::integer(1)});
    grads.push_back(b.op("aten::mm", {gt, x}, {48, 64}));
  }
  Program p = run_pass(grads);
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  EXPECT_EQ(p.gemm_groups[0].kind, GemmMergeKind::kSharedRhs);
  EXPECT_EQ(p.gemm_groups[0].ops, indices(p, grads));
}

TEST(GemmMerge, MemberThatReadsAnotherMemberStaysOut) {
  // z = x @ exp(x @ w) shares x with y = x @ w but reads y: merging them
  // would make the group wait for itself. u (another x @ w) joins y.
  GraphBuilder b;
  auto x = b.param({16, 16}), w = b.param({16, 16});
  auto y = b.op("aten::mm", {x, w}, {16, 16});
  auto e = b.op("aten::exp", {y}, {16, 16});
  auto z = b.op("aten::mm", {x, e}, {16, 16});
  auto u = b.op("aten::mm", {x, w}, {16, 16});  // canonicalize would CSE it; the pass must not care
  Program p = run_pass({z, u});
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  EXPECT_EQ(p.gemm_groups[0].ops, indices(p, {y, u}));
  EXPECT_EQ(p.ops[index_of(p, z)].gemm_group, -1);
}

TEST(GemmMerge, NoCycleThroughAnEarlierGroup) {
  // a1, b1 and c share x, but c reads a2, which reads a1: c must wait for
  // the group {a1, b1}, so it cannot be in it.
  GraphBuilder b;
  auto x = b.param({8, 8}), y = b.param({8, 8}), w = b.param({8, 8});
  auto a1 = b.op("aten::mm", {x, w}, {8, 8});
  auto b1 = b.op("aten::mm", {x, y}, {8, 8});
  auto a2 = b.op("aten::mm", {a1, y}, {8, 8});
  auto c = b.op("aten::mm", {x, a2}, {8, 8});
  Program p = run_pass({b1, c});
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  EXPECT_EQ(p.gemm_groups[0].ops, indices(p, {a1, b1}));
  EXPECT_EQ(p.ops[index_of(p, c)].gemm_group, -1);
  verify_plan(p);  // the units stay acyclic
}

TEST(GemmMerge, AGemmWithAReluEpilogueStaysAlone) {
  Qkv m;
  auto r = m.b.op("aten::relu", {m.q}, {32, 64});
  Program p = run_pass({r, m.k, m.v});
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  EXPECT_EQ(p.gemm_groups[0].ops, indices(p, {m.k, m.v}));
}

TEST(GemmMerge, ScaledAddmmAndFloat64StayAlone) {
  GraphBuilder b;
  auto x = b.param({8, 8}), w = b.param({8, 8}), bias = b.param({8});
  auto one = ir::Attr::of_int(ir::Attr::Kind::kScalarInt, 1);
  auto scaled = b.op("aten::addmm", {bias, x, w}, {8, 8}, {one, GraphBuilder::scalar(2.0)});
  auto plain = b.op("aten::addmm", {bias, x, w}, {8, 8}, {one, one});
  auto xd = b.param({8, 8}, ir::DType::kFloat64);
  auto d1 = b.op("aten::mm", {xd, xd}, {8, 8});
  auto d2 = b.op("aten::mm", {xd, d1}, {8, 8});
  Program p = run_pass({scaled, plain, d2});
  EXPECT_TRUE(p.gemm_groups.empty());
}

TEST(GemmMerge, IndependentEqualShapeGemmsBatchOnlyWhenEnabled) {
  // Equal sizes of unrelated inputs are distinct symbols: the operands are
  // tied to x and w by element-wise ops, as activations and grads are.
  GraphBuilder b;
  auto x = b.param({16, 32}), w = b.param({32, 8});
  std::vector<ir::Value> mms;
  for (int i = 0; i < 3; ++i) {
    auto a = b.op("aten::mul.Tensor", {x, b.param({16, 32})}, {16, 32});
    auto bb = b.op("aten::mul.Tensor", {w, b.param({32, 8})}, {32, 8});
    mms.push_back(b.op("aten::mm", {a, bb}, {16, 8}));
  }
  auto other = b.op("aten::mm", {b.op("aten::exp", {x}, {16, 32}), b.param({32, 4})}, {16, 4});  // n differs
  std::vector<ir::Value> roots = mms;
  roots.push_back(other);
  EXPECT_TRUE(run_pass(roots).gemm_groups.empty());
  Program p = run_pass(roots, {.on = true, .batched = true});
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  EXPECT_EQ(p.gemm_groups[0].kind, GemmMergeKind::kBatched);
  EXPECT_EQ(p.gemm_groups[0].ops, indices(p, mms));
}

TEST(GemmMerge, RerunningThePassIsStable) {
  Qkv m;
  Program p = run_pass({m.q, m.k, m.v});
  const uint64_t sig = p.signature();
  gemm_merge(p);
  EXPECT_EQ(p.signature(), sig);
}
