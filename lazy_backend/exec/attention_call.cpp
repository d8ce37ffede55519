#include "lazy_backend/exec/attention_call.h"

#include <c10/util/Exception.h>

#include <optional>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/exec/replay.h"
#include "lazy_backend/trace/attention_ops.h"

namespace disc {

using lowering::AttentionCall;

namespace {

// The factor the scores are multiplied by: a constant, or the 0-dim tensor
// ins[at] (which the call then reads there).
double scale_of(const AttentionCall& call, const std::vector<at::Tensor>& ins, size_t at) {
  switch (call.scale) {
    case AttentionCall::Scale::kMulConstant: return call.constant;
    case AttentionCall::Scale::kDivConstant: return 1.0 / call.constant;
    case AttentionCall::Scale::kMulTensor: return ins[at].item<double>();
    case AttentionCall::Scale::kDivTensor: return 1.0 / ins[at].item<double>();
    case AttentionCall::Scale::kNone: return 1.0;
  }
  return 1.0;
}

AttentionSettings settings_of(const AttentionCall& call, double scale, const ir::Graph& g) {
  AttentionSettings s;
  s.scale = scale;
  s.nan_when_all_masked = call.nan_when_all_masked;
  if (call.dropout >= 0) {
    s.dropout_p = call.dropout_p;
    s.seed = node_seed(*g.nodes[call.dropout].node);
  }
  return s;
}

// q, k and v as [B, H, L, D] heads, from the bmm's [B*H, ...] operands.
struct Heads {
  at::Tensor q, k, v;
  int64_t b = 0, h = 0;

  // A bmm's [B*H, L, D] operand as [B, H, L, D] heads.
  at::Tensor split(const at::Tensor& t3) const { return t3.reshape({b, h, t3.size(1), t3.size(2)}); }
};

Heads heads_of(const AttentionCall& call, const std::vector<at::Tensor>& ins, const ir::Graph& g) {
  const std::vector<int64_t>& scores = g.nodes[call.scores].node->outputs[0].sizes;  // [B, H, Lq, Lk]
  TORCH_INTERNAL_ASSERT(scores.size() == 4, "disc: attention call: scores of rank ", scores.size());
  Heads hs;
  hs.b = scores[0], hs.h = scores[1];
  const at::Tensor& q3 = ins[0];
  const at::Tensor& kt3 = ins[1];
  const at::Tensor& v3 = ins[2];
  TORCH_INTERNAL_ASSERT(hs.b * hs.h == q3.size(0), "disc: attention call: scores [", hs.b, ", ", hs.h,
                        ", ...] for a batch of ", q3.size(0), " heads");
  hs.q = hs.split(q3);
  hs.k = hs.split(kt3.transpose(1, 2));
  hs.v = hs.split(v3);
  return hs;
}

// [B, H, L, D] -> the bmm's [B*H, L, D].
at::Tensor batched(const at::Tensor& t) { return t.view({t.size(0) * t.size(1), t.size(2), t.size(3)}); }

}  // namespace

at::Tensor run_attention_call(const AttentionCall& call, std::vector<at::Tensor> ins, const ir::Graph& g) {
  static metrics::Named calls("library.attention");
  ++calls;
  const Heads hs = heads_of(call, ins, g);
  std::optional<at::Tensor> mask;
  if (call.mask) mask = ins.back();
  const AttentionSettings s = settings_of(call, scale_of(call, ins, 3), g);
  return batched(attention_forward_cpu(hs.q, hs.k, hs.v, mask, s));
}

void run_attention_backward(const lowering::Program& p, uint32_t group, const ir::Graph& g,
                            std::vector<std::vector<at::Tensor>>& values) {
  static metrics::Named calls("library.attention_backward");
  ++calls;
  metrics::bump("kernels_launched");
  metrics::bump("launches.library");
  const lowering::GemmGroup& grp = p.gemm_groups[group];
  const AttentionCall& call = p.attentions.at(grp.attention);
  std::vector<at::Tensor> ins;
  for (const ir::GraphRef& r : p.ops[grp.ops[0]].inputs) ins.push_back(values[r.node][r.index]);
  const Heads hs = heads_of(call, ins, g);
  const at::Tensor out = hs.split(ins[3]), go = hs.split(ins[4]);
  // Tensor scales at 5 (the forward's) and 6 (autograd's copy of it, by
  // which the backward scales the scores' gradient): one factor for both.
  const double scale = scale_of(call, ins, 5), grad_scale = scale_of(call, ins, 6);
  TORCH_CHECK(grad_scale == scale, "disc: hand-written attention: the backward scales the scores' ",
              "gradient by ", grad_scale, ", the forward the scores by ", scale);
  std::optional<at::Tensor> mask;
  if (call.mask) mask = ins.back();
  const AttentionSettings s = settings_of(call, scale, g);
  auto [dq, dk, dv] = attention_backward_without_lse_cpu(go, hs.q, hs.k, hs.v, mask, out, s);
  values[call.grad_q] = {batched(dq)};
  values[call.grad_kt] = {batched(dk).transpose(1, 2).contiguous()};
  values[call.grad_v] = {batched(dv)};
}

}  // namespace disc
