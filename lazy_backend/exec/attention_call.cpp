#include "lazy_backend/exec/attention_call.h"

#include <c10/util/Exception.h>

#include <optional>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/trace/attention_ops.h"

namespace disc {

using lowering::AttentionCall;

namespace {

// The factor the scores are multiplied by.
double scale_of(const AttentionCall& call, const std::vector<at::Tensor>& ins) {
  switch (call.scale) {
    case AttentionCall::Scale::kNone: return 1.0;
    case AttentionCall::Scale::kMulTensor: return ins[3].item<double>();
    case AttentionCall::Scale::kDivTensor: return 1.0 / ins[3].item<double>();
    case AttentionCall::Scale::kMulConstant: return call.constant;
    case AttentionCall::Scale::kDivConstant: return 1.0 / call.constant;
  }
  return 1.0;
}

}  // namespace

at::Tensor run_attention_call(const AttentionCall& call, std::vector<at::Tensor> ins, const ir::Graph& g) {
  static metrics::Named calls("library.attention");
  ++calls;
  const std::vector<int64_t>& scores = g.nodes[call.scores].node->outputs[0].sizes;  // [B, H, Lq, Lk]
  TORCH_INTERNAL_ASSERT(scores.size() == 4, "disc: attention call: scores of rank ", scores.size());
  const int64_t b = scores[0], h = scores[1];
  const at::Tensor& q3 = ins[0];
  const at::Tensor& kt3 = ins[1];
  const at::Tensor& v3 = ins[2];
  TORCH_INTERNAL_ASSERT(b * h == q3.size(0), "disc: attention call: scores [", b, ", ", h,
                        ", ...] for a batch of ", q3.size(0), " heads");
  const at::Tensor q = q3.reshape({b, h, q3.size(1), q3.size(2)});
  const at::Tensor k = kt3.transpose(1, 2).reshape({b, h, kt3.size(2), kt3.size(1)});
  const at::Tensor v = v3.reshape({b, h, v3.size(1), v3.size(2)});
  std::optional<at::Tensor> mask;
  if (call.mask) mask = ins.back();
  const at::Tensor out = attention_forward_cpu(q, k, v, mask, scale_of(call, ins),
                                               call.nan_when_all_masked);
  return out.view({b * h, q3.size(1), v3.size(2)});
}

}  // namespace disc
