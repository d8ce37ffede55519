// disc::attention's CPU kernels, for callers inside disc: the compiled
// executor runs hand-written attention with them (lowering's
// attention-pattern pass, exec/attention_call.cpp).
#pragma once
#include <ATen/Tensor.h>

#include <optional>

namespace disc {

// How hand-written attention computes: the scale, dropout drawn from the
// stream `seed` keys (as the graph's native_dropout node draws it for the
// [B, H, Lq, Lk] probabilities), and what a row whose every score is
// masked gives: NaN where `nan_when_all_masked` (as _softmax does), else 0
// (as _safe_softmax does).
struct AttentionSettings {
  double scale = 1.0;
  double dropout_p = 0.0;
  uint64_t seed = 0;
  bool nan_when_all_masked = true;
};

// Attention of q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] with an
// additive float or bool mask broadcast to [B, H, Lq, Lk]: [B, H, Lq, Dv],
// dense.
at::Tensor attention_forward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::optional<at::Tensor>& mask, const AttentionSettings& s);

// The gradients of attention_forward_cpu's `out` (grad_out [B, H, Lq, Dv]):
// (grad_q, grad_k, grad_v), dense, the probabilities and the dropout mask
// recomputed from the scores and the stream (no log-sum-exp kept).
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_without_lse_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& mask, const at::Tensor& out, const AttentionSettings& s);

}  // namespace disc
