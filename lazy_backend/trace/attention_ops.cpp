// disc::attention and its backward: scaled dot-product attention, dropout
// included, as one op each way (runtime/cpu/attention.h), so a training step
// keeps no [B, H, Lq, Lk] probabilities or dropout mask for its backward, and
// writes none.
//
// torch reaches them through its contract for PrivateUse1 devices: where
// attention_choice.cpp answers `overrideable`, SDPA calls
// _scaled_dot_product_fused_attention_overrideable, and autograd its
// backward; disc's kernels for those two record these ops. Their graphs
// replay them with the CPU kernels below, on every executor.
//
//   attention(q [B, H, Lq, D], k [B, Hk, Lk, D], v [B, Hk, Lk, Dv], mask?,
//             dropout_p, is_causal, scale, seed []) -> (out [B, H, Lq, Dv],
//                                                        lse [B, H, Lq])
//   attention_backward(grad_out, q, k, v, mask?, out, lse, dropout_p,
//                      is_causal, scale, seed) -> (grad_q, grad_k, grad_v)
//
// Hk divides H: grouped-query attention (SDPA's enable_gqa), query head h
// reads key and value head h / (H / Hk), and the gradients of a key head
// sum over its group. The mask is floating (added) or bool (false:
// masked), broadcast to [B, H, Lq, Lk]. bf16 and f16 inputs are computed as
// SDPA's math path computes them on the CPU: widened to float32 on entry,
// the outputs rounded once on exit (lse stays float32, as ATen's flash
// kernel keeps it). `seed` is an int64 CPU scalar: the key of the dropout
// stream (runtime/cpu/philox.h), data to the graph, so a new seed never
// recompiles; it is also the forward's philox_seed, which autograd hands
// the backward.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>

#include "lazy_backend/trace/attention_ops.h"

#include "lazy_backend/device/rng.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/philox.h"

namespace disc {

namespace {

using at::Tensor;
using std::optional;

constexpr const char* kOp = "disc::attention";

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask) {
  const auto dtype = q.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf, kOp,
              ": float32, bfloat16 or float16 only, got ", dtype);
  for (const Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->dim() == 4, kOp, ": q, k and v must be [B, H, L, D], got ", t->sizes());
    TORCH_CHECK(t->scalar_type() == dtype, kOp, ": q, k and v must share a dtype, got ",
                q.scalar_type(), ", ", k.scalar_type(), " and ", v.scalar_type());
  }
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(1) > 0 &&
                  q.size(1) % k.size(1) == 0 && v.size(1) == k.size(1) && k.size(3) == q.size(3) &&
                  v.size(2) == k.size(2),
              kOp, ": q ", q.sizes(), ", k ", k.sizes(), " and v ", v.sizes(), " do not match");
  if (mask && mask->defined())
    TORCH_CHECK(mask->scalar_type() == at::kFloat || mask->scalar_type() == at::kBool ||
                    mask->scalar_type() == dtype,
                kOp, ": the mask must be bool, float32 or q's dtype, got ", mask->scalar_type());
}

// The kernels compute in float32 and read rows whose elements are
// contiguous; the heads may be strided (q, k and v as a projection's
// [B, L, H, D] output viewed as [B, H, L, D]). A cast keeps a dense
// tensor's strides.
Tensor widened(const Tensor& t) {
  const Tensor f = t.to(at::kFloat);
  return f.size(3) <= 1 || f.stride(3) == 1 ? f : f.contiguous();
}

// Head `bh` (batch bh / heads, head bh % heads) of a [B, H, L, D] tensor.
int64_t head_offset(const Tensor& t, int64_t bh, int64_t heads) {
  return (bh / heads) * t.stride(0) + (bh % heads) * t.stride(1);
}

runtime::InRows head_in(const Tensor& t, int64_t bh, int64_t heads) {
  return {t.const_data_ptr<float>() + head_offset(t, bh, heads), t.stride(2)};
}

