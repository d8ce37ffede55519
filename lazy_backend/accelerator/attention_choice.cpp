// Which kernel scaled_dot_product_attention takes on disc.
//
// torch asks a PrivateUse1 device for its SDPA backend through
// _fused_sdp_choice_stub and takes the math composite where none is
// registered: bmm, softmax, dropout, bmm, with the [B, H, Lq, Lk] scores
// written and, in training, the probabilities and dropout mask kept for the
// backward. disc answers:
//  * float32 on the CPU target: `overrideable`, disc's fused attention
//    (trace/attention_ops.cpp), which keeps none of them, dropout or not,
//    grouped heads (enable_gqa) included;
//  * bf16 and f16 with dropout likewise: there the CPU's choice is the
//    composite, which computes in float32 as the fused kernel does. Without
//    dropout they keep the CPU's flash kernel, whose rounding eager shares;
//  * otherwise (a mask that needs a gradient, or
//    DISC_ATTENTION=cpu) the CPU's own policy: its flash kernel where
//    eager's would take it (it has no dropout), recorded as
//    _scaled_dot_product_flash_attention_for_cpu and its backward and run on
//    ATen (counted as launches.aten), else the math composite.
// Both honour torch.nn.attention.sdpa_kernel (`overrideable` is its
// SDPBackend.OVERRIDEABLE).
#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

#include "lazy_backend/device/target.h"
#include "runtime/components.h"
#include "runtime/options.h"

namespace at::native {
namespace {

// Whether disc's fused attention computes this call.
bool fused_attention_takes(const Tensor& q, const Tensor& k, const Tensor& v,
                           const std::optional<Tensor>& mask, double dropout_p, bool enable_gqa) {
  if (!at::globalContext().userEnabledOverrideableSDP()) return false;
  if (disc::options::text(disc::options::Id::kAttention) != "fused") return false;
  if (!disc::value_device().is_cpu() || !disc::runtime::has_onednn()) return false;
  const ScalarType dtype = q.scalar_type();
  if (dtype != kFloat && !((dtype == kBFloat16 || dtype == kHalf) && dropout_p > 0)) return false;
  for (const Tensor* t : {&q, &k, &v})
    if (t->dim() != 4 || t->scalar_type() != dtype || t->numel() == 0) return false;
  // Grouped heads without enable_gqa and mismatched sizes: the CPU's error.
  const bool grouped = enable_gqa && k.size(1) > 0 && q.size(1) % k.size(1) == 0;
  if ((k.size(1) != q.size(1) && !grouped) || v.size(1) != k.size(1) || k.size(3) != q.size(3) ||
      v.size(2) != k.size(2) || k.size(0) != q.size(0) || v.size(0) != q.size(0))
    return false;
  if (!mask || !mask->defined()) return true;
  return (mask->scalar_type() == kFloat || mask->scalar_type() == kBool ||
          mask->scalar_type() == dtype) &&
         !mask->requires_grad() &&
         is_expandable_to(mask->sizes(), {q.size(0), q.size(1), q.size(2), k.size(2)});
}

int64_t disc_sdp_choice(const Tensor& query, const Tensor& key, const Tensor& value,
                        const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                        std::optional<double> scale, bool enable_gqa) {
  if (fused_attention_takes(query, key, value, attn_mask, dropout_p, enable_gqa))
    return static_cast<int64_t>(SDPBackend::overrideable);
  return _fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale,
                               enable_gqa);
}

}  // namespace

REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &disc_sdp_choice)

}  // namespace at::native
