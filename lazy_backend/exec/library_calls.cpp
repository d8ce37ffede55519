// GEMMs on oneDNN for the compiled executor. A GEMM goes to oneDNN when it is
// float32, bfloat16 or float16 (autocast's GEMMs: bf16 native where the CPU
// multiplies bf16, f16 and other bf16 widened to float32, see
// onednn_matmul), and, for
// addmm, beta == alpha == 1 with a bias of [n] (or one value): nn.Linear's
// forward, and the mm's of every backward. Operands are
// passed as they lie, transposed views included; only views that are not
// dense row- or column-major are copied first.
#include "lazy_backend/exec/library_calls.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <map>
#include <string>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/exec/attention_call.h"
#include "lazy_backend/exec/conv_calls.h"
#include "lazy_backend/exec/prepack.h"
#include "lazy_backend/exec/replay.h"
#include "lazy_backend/trace/tensor_data.h"
#include "runtime/components.h"
#include "runtime/cpu/onednn_gemm.h"

namespace disc {

namespace {

using runtime::GemmOperand;

enum class Gemm : uint8_t { kMm, kAddmm, kBmm, kNone };

Gemm gemm_kind(uint32_t op) {
  switch (lowering::op_of(op)) {
    case lowering::Op::kMm: return Gemm::kMm;
    case lowering::Op::kAddmm: return Gemm::kAddmm;
    case lowering::Op::kBmm: return Gemm::kBmm;
    default: return Gemm::kNone;
  }
}

// The value of scalar operand `pos` (a constant or runtime data), if numeric.
std::optional<double> scalar_operand(const ir::Node& n, size_t pos) {
  if (pos >= n.operands.size()) return std::nullopt;
  const ir::Operand& o = n.operands[pos];
  const ir::Attr* a = o.kind == ir::Operand::Kind::kAttr      ? &n.attrs[o.first]
                      : o.kind == ir::Operand::Kind::kRuntime ? &n.runtime[o.first]
                                                              : nullptr;
  if (!a) return std::nullopt;
  if (a->kind == ir::Attr::Kind::kScalarDouble || a->kind == ir::Attr::Kind::kDouble) return a->d;
  if (a->kind == ir::Attr::Kind::kScalarInt || a->kind == ir::Attr::Kind::kInt) return a->i;
  return std::nullopt;
}

// `t` as oneDNN reads it (rows x cols, `batch` of them): as it lies, or a
// contiguous copy when it is no dense row- or column-major view.
GemmOperand operand(at::Tensor& t, bool batched) {
  const int64_t d = batched ? 1 : 0;
  auto view = [&] {
    return GemmOperand{t.data_ptr(), batched ? t.stride(0) : 0, t.stride(d), t.stride(d + 1)};
  };
  const int64_t batch = batched ? t.size(0) : 1;
  if (!runtime::gemm_operand_supported(view(), t.size(d), t.size(d + 1), batch)) {
    t = t.contiguous();
    metrics::bump("library.operand_copies");
  }
  return view();
}

// Why a GEMM must run on ATen, or nullptr when oneDNN takes it.
const char* aten_reason(Gemm kind, const ir::Node& n, const std::vector<at::Tensor>& ins) {
  if (n.outputs.size() != 1) return "dtype";
  const ir::DType type = n.outputs[0].dtype;
  if (type != ir::DType::kFloat32 && type != ir::DType::kBFloat16 && type != ir::DType::kFloat16)
    return "dtype";
  for (const at::Tensor& t : ins)
    if (t.scalar_type() != to_aten(type)) return "dtype";
  if (kind != Gemm::kAddmm) return nullptr;
  if (scalar_operand(n, 3) != 1.0 || scalar_operand(n, 4) != 1.0) return "scale";
  const at::Tensor& bias = ins[0];
  const int64_t cols = ins[2].size(1);
  const bool row = bias.dim() == 1 || (bias.dim() == 2 && bias.size(0) == 1);
  if (bias.numel() != 1 && !(row && bias.size(-1) == cols)) return "bias";
  return nullptr;
}

// A build without oneDNN: the same GEMM on ATen, counted as one.
at::Tensor aten_matmul(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias,
                       runtime::Activation act, bool batched) {
  static metrics::Named gemm_calls("library.gemm_calls"), aten("library.aten"),
      no_onednn("library.aten_reason.no_onednn");
  ++gemm_calls;
  ++aten;
  ++no_onednn;
  at::Tensor out = batched ? at::bmm(a, b) : at::mm(a, b);
  if (bias.defined()) out.add_(bias);
  if (act == runtime::Activation::kRelu) out.relu_();
  if (act == runtime::Activation::kGelu) out = at::gelu(out);
  return out;
}

}  // namespace

at::Tensor onednn_matmul(at::Tensor a, at::Tensor b, const at::Tensor& bias_in, runtime::Activation act,
                         bool batched,
                         const std::vector<WeightView>* weights,
                         const std::function<at::Tensor()>& make_b) {
  if (!runtime::has_onednn()) return aten_matmul(a, make_b ? make_b() : b, bias_in, act, batched);
  // oneDNN's parallel regions are sized by this thread's OpenMP setting:
  // make it torch's (a thread that never ran a torch kernel has the default).
  at::internal::lazy_init_num_threads();
  const at::ScalarType type = a.scalar_type();
  if (type == at::kHalf ||
      (type == at::kBFloat16 && runtime::onednn_bf16_widened(at::get_num_threads()))) {
    // Without native bf16, oneDNN emulates it (AVX2: its reference kernels,
    // ~25x slower than f32); with it, its bf16 GEMMs may still be slower
    // than f32 ones (runtime/cpu/onednn_bf16_choice.cpp). ATen's own f16 GEMM
    // took 28-480 ms by layout where the widened one takes 4.4 ([1024 x
    // 384] @ [384 x 1536], AMD EPYC with AVX-512, 2 threads). So the
    // operands are widened to f32,
    // multiplied and the result rounded once: a bf16 or f16 product is
    // exact in f32 and both GEMMs accumulate in f32, so this is the narrow
    // GEMM up to summation order.
    static metrics::Named bf16_widened("library.bf16_widened"), f16_widened("library.f16_widened");
    ++(type == at::kHalf ? f16_widened : bf16_widened);
    const at::Tensor b32 = (make_b ? make_b() : b).to(at::kFloat);
    const at::Tensor bias32 = bias_in.defined() ? bias_in.to(at::kFloat) : bias_in;
    return onednn_matmul(a.to(at::kFloat), b32, bias32, act, batched).to(type);
  }
  const int64_t d = batched ? 1 : 0;
  runtime::Gemm g;
  g.threads = at::get_num_threads();
  g.batched = batched;
  g.batch = batched ? a.size(0) : 1;
  g.m = a.size(d), g.k = a.size(d + 1), g.n = b.size(d + 1);
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  g.type = bf16 ? runtime::GemmType::kBFloat16 : runtime::GemmType::kFloat32;
  at::Tensor out = batched ? new_tensor({g.batch, g.m, g.n}, a.scalar_type())
                           : new_tensor({g.m, g.n}, a.scalar_type());
  g.a = operand(a, batched);
  at::Tensor bias = bias_in;
  if (bias.defined()) {
    if (g.n > 1 && bias.stride(0) != 1) {
      bias = bias.contiguous();
      metrics::bump("library.operand_copies");
    }
    g.bias = bias.data_ptr();
  }
  g.c = out.data_ptr();
  g.act = act;
  static metrics::Named onednn_calls("library.onednn"), gemm_calls("library.gemm_calls"),
      epilogues("library.epilogues");
  ++onednn_calls;
  ++gemm_calls;
  if (act != runtime::Activation::kNone) ++epilogues;
  if (weights && !batched && !bf16 && g.m > 0 && g.n > 0 && g.k > 0) {
    std::shared_ptr<const runtime::PackedB> packed = packed_weights(*weights, g, [&] {
      at::Tensor dense = make_b ? make_b() : b;
      operand(dense, false);  // a dense layout for the reorder to read
      return dense;
    });
    runtime::onednn_gemm_packed(g, *packed);
    metrics::bump("onednn.packed_gemms");
    return out;
  }
  g.b = operand(b, batched);
  static metrics::Named created("onednn.primitives_created"), reused("onednn.primitive_reuses"),
      sized_created("onednn.sized_primitives_created"), sized("onednn.sized_gemms");
  switch (runtime::onednn_gemm(g)) {
    case runtime::PrimitiveUse::kCreated: ++created; break;
    case runtime::PrimitiveUse::kReused: ++reused; break;
    case runtime::PrimitiveUse::kSizedCreated:
      ++sized_created;
      ++sized;
      break;
    case runtime::PrimitiveUse::kSized: ++sized; break;
    case runtime::PrimitiveUse::kNone: break;
  }
  return out;
}

namespace {

at::Tensor run_gemm(Gemm kind, const ir::Node& n, std::vector<at::Tensor>& ins, runtime::Activation act,
                    const std::optional<at::Tensor>& weight) {
  const bool batched = kind == Gemm::kBmm;
  at::Tensor a = ins[kind == Gemm::kAddmm ? 1 : 0];
  at::Tensor b = ins[kind == Gemm::kAddmm ? 2 : 1];
  at::Tensor bias;
  if (kind == Gemm::kAddmm) {
    // nn.Linear's [n] bias is read as it lies; only a broadcast one value
    // goes through ATen views (each a dispatcher call on the worker).
    bias = ins[0];
    if (bias.dim() != 1 || bias.size(0) != b.size(1)) bias = bias.reshape({-1}).expand({b.size(1)});
  }
  std::vector<WeightView> views;
  if (weight) views.push_back({*weight, b});
  at::Tensor out = onednn_matmul(a, b, bias, act, batched, weight ? &views : nullptr);
  TORCH_INTERNAL_ASSERT(out.sizes() == c10::IntArrayRef(n.outputs[0].sizes), "disc: ", ir::op_name(n.op),
                        " output size differs from its trace");
  return out;
}

// The short op name for library.aten.<op>: "aten::addmm" -> "addmm".
std::string short_name(uint32_t op) {
  const std::string& full = ir::op_name(op);
  const size_t ns = full.find("::");
  return ns == std::string::npos ? full : full.substr(ns + 2);
}

}  // namespace

runtime::Activation onednn_activation(lowering::Activation a) {
  switch (a) {
    case lowering::Activation::kNone: return runtime::Activation::kNone;
    case lowering::Activation::kRelu: return runtime::Activation::kRelu;
    case lowering::Activation::kGelu: return runtime::Activation::kGelu;
  }
  return runtime::Activation::kNone;
}

const char* gemm_aten_reason(const ir::Node& n, const std::vector<at::Tensor>& ins) {
  return aten_reason(gemm_kind(n.op), n, ins);
}

std::optional<at::Tensor> weight_base(const LibraryCall& call, const ir::Graph& g) {
  if (call.weight_param < 0 || !prepack_enabled()) return std::nullopt;
  // A training step's weights change every step: packing pays only when
  // several GEMMs read one.
  if (!unchanged_in_inference(g, call.weight_param) && !call.weight_reused) return std::nullopt;
  at::Tensor base = param_tensor(*g.nodes[call.weight_param].node);
  if (base.is_inference() || base.scalar_type() != at::kFloat) return std::nullopt;
  return base;
}

std::vector<at::Tensor> run_library_call(const LibraryCall& call, const ir::Node& n,
                                         std::vector<at::Tensor> ins,
                                         const c10::OperatorHandle& aten, const ir::Graph* g) {
  // The GEMM wrote the activation's result already; its own value has no
  // other reader.
  if (call.kind == LibraryCall::Kind::kEpilogue) return {ins[0]};
  static metrics::Named launched("kernels_launched"), library("launches.library");
  ++launched;
  ++library;
  if (call.kind == LibraryCall::Kind::kConv) return run_conv_call(call, n, std::move(ins), aten);
  if (call.kind == LibraryCall::Kind::kAttention) {
    TORCH_INTERNAL_ASSERT(g, "disc: an attention call needs the graph it runs in");
    return {run_attention_call(call.attention, std::move(ins), *g)};
  }
  const Gemm kind = gemm_kind(n.op);
  const runtime::Activation act = onednn_activation(call.act);
  const char* why = aten_reason(kind, n, ins);
  if (!why) return {run_gemm(kind, n, ins, act, g ? weight_base(call, *g) : std::nullopt)};
  metrics::bump("library.gemm_calls");
  metrics::bump("library.aten");
  metrics::bump("library.aten." + short_name(n.op));
  metrics::bump(std::string("library.aten_reason.") + why);
  std::vector<at::Tensor> outs = replay(aten, n, std::move(ins));
  if (act == runtime::Activation::kRelu) outs[0] = at::relu(outs[0]);
  if (act == runtime::Activation::kGelu) outs[0] = at::gelu(outs[0]);
  return outs;
}

}  // namespace disc