runtime::OutRows head_out(Tensor& t, int64_t bh, int64_t heads) {
  return {t.data_ptr<float>() + head_offset(t, bh, heads), t.stride(2)};
}

// [B, H, L, D] laid out as [B, L, H, D], as ATen's flash kernels lay out
// their outputs: viewed back as [B, L, H * D] (the heads' concatenation,
// the output projection's input) they need no copy.
Tensor empty_heads_last(int64_t b, int64_t heads, int64_t l, int64_t d, const at::TensorOptions& o) {
  return at::empty({b, l, heads, d}, o).transpose(1, 2);
}

// One head's part of the call: its sizes, mask view and dropout stream.
struct Heads {
  runtime::AttentionHead head;
  int64_t count = 0, heads = 0, group = 1;  // group: query heads per key head
  Tensor mask;  // expanded to [B, H, Lq, Lk]: zero strides where broadcast

  // The key and value head query head bh reads.
  int64_t kv(int64_t bh) const { return bh / group; }

  runtime::AttentionHead at(int64_t bh) const {
    runtime::AttentionHead h = head;
    h.stream_offset = bh * h.lq * h.lk;
    if (mask.defined()) {
      const int64_t offset = (bh / heads) * mask.stride(0) + (bh % heads) * mask.stride(1);
      h.mask.data = static_cast<const char*>(mask.const_data_ptr()) + offset * mask.element_size();
    }
    return h;
  }
};

Heads heads_of(const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask,
               double dropout_p, bool is_causal, double scale, uint64_t seed) {
  Heads hs;
  runtime::AttentionHead& h = hs.head;
  h.lq = q.size(2), h.lk = k.size(2), h.d = q.size(3), h.dv = v.size(3);
  h.scale = static_cast<float>(scale);
  h.causal = is_causal;
  h.dropout_p = static_cast<float>(dropout_p);
  h.seed = seed;
  hs.count = q.size(0) * q.size(1), hs.heads = q.size(1), hs.group = q.size(1) / k.size(1);
  if (mask && mask->defined()) {
    const Tensor m = mask->scalar_type() == at::kBool ? *mask : mask->to(at::kFloat);
    hs.mask = m.expand({q.size(0), q.size(1), h.lq, h.lk});
    h.mask.is_bool = hs.mask.scalar_type() == at::kBool;
    h.mask.row_stride = hs.mask.stride(2), h.mask.col_stride = hs.mask.stride(3);
  }
  return hs;
}

// The stream a seed tensor keys (undefined: no dropout draws).
uint64_t stream_of(const Tensor& seed) {
  return seed.defined() ? static_cast<uint64_t>(seed.item<int64_t>()) : 0;
}

// out is [B, H, Lq, Dv] laid out as [B, Lq, H, Dv] (heads_last), as the
// meta kernel says, or dense.
std::tuple<Tensor, Tensor> forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                   const optional<Tensor>& mask, double dropout_p, bool is_causal,
                                   double scale, uint64_t seed, bool nan_when_all_masked,
                                   bool heads_last) {
  check_inputs(q_in, k_in, v_in, mask);
  const Tensor q = widened(q_in), k = widened(k_in), v = widened(v_in);
  Heads hs = heads_of(q, k, v, mask, dropout_p, is_causal, scale, seed);
  hs.head.nan_when_all_masked = nan_when_all_masked;
  const runtime::AttentionHead& h = hs.head;
  const int64_t b = q.size(0), heads = q.size(1), kv_heads = k.size(1);
  Tensor out = heads_last ? empty_heads_last(b, heads, h.lq, h.dv, q.options())
                          : at::empty({b, heads, h.lq, h.dv}, q.options());
  Tensor lse = at::empty({b, heads, h.lq}, q.options());
  float* lp = lse.data_ptr<float>();
  at::parallel_for(0, hs.count, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t bh = b0; bh < b1; ++bh) {
      const int64_t kvh = hs.kv(bh);
      runtime::attention_forward(hs.at(bh), head_in(q, bh, heads), head_in(k, kvh, kv_heads),
                                 head_in(v, kvh, kv_heads), head_out(out, bh, heads), lp + bh * h.lq);
    }
  });
  return {out.to(q_in.scalar_type()), lse};
}

