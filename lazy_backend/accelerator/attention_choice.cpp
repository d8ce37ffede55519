// Which kernel scaled_dot_product_attention takes on disc: the CPU's choice.
//
// torch asks a PrivateUse1 device for its SDPA backend through
// _fused_sdp_choice_stub and takes the math composite where none is
// registered: bmm, softmax, bmm, with the [B, H, L, L] scores written and
// read back, where eager on the CPU runs its flash kernel, which never
// writes them (no dropout: the CPU's flash kernel has none). disc computes
// on the CPU, so it answers with the CPU's own policy, honouring
// torch.nn.attention.sdpa_kernel; the flash choice records
// _scaled_dot_product_flash_attention_for_cpu and its backward, which the
// graph runs on ATen (counted as launches.aten).
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

namespace at::native {
namespace {

int64_t cpu_sdp_choice(const Tensor& query, const Tensor& key, const Tensor& value,
                       const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                       std::optional<double> scale, bool enable_gqa) {
  return _fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale,
                               enable_gqa);
}

}  // namespace

REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &cpu_sdp_choice)

}  // namespace at::native
