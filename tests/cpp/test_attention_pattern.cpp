// attention-pattern: a hand-written softmax(q k^T * scale + mask) v becomes
// one attention call on the last bmm, the scores and probabilities erased;
// also under autocast (bf16 products, a float32 softmax, casts between);
// not when something else reads them, not over another dim, not with q, k
// and v in different dtypes, not with DISC_ATTENTION=cpu. Autograd's
// backward of it becomes one attention_backward group of its three gradient
// bmm's, unless it differs.
#include <gtest/gtest.h>

#include <algorithm>

#include "graph_builder.h"
#include "lowering/passes/passes.h"
#include "runtime/options.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::GraphBuilder;
using disc::testing::index_of;

namespace {

Program run_pass(std::vector<ir::Value> roots) {
  Program p = make_program(ir::build_graph(roots));
  shape_constraints(p);
  fuse_attention(p);
  return p;
}

// x, its dtype set to `t`.
ir::Value typed(ir::Value x, ir::DType t) {
  x.node->outputs[0].dtype = t;
  return x;
}

// _to_copy(x, t): a cast.
ir::Value cast(GraphBuilder& b, ir::Value x, std::vector<int64_t> sizes, ir::DType t) {
  return typed(b.op("aten::_to_copy", {x}, std::move(sizes),
                    {ir::Attr::of_int(ir::Attr::Kind::kDType, static_cast<int64_t>(t))}),
               t);
}

// Float32 throughout, or as autocast runs it: q, k, v and the products
// bf16, the float32 mask makes the scores float32, the probabilities cast
// to bf16 for the second bmm.
enum class Precision { kFloat32, kAutocast };

// [B, H, L, L] = [2, 3, 5, 5] scores of q [6, 5, 4] and k^T [6, 4, 5].
struct Attention {
  Precision precision;
  ir::DType half;  // the products' dtype
  GraphBuilder b;
  ir::Value q, kt, v;
  ir::Value mask = b.param({2, 1, 1, 5});
  ir::Value scores, probs, p3, out;

  explicit Attention(int64_t softmax_dim = -1, Precision precision = Precision::kFloat32)
      : precision(precision),
        half(precision == Precision::kAutocast ? ir::DType::kBFloat16 : ir::DType::kFloat32) {
    q = b.param({6, 5, 4}, half), kt = b.param({6, 4, 5}, half), v = b.param({6, 5, 4}, half);
    ir::Value s3 = typed(b.op("aten::bmm", {q, kt}, {6, 5, 5}), half);
    scores = typed(b.op("aten::reshape", {s3}, {2, 3, 5, 5}, {GraphBuilder::ints({2, 3, 5, 5})}), half);
    ir::Value scaled = typed(b.op("aten::mul.Scalar", {scores}, {2, 3, 5, 5}, {GraphBuilder::scalar(0.5)}), half);
    ir::Value masked = b.op("aten::add.Tensor", {scaled, mask}, {2, 3, 5, 5},
                            {ir::Attr::of_int(ir::Attr::Kind::kScalarInt, 1)});
    probs = b.op("aten::_softmax", {masked}, {2, 3, 5, 5},
                 {GraphBuilder::integer(softmax_dim), GraphBuilder::boolean(false)});
    ir::Value read = precision == Precision::kAutocast ? cast(b, probs, {2, 3, 5, 5}, half) : probs;
    p3 = typed(b.op("aten::reshape", {read}, {6, 5, 5}, {GraphBuilder::ints({6, 5, 5})}), half);
    out = typed(b.op("aten::bmm", {p3, v}, {6, 5, 4}), half);
  }
};

// Autograd's backward of Attention, grad out `go`, the scores' gradient
// scaled by `grad_scale` (the forward's 0.5 as autograd writes it).
struct Backward {
  ir::Value go, probs_grad, dq, dkt, dv;