std::tuple<Tensor, Tensor> attention_cpu(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const optional<Tensor>& mask, double dropout_p,
                                         bool is_causal, double scale, const Tensor& seed) {
  return forward(q, k, v, mask, dropout_p, is_causal, scale, stream_of(seed), false, true);
}

// The gradients laid out as [B, L, H, D] (heads_last, as the meta kernel
// says), or dense; lse undefined: the probabilities recomputed from the
// scores.
std::tuple<Tensor, Tensor, Tensor> backward(const Tensor& grad_out, const Tensor& q_in,
                                            const Tensor& k_in, const Tensor& v_in,
                                            const optional<Tensor>& mask, const Tensor& out_in,
                                            const Tensor& lse_in, double dropout_p, bool is_causal,
                                            double scale, uint64_t seed, bool nan_when_all_masked,
                                            bool heads_last) {
  check_inputs(q_in, k_in, v_in, mask);
  const Tensor q = widened(q_in), k = widened(k_in), v = widened(v_in);
  const Tensor go = widened(grad_out), out = widened(out_in);
  const Tensor lse = lse_in.defined() ? lse_in.contiguous() : Tensor();
  Heads hs = heads_of(q, k, v, mask, dropout_p, is_causal, scale, seed);
  hs.head.nan_when_all_masked = nan_when_all_masked;
  const runtime::AttentionHead& h = hs.head;
  // Grouped heads: each query head's share of its key head's gradients,
  // summed over the group after.
  const int64_t b = q.size(0), heads = q.size(1), kv_heads = k.size(1);
  const bool grouped = hs.group > 1;
  auto empty = [&](int64_t l, int64_t d, const Tensor& like) {
    return heads_last && !grouped ? empty_heads_last(b, heads, l, d, like.options())
                                  : at::empty({b, heads, l, d}, like.options());
  };
  Tensor dq = heads_last ? empty_heads_last(b, heads, h.lq, h.d, q.options()) : empty(h.lq, h.d, q);
  Tensor dk = empty(h.lk, h.d, k), dv = empty(h.lk, h.dv, v);
  const float* lp = lse.defined() ? lse.const_data_ptr<float>() : nullptr;
  at::parallel_for(0, hs.count, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t bh = b0; bh < b1; ++bh) {
      const int64_t kvh = hs.kv(bh);
      runtime::attention_backward(hs.at(bh), head_in(q, bh, heads), head_in(k, kvh, kv_heads),
                                  head_in(v, kvh, kv_heads), head_in(out, bh, heads),
                                  lp ? lp + bh * h.lq : nullptr,
                                  head_in(go, bh, heads), head_out(dq, bh, heads),
                                  head_out(dk, bh, heads), head_out(dv, bh, heads));
    }
  });
  if (grouped) {
    dk = dk.view({b, kv_heads, hs.group, h.lk, h.d}).sum(2);
    dv = dv.view({b, kv_heads, hs.group, h.lk, h.dv}).sum(2);
  }
  const auto dtype = q_in.scalar_type();
  return {dq.to(dtype), dk.to(dtype), dv.to(dtype)};
}

std::tuple<Tensor, Tensor, Tensor> attention_backward_cpu(
    const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
    const optional<Tensor>& mask, const Tensor& out, const Tensor& lse, double dropout_p,
    bool is_causal, double scale, const Tensor& seed) {
  return backward(grad_out, q, k, v, mask, out, lse, dropout_p, is_causal, scale, stream_of(seed),
                  false, true);
}

std::tuple<Tensor, Tensor> attention_meta(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const optional<Tensor>& mask, double, bool, double,
                                          const Tensor&) {
  check_inputs(q, k, v, mask);
  return {empty_heads_last(q.size(0), q.size(1), q.size(2), v.size(3), q.options()),
          at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat))};
}

