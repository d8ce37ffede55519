// The forward of disc::attention's CPU kernel, for callers inside disc: the
// compiled executor runs hand-written attention with it (lowering's
// attention-pattern pass, exec/attention_call.cpp).
#pragma once
#include <ATen/Tensor.h>

#include <optional>

namespace disc {

// Attention of q [B, H, Lq, D], k [B, Hk, Lk, D], v [B, Hk, Lk, Dv] with an
// additive float or bool mask broadcast to [B, H, Lq, Lk], no dropout:
// [B, H, Lq, Dv]. A row whose every score is masked gives NaN where
// `nan_when_all_masked` (as _softmax does), else 0 (as _safe_softmax does).
at::Tensor attention_forward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::optional<at::Tensor>& mask, double scale,
                                 bool nan_when_all_masked);

}  // namespace disc