  Backward(Attention& a, double grad_scale = 0.5) {
    GraphBuilder& b = a.b;
    const ir::DType half = a.half, f32 = ir::DType::kFloat32;
    const bool autocast = a.precision == Precision::kAutocast;
    auto t12 = [&](ir::Value x, std::vector<int64_t> sizes) {
      return typed(b.op("aten::transpose.int", {x}, std::move(sizes),
                        {GraphBuilder::integer(1), GraphBuilder::integer(2)}),
                   half);
    };
    go = b.param({6, 5, 4}, half);
    dv = typed(b.op("aten::bmm", {t12(a.p3, {6, 5, 5}), go}, {6, 5, 4}), half);
    ir::Value dp = typed(b.op("aten::bmm", {go, t12(a.v, {6, 4, 5})}, {6, 5, 5}), half);
    ir::Value dp4 = typed(b.op("aten::reshape", {dp}, {2, 3, 5, 5}, {GraphBuilder::ints({2, 3, 5, 5})}), half);
    if (autocast) dp4 = cast(b, dp4, {2, 3, 5, 5}, f32);
    probs_grad = b.op("aten::_softmax_backward_data", {dp4, a.probs}, {2, 3, 5, 5},
                      {GraphBuilder::integer(-1), ir::Attr::of_int(ir::Attr::Kind::kDType, static_cast<int64_t>(f32))});
    ir::Value grad = autocast ? cast(b, probs_grad, {2, 3, 5, 5}, half) : probs_grad;
    ir::Value scaled = typed(b.op("aten::mul.Scalar", {grad}, {2, 3, 5, 5}, {GraphBuilder::scalar(grad_scale)}), half);
    ir::Value gs3 = typed(b.op("aten::reshape", {scaled}, {6, 5, 5}, {GraphBuilder::ints({6, 5, 5})}), half);
    dq = typed(b.op("aten::bmm", {gs3, t12(a.kt, {6, 5, 4})}, {6, 5, 4}), half);
    dkt = typed(b.op("aten::bmm", {t12(a.q, {6, 4, 5}), gs3}, {6, 4, 5}), half);
  }
};

}  // namespace

TEST(AttentionPattern, TheLastBmmReadsQKVAndMaskAndTheRestIsErased) {
  Attention a;
  Program p = run_pass({a.out});
  const uint32_t out = index_of(p, a.out);
  ASSERT_EQ(p.ops[out].attention, 0);
  ASSERT_EQ(p.attentions.size(), 1u);
  const AttentionCall& call = p.attentions[0];
  EXPECT_EQ(call.scale, AttentionCall::Scale::kMulConstant);
  EXPECT_EQ(call.constant, 0.5);
  EXPECT_TRUE(call.mask);
  EXPECT_TRUE(call.nan_when_all_masked);
  EXPECT_EQ(call.scores, index_of(p, a.probs));
  std::vector<uint32_t> inputs;
  for (const ir::GraphRef& r : p.ops[out].inputs) inputs.push_back(r.node);
  EXPECT_EQ(inputs, (std::vector<uint32_t>{index_of(p, a.q), index_of(p, a.kt), index_of(p, a.v),
                                           index_of(p, a.mask)}));
  EXPECT_EQ(p.live_ops(), 1u);  // only the call: the bmm, scale, add, softmax and views are erased
}

TEST(AttentionPattern, ProbabilitiesReadElsewhereKeepTheOps) {
  Attention a;
  Program p = run_pass({a.out, a.probs});
  EXPECT_TRUE(p.attentions.empty());
  EXPECT_EQ(p.ops[index_of(p, a.out)].attention, -1);
}

TEST(AttentionPattern, ASoftmaxOverAnotherDimIsNoAttention) {
  Attention a(/*softmax_dim=*/2);
  EXPECT_TRUE(run_pass({a.out}).attentions.empty());
}