std::tuple<Tensor, Tensor, Tensor> attention_backward_meta(
    const Tensor&, const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask,
    const Tensor&, const Tensor&, double, bool, double, const Tensor&) {
  check_inputs(q, k, v, mask);
  // As the CPU kernel lays them out; grouped heads' sums are dense.
  auto like = [&](const Tensor& t) {
    return k.size(1) == q.size(1) ? empty_heads_last(t.size(0), t.size(1), t.size(2), t.size(3), t.options())
                                  : at::empty(t.sizes(), t.options());
  };
  return {empty_heads_last(q.size(0), q.size(1), q.size(2), q.size(3), q.options()), like(k), like(v)};
}

double scale_of(const Tensor& q, optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

// The disc kernels of torch's fused-attention contract for PrivateUse1.
std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor>
fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& mask,
                double dropout_p, bool is_causal, bool return_debug_mask, optional<double> scale) {
  TORCH_CHECK(!return_debug_mask, kOp, ": no debug mask (the probabilities are never stored)");
  // Only dropout draws from the generator, as eager's kernels do.
  uint64_t stream = 0;
  if (dropout_p > 0) {
    const auto [seed, offset] = next_random_draw();
    stream = runtime::stream_seed(seed, offset);
  }
  const Tensor key = at::scalar_tensor(static_cast<int64_t>(stream), at::kLong);
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("disc::attention", "")
                             .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                               const optional<Tensor>&, double, bool,
                                                               double, const Tensor&)>();
  auto [out, lse] = op.call(q, k, v, mask, dropout_p, is_causal, scale_of(q, scale), key);
  return {out, lse, Tensor(), Tensor(), q.sym_size(2), k.sym_size(2), key, at::zeros_like(key), Tensor()};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> fused_attention_backward(
    const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
    std::array<bool, 4> grad_input_mask, const Tensor& out, const Tensor& lse, const Tensor&,
    const Tensor&, c10::SymInt, c10::SymInt, double dropout_p, bool is_causal,
    const Tensor& philox_seed, const Tensor&, optional<double> scale) {
  TORCH_CHECK(!grad_input_mask[3], kOp, ": no gradient for the attention mask");
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("disc::attention_backward", "")
          .typed<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                    const Tensor&, const optional<Tensor>&,
                                                    const Tensor&, const Tensor&, double, bool,
                                                    double, const Tensor&)>();
  auto [dq, dk, dv] = op.call(grad_out, q, k, v, mask.defined() ? optional<Tensor>(mask) : std::nullopt,
                              out, lse, dropout_p, is_causal, scale_of(q, scale), philox_seed);
  return {dq, dk, dv, Tensor()};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(disc, m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor? mask, float dropout_p, bool is_causal, "
        "float scale, Tensor seed) -> (Tensor, Tensor)");
  m.def("attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor? mask, "
        "Tensor out, Tensor lse, float dropout_p, bool is_causal, float scale, Tensor seed) -> "
        "(Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(disc, CPU, m) {
  m.impl("attention", TORCH_FN(attention_cpu));
  m.impl("attention_backward", TORCH_FN(attention_backward_cpu));
}

TORCH_LIBRARY_IMPL(disc, Meta, m) {
  m.impl("attention", TORCH_FN(attention_meta));
  m.impl("attention_backward", TORCH_FN(attention_backward_meta));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(fused_attention_backward));
}

Tensor attention_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v,
                             const optional<Tensor>& mask, const AttentionSettings& s) {
  return std::get<0>(
      forward(q, k, v, mask, s.dropout_p, false, s.scale, s.seed, s.nan_when_all_masked, false));
}

std::tuple<Tensor, Tensor, Tensor> attention_backward_without_lse_cpu(
    const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
    const optional<Tensor>& mask, const Tensor& out, const AttentionSettings& s) {
  return backward(grad_out, q, k, v, mask, out, Tensor(), s.dropout_p, false, s.scale, s.seed,
                  s.nan_when_all_masked, false);
}

}  // namespace disc
