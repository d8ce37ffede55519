#include "lazy_backend/exec/attention_call.h"

#include <c10/util/Exception.h>

#include <optional>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/exec/replay.h"
#include "lazy_backend/trace/attention_ops.h"

namespace disc {

using lowering::AttentionCall;

namespace {

// The factor a 0-dim scale tensor makes of the scores.
double factor(AttentionCall::Scale s, const at::Tensor& t) {
  const double x = t.item<double>();
  return s == AttentionCall::Scale::kDivTensor ? 1.0 / x : x;
}

double constant_factor(const AttentionCall& call) {
  switch (call.scale) {
    case AttentionCall::Scale::kMulConstant: return call.constant;
    case AttentionCall::Scale::kDivConstant: return 1.0 / call.constant;
    default: return 1.0;
  }
}

bool scale_is_tensor(const AttentionCall& call) {
  return call.scale == AttentionCall::Scale::kMulTensor || call.scale == AttentionCall::Scale::kDivTensor;
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
  hs.q = q3.reshape({hs.b, hs.h, q3.size(1), q3.size(2)});
  hs.k = kt3.transpose(1, 2).reshape({hs.b, hs.h, kt3.size(2), kt3.size(1)});
  hs.v = v3.reshape({hs.b, hs.h, v3.size(1), v3.size(2)});
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
  const double scale = scale_is_tensor(call) ? factor(call.scale, ins[3]) : constant_factor(call);
  return batched(attention_forward_cpu(hs.q, hs.k, hs.v, mask, settings_of(call, scale, g)));
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
  const at::Tensor& out3 = ins[3];
  const at::Tensor& go3 = ins[4];
  const at::Tensor out = out3.reshape({hs.b, hs.h, out3.size(1), out3.size(2)});
  const at::Tensor go = go3.reshape({hs.b, hs.h, go3.size(1), go3.size(2)});
  double scale = constant_factor(call);
  if (scale_is_tensor(call)) {
    // Autograd's copy of the forward's scale: one factor for both.
    scale = factor(call.scale, ins[5]);
    TORCH_CHECK(factor(call.scale, ins[6]) == scale, "disc: hand-written attention: the backward scales ",
                "the scores' gradient by ", factor(call.scale, ins[6]), ", the forward the scores by ", scale);
  }
  std::optional<at::Tensor> mask;
  if (call.mask) mask = ins.back();
  auto [dq, dk, dv] = attention_backward_without_lse_cpu(go, hs.q, hs.k, hs.v, mask, out, settings_of(call, scale, g));
  values[call.grad_q] = {batched(dq)};
  values[call.grad_kt] = {batched(dk).transpose(1, 2).contiguous()};
  values[call.grad_v] = {batched(dv)};
}

}  // namespace disc