TEST(AttentionPattern, AutocastsChainIsOneCallCastsIncluded) {
  Attention a(-1, Precision::kAutocast);
  Program p = run_pass({a.out});
  ASSERT_EQ(p.attentions.size(), 1u);
  EXPECT_EQ(p.ops[index_of(p, a.out)].attention, 0);
  EXPECT_EQ(p.live_ops(), 1u);  // the cast of the probabilities erased too
}

TEST(AttentionPattern, QKAndVInDifferentDtypesAreNotMatched) {
  Attention a(-1, Precision::kAutocast);
  typed(a.v, ir::DType::kFloat32);  // probabilities in bf16 times a float32 v
  typed(a.out, ir::DType::kFloat32);
  EXPECT_TRUE(run_pass({a.out}).attentions.empty());
}

TEST(AttentionPattern, DiscAttentionCpuKeepsTheOpsAsWritten) {
  Attention a;
  options::set(options::Id::kAttention, "cpu");
  Program p = run_pass({a.out});
  options::reset(options::Id::kAttention);
  EXPECT_TRUE(p.attentions.empty());
}

TEST(AttentionPattern, TheBackwardIsOneGroupOfItsGradientBmms) {
  Attention a;
  Backward g(a);
  Program p = run_pass({a.out, g.dq, g.dkt, g.dv});
  ASSERT_EQ(p.attentions.size(), 1u);
  const AttentionCall& call = p.attentions[0];
  const uint32_t dq = index_of(p, g.dq), dkt = index_of(p, g.dkt), dv = index_of(p, g.dv);
  EXPECT_EQ(call.grad_q, static_cast<int32_t>(dq));
  EXPECT_EQ(call.grad_kt, static_cast<int32_t>(dkt));
  EXPECT_EQ(call.grad_v, static_cast<int32_t>(dv));
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  EXPECT_EQ(p.gemm_groups[0].kind, GemmMergeKind::kAttentionBackward);
  EXPECT_EQ(p.gemm_groups[0].attention, 0);
  std::vector<uint32_t> members{dq, dkt, dv};
  std::sort(members.begin(), members.end());
  EXPECT_EQ(p.gemm_groups[0].ops, members);  // in program order
  const uint32_t out = index_of(p, a.out);
  for (uint32_t m : {dq, dkt, dv}) {
    std::vector<uint32_t> inputs;
    for (const ir::GraphRef& r : p.ops[m].inputs) inputs.push_back(r.node);
    EXPECT_EQ(inputs, (std::vector<uint32_t>{index_of(p, a.q), index_of(p, a.kt), index_of(p, a.v), out,
                                             index_of(p, g.go), index_of(p, a.mask)}));
  }
  EXPECT_EQ(p.live_ops(), 4u);  // the call and the three members: no probabilities kept
  gemm_merge(p);  // which clears only the groups it makes
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  EXPECT_EQ(p.ops[dq].gemm_group, 0);
}

TEST(AttentionPattern, AutocastsBackwardIsOneGroupCastsIncluded) {
  Attention a(-1, Precision::kAutocast);
  Backward g(a);
  Program p = run_pass({a.out, g.dq, g.dkt, g.dv});
  ASSERT_EQ(p.attentions.size(), 1u);
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  EXPECT_EQ(p.gemm_groups[0].kind, GemmMergeKind::kAttentionBackward);
  EXPECT_EQ(p.live_ops(), 4u);  // the call and the three members: both casts erased
}

TEST(AttentionPattern, ABackwardScaledOtherwiseKeepsTheOps) {
  Attention a;
  Backward g(a, /*grad_scale=*/0.25);
  Program p = run_pass({a.out, g.dq, g.dkt, g.dv});
  EXPECT_TRUE(p.attentions.empty());
  EXPECT_TRUE(p.gemm_groups.empty());
}

TEST(AttentionPattern, TheProbabilitiesGradientReadElsewhereKeepsTheOps) {
  Attention a;
  Backward g(a);
  Program p = run_pass({a.out, g.dq, g.dkt, g.dv, g.probs_grad});
  EXPECT_TRUE(p.attentions.empty());
}
