// Convolutions on oneDNN for the compiled executor (see conv_calls.h). The node's operands follow the ATen schemas:
//   convolution(input, weight, bias?, stride, padding, dilation, transposed,
//               output_padding, groups)
//   convolution_backward(grad_output, input, weight, bias_sizes?, stride,
//               padding, dilation, transposed, output_padding, groups,
//               output_mask[3]) -> (grad_input, grad_weight, grad_bias)
#include "lazy_backend/exec/conv_calls.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <string>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/exec/replay.h"
#include "runtime/components.h"
#include "runtime/cpu/onednn_conv.h"
#include "runtime/cpu/onednn_gemm.h"

namespace disc {

namespace {

using runtime::ActLayout;
using runtime::ConvPlacement;

bool is_forward(const ir::Node& n) { return lowering::op_of(n.op) == lowering::Op::kConvolution; }

// The weight: input 1 of convolution, 2 of convolution_backward.
const at::Tensor& weight_of(const ir::Node& n, const std::vector<at::Tensor>& ins) {
  return ins[is_forward(n) ? 1 : 2];
}

const ir::Attr& attr_operand(const ir::Node& n, size_t pos) {
  const ir::Attr* a = n.attr_operand(pos);
  TORCH_INTERNAL_ASSERT(a, "disc: ", ir::op_name(n.op), " operand ", pos, " is not a constant");
  return *a;
}

// Where the convolution's geometry starts: stride is operand 3 of
// convolution and operand 4 of convolution_backward.
size_t geometry_base(const ir::Node& n) { return is_forward(n) ? 3 : 4; }

runtime::ConvShape shape_of(const ir::Node& n, const at::Tensor& input, const at::Tensor& weight,
                            const std::vector<int64_t>& out_sizes) {
  const size_t g = geometry_base(n);
  runtime::ConvShape s;
  s.batch = input.size(0), s.in_channels = input.size(1), s.in_h = input.size(2),
  s.in_w = input.size(3);
  s.out_channels = weight.size(0), s.kernel_h = weight.size(2), s.kernel_w = weight.size(3);
  s.out_h = out_sizes[2], s.out_w = out_sizes[3];
  s.groups = attr_operand(n, g + 5).i;
  for (int d = 0; d < 2; ++d) {
    s.stride[d] = attr_operand(n, g).ints[d];
    s.padding[d] = attr_operand(n, g + 1).ints[d];
    s.dilation[d] = attr_operand(n, g + 2).ints[d];
  }
  return s;
}

void count_reorders(int64_t n, const char* kind) {
  if (n == 0) return;
  metrics::bump("onednn.reorders", n);
  metrics::bump(std::string("onednn.reorders.") + kind, n);
}

void count(const runtime::ConvRun& r, const char* primitive) {
  if (!r.ran) return;
  metrics::bump(r.created ? "onednn.primitives_created" : "onednn.primitive_reuses");
  metrics::bump(std::string("onednn.conv.") + primitive);
  count_reorders(r.weight_reorders, "weights");
  // The blocked layout is oneDNN's choice (nChw16c with AVX-512, nChw8c with
  // AVX2...): counted apart from the conversions disc's layout plan decides.
  count_reorders(r.act_reorders, "blocked");
}

// An activation in `layout`, dense: as it lies, or re-laid-out (counted).
at::Tensor activation(const at::Tensor& t, ActLayout layout) {
  const auto format = layout == ActLayout::kNhwc ? at::MemoryFormat::ChannelsLast
                                                 : at::MemoryFormat::Contiguous;
  if (t.is_contiguous(format)) return t;
  count_reorders(1, "activations");
  return t.contiguous(format);
}

// Weights and bias as oneDNN reads them: dense, torch's own order.
at::Tensor dense(const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  metrics::bump("library.operand_copies");
  return t.contiguous();
}

at::Tensor empty_activation(const std::vector<int64_t>& sizes, ActLayout layout,
                            at::ScalarType dtype) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).memory_format(
                              layout == ActLayout::kNhwc ? at::MemoryFormat::ChannelsLast
                                                         : at::MemoryFormat::Contiguous));
}

// The result as the plan wants it: NHWC kept, or made NCHW (counted).
at::Tensor finish(at::Tensor t, bool nhwc_out) {
  if (nhwc_out || t.is_contiguous()) return t;
  count_reorders(1, "activations");
  return t.contiguous();
}

runtime::ConvLayout layout(bool nhwc, const at::Tensor& weight) {
  const runtime::ConvType type = weight.scalar_type() == at::kBFloat16
                                     ? runtime::ConvType::kBFloat16
                                     : runtime::ConvType::kFloat32;
  const int threads = at::get_num_threads();
  return nhwc ? runtime::ConvLayout{ActLayout::kNhwc, ConvPlacement::kUser, type, threads}
              : runtime::ConvLayout{ActLayout::kNchw, ConvPlacement::kBest, type, threads};
}

at::Tensor forward(const ir::Node& n, std::vector<at::Tensor>& ins, bool relu, bool nhwc,
                   bool nhwc_out) {
  const runtime::ConvLayout l = layout(nhwc, weight_of(n, ins));
  const at::Tensor input = activation(ins[0], l.act), weight = dense(weight_of(n, ins));
  const bool has_bias = n.operands[2].kind == ir::Operand::Kind::kTensor;
  const at::Tensor bias = has_bias ? dense(ins[n.operands[2].first]) : at::Tensor();
  at::Tensor out = empty_activation(n.outputs[0].sizes, l.act, weight.scalar_type());
  runtime::ConvForward c;
  c.shape = shape_of(n, input, weight, n.outputs[0].sizes);
  c.layout = l;
  c.src = input.data_ptr(), c.weights = weight.data_ptr();
  c.bias = has_bias ? bias.data_ptr() : nullptr;
  c.dst = out.data_ptr();
  c.relu = relu;
  count(runtime::onednn_conv_forward(c), "forward");
  if (relu) metrics::bump("library.epilogues");
  return finish(out, nhwc_out);
}

