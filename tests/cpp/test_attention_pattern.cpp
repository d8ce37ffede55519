// attention-pattern: a hand-written softmax(q k^T * scale + mask) v becomes
// one attention call on the last bmm, the scores and probabilities erased;
// not when something else reads them, not over another dim, not in bf16,
// not with DISC_ATTENTION=cpu.
#include <gtest/gtest.h>

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

// [B, H, L, L] = [2, 3, 5, 5] scores of q [6, 5, 4] and k^T [6, 4, 5].
struct Attention {
  GraphBuilder b;
  ir::Value q = b.param({6, 5, 4}), kt = b.param({6, 4, 5}), v = b.param({6, 5, 4});
  ir::Value mask = b.param({2, 1, 1, 5});
  ir::Value scores, probs, out;

  explicit Attention(int64_t softmax_dim = -1, ir::DType dtype = ir::DType::kFloat32) {
    ir::Value s3 = b.op("aten::bmm", {q, kt}, {6, 5, 5});
    scores = b.op("aten::reshape", {s3}, {2, 3, 5, 5}, {GraphBuilder::ints({2, 3, 5, 5})});
    ir::Value scaled = b.op("aten::mul.Scalar", {scores}, {2, 3, 5, 5}, {GraphBuilder::scalar(0.5)});
    ir::Value masked = b.op("aten::add.Tensor", {scaled, mask}, {2, 3, 5, 5},
                            {ir::Attr::of_int(ir::Attr::Kind::kScalarInt, 1)});
    probs = b.op("aten::_softmax", {masked}, {2, 3, 5, 5},
                 {GraphBuilder::integer(softmax_dim), GraphBuilder::boolean(false)});
    probs.node->outputs[0].dtype = dtype;
    ir::Value p3 = b.op("aten::reshape", {probs}, {6, 5, 5}, {GraphBuilder::ints({6, 5, 5})});
    out = b.op("aten::bmm", {p3, v}, {6, 5, 4});
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

TEST(AttentionPattern, Bf16ProbabilitiesAreNotMatched) {
  Attention a(-1, ir::DType::kBFloat16);
  EXPECT_TRUE(run_pass({a.out}).attentions.empty());
}

TEST(AttentionPattern, DiscAttentionCpuKeepsTheOpsAsWritten) {
  Attention a;
  options::set(options::Id::kAttention, "cpu");
  Program p = run_pass({a.out});
  options::reset(options::Id::kAttention);
  EXPECT_TRUE(p.attentions.empty());
}