std::vector<at::Tensor> backward(const ir::Node& n, std::vector<at::Tensor>& ins, bool nhwc,
                                 bool nhwc_out) {
  const runtime::ConvLayout l = layout(nhwc, weight_of(n, ins));
  const std::vector<int64_t>& mask = attr_operand(n, 10).ints;
  const at::Tensor grad = activation(ins[0], l.act), weight = dense(weight_of(n, ins));
  const at::Tensor input = mask[1] || mask[2] ? activation(ins[1], l.act) : ins[1];
  const runtime::ConvShape s = shape_of(n, ins[1], weight, ins[0].sizes().vec());
  std::vector<at::Tensor> outs(3);
  if (mask[0]) {
    outs[0] = empty_activation(ins[1].sizes().vec(), l.act, weight.scalar_type());
    runtime::ConvBackwardData c{s, l, grad.data_ptr(), weight.data_ptr(), outs[0].data_ptr()};
    count(runtime::onednn_conv_backward_data(c), "backward_data");
    outs[0] = finish(outs[0], nhwc_out);
  }
  if (mask[1] || mask[2]) {
    // The bias gradient is the weights primitive's by-product; without a
    // weight gradient its weights go to a scratch buffer.
    at::Tensor dw = at::empty(weight.sizes(), weight.scalar_type());
    at::Tensor db = mask[2] ? at::empty({s.out_channels}, weight.scalar_type()) : at::Tensor();
    runtime::ConvBackwardWeights c{s, l, input.data_ptr(), grad.data_ptr(), dw.data_ptr(),
                                   mask[2] ? db.data_ptr() : nullptr};
    count(runtime::onednn_conv_backward_weights(c), "backward_weights");
    if (mask[1]) outs[1] = dw;
    if (mask[2]) outs[2] = db;
  }
  return outs;
}

}  // namespace

std::vector<at::Tensor> run_conv_call(const lowering::LibraryCall& call, const ir::Node& n,
                                      std::vector<at::Tensor> ins, const c10::OperatorHandle& aten) {
  const bool relu = call.act == lowering::Activation::kRelu, nhwc_out = call.nhwc_out;
  const char* why = runtime::has_onednn() ? call.declined : "no_onednn";
  if (!why) {
    metrics::bump("library.onednn");
    // oneDNN's parallel regions follow this thread's OpenMP setting: make it
    // torch's (see library_calls.cpp).
    at::internal::lazy_init_num_threads();
    // f16, and bf16 where GEMMs are widened: in f32, rounded once (eager's
    // f16 conv2d of [32, 32, 28, 28] by [64, 32, 3, 3] takes 86 ms against
    // f32's 8 on an AMD EPYC with AVX-512).
    const at::ScalarType type = weight_of(n, ins).scalar_type();
    const bool widen =
        type == at::kHalf ||
        (type == at::kBFloat16 && runtime::onednn_bf16_widened(at::get_num_threads()));
    if (widen) {
      metrics::bump(type == at::kHalf ? "library.f16_widened" : "library.bf16_widened");
      for (at::Tensor& t : ins)
        if (t.defined() && t.scalar_type() == type) t = t.to(at::kFloat);
    }
    std::vector<at::Tensor> outs = is_forward(n)
                                       ? std::vector<at::Tensor>{forward(n, ins, relu, call.nhwc, nhwc_out)}
                                       : backward(n, ins, call.nhwc, nhwc_out);
    if (widen)
      for (at::Tensor& t : outs)
        if (t.defined()) t = t.to(type);
    return outs;
  }
  metrics::bump("library.aten");
  metrics::bump(is_forward(n) ? "library.aten.convolution" : "library.aten.convolution_backward");
  metrics::bump(std::string("library.aten_reason.") + why);
  std::vector<at::Tensor> outs = replay(aten, n, std::move(ins));
  if (relu) outs[0] = at::relu(outs[0]);
  if (outs[0].defined() && outs[0].dim() == 4) outs[0] = finish(outs[0], nhwc_out);
  return outs;
}

void make_nchw(std::vector<at::Tensor>& outs, const std::vector<bool>& which) {
  for (size_t k = 0; k < outs.size() && k < which.size(); ++k) {
    at::Tensor& t = outs[k];
    if (!which[k] || !t.defined() || t.dim() != 4 || t.is_contiguous()) continue;
    count_reorders(1, "activations");
    t = t.contiguous();
  }
}

void match_nhwc(std::vector<at::Tensor>& ins) {
  auto nhwc = [](const at::Tensor& t) {
    return t.defined() && t.dim() == 4 && !t.is_contiguous() &&
           t.is_contiguous(at::MemoryFormat::ChannelsLast);
  };
  if (std::none_of(ins.begin(), ins.end(), nhwc)) return;
  for (at::Tensor& t : ins)
    if (t.defined() && t.dim() == 4 && !t.is_contiguous(at::MemoryFormat::ChannelsLast)) {
      count_reorders(1, "activations");
      t = t.contiguous(at::MemoryFormat::ChannelsLast);
    }
}

}  // namespace disc
