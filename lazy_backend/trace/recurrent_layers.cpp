// Recurrent layers on disc as one recorded op per layer and direction,
// instead of ATen's composite path, which for a device other than CPU runs
// every time step through the fused cells of recurrent_cells.cpp (~57
// traced ops per LSTM step, ~18 per GRU / RNN step, forward and backward).
//
// * nn.LSTM: eager CPU runs it through oneDNN (mkldnn_rnn_layer and its
//   backward) when it can; the AutogradPrivateUse1 kernel for aten::lstm
//   lays the layers out as ATen's mkldnn_rnn does, so autograd records
//   mkldnn_rnn_layer's own backward and a step replays oneDNN's kernels.
// * nn.GRU, nn.RNN: ATen has no oneDNN layer for them; each layer is
//   disc::rnn_layer (rnn_layer_ops.cpp), with its backward through the
//   autograd function below.
//
// Layers they cannot take (LSTM projections, dtypes other than float32,
// oneDNN off, an empty input) keep the composite path; packed sequences
// are the .data overloads, which this does not touch.
#include <ATen/ATen.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/rnn_relu_native.h>
#include <ATen/ops/rnn_tanh_native.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "lazy_backend/trace/rnn_layer_ops.h"

namespace disc {

namespace {

using at::Tensor;
using at::TensorList;

constexpr int64_t kLstmMode = 2;  // ideep::rnn_kind::LSTM, as ATen's mkldnn_rnn passes it

size_t weights_per_layer(bool has_biases) { return has_biases ? 4 : 2; }

bool runs_as_whole_layers(const Tensor& input, TensorList hx, TensorList params,
                          bool has_biases, int64_t num_layers, bool bidirectional) {
  const size_t directions = bidirectional ? 2 : 1;
  return at::globalContext().userEnabledMkldnn() && input.scalar_type() == at::kFloat &&
         input.numel() != 0 && hx.size() == 2 &&
         hx[0].size(-1) == hx[1].size(-1) &&  // no projection (proj_size)
         params.size() == static_cast<size_t>(num_layers) * directions * weights_per_layer(has_biases);
}

bool needs_grad(const Tensor& input, TensorList hx, TensorList params) {
  if (!at::GradMode::is_enabled()) return false;
  if (input.requires_grad()) return true;
  for (TensorList list : {hx, params})
    for (const Tensor& t : list)
      if (t.requires_grad()) return true;
  return false;
}

// Runs num_layers x directions layers as ATen lays them out: a [T, B, I]
// input, the directions' outputs concatenated, dropout between layers.
// `run_layer(input, index, reverse)` runs one layer and direction (index
// into the weights, layer-major) and returns its output sequence.
template <typename RunLayer>
Tensor stack_layers(const Tensor& input, int64_t num_layers, double dropout, bool train,
                    bool bidirectional, bool batch_first, RunLayer run_layer) {
  const int64_t directions = bidirectional ? 2 : 1;
  Tensor layer_input = (batch_first ? input.transpose(0, 1) : input).contiguous();
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<Tensor> outputs;
    for (int64_t direction = 0; direction < directions; ++direction)
      outputs.push_back(run_layer(layer_input, layer * directions + direction, direction == 1));
    layer_input = directions == 1 ? outputs[0] : at::cat(outputs, -1);
    if (dropout != 0 && train && layer < num_layers - 1)
      layer_input = at::dropout(layer_input, dropout, /*train=*/true);
  }
  return batch_first ? layer_input.transpose(0, 1) : layer_input;
}

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, TensorList hx, TensorList params,
                                        bool has_biases, int64_t num_layers, double dropout,
                                        bool train, bool bidirectional, bool batch_first) {
  if (!runs_as_whole_layers(input, hx, params, has_biases, num_layers, bidirectional))
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional, batch_first);
  const size_t per_layer = weights_per_layer(has_biases);
  const int64_t hidden = hx[0].size(-1);
  // oneDNN keeps what its backward needs (the workspace) only when asked;
  // an eval-mode module can still be differentiated.
  const bool keep_workspace = train || needs_grad(input, hx, params);
  const Tensor h0 = hx[0].contiguous(), c0 = hx[1].contiguous();
  std::vector<Tensor> hy, cy;
  auto run_layer = [&](const Tensor& layer_input, int64_t index, bool reverse) {
    const Tensor* w = &params[index * per_layer];
    const Tensor no_bias = has_biases ? Tensor() : at::zeros({w[0].size(0)}, w[0].options());
    // batch_first goes along as ATen's mkldnn_rnn passes it.
    auto [output, h_n, c_n, workspace] = at::mkldnn_rnn_layer(
        layer_input, w[0], w[1], has_biases ? w[2] : no_bias, has_biases ? w[3] : no_bias,
        h0[index], c0[index], reverse, /*batch_sizes=*/{}, kLstmMode, hidden, num_layers,
        has_biases, bidirectional, batch_first, keep_workspace);
    hy.push_back(h_n);
    cy.push_back(c_n);
    return output;
  };
  Tensor output =
      stack_layers(input, num_layers, dropout, train, bidirectional, batch_first, run_layer);
  return {output, at::stack(hy, 0), at::stack(cy, 0)};
}

// One disc::rnn_layer, differentiable: its backward is
// disc::rnn_layer_backward over what the forward kept.
struct RnnLayer : torch::autograd::Function<RnnLayer> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const Tensor& input, const Tensor& hx,
                                                const Tensor& w_ih, const Tensor& w_hh,
                                                const Tensor& b_ih, const Tensor& b_hh,
                                                int64_t mode, bool reverse, bool has_biases) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("disc::rnn_layer", "")
                               .typed<std::tuple<Tensor, Tensor, Tensor>(
                                   const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   const std::optional<Tensor>&, const std::optional<Tensor>&,
                                   int64_t, bool)>();
    // Without biases, b_ih / b_hh are placeholders (autograd's apply takes
    // no undefined tensor); the op gets none.
    auto bias = [&](const Tensor& b) { return has_biases ? std::optional<Tensor>(b) : std::nullopt; };
    auto [output, hy, workspace] =
        op.call(input, hx, w_ih, w_hh, bias(b_ih), bias(b_hh), mode, reverse);
    ctx->save_for_backward({input, hx, w_ih, w_hh, output, workspace});
    ctx->saved_data["mode"] = mode;
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["has_biases"] = has_biases;
    return {output, hy};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("disc::rnn_layer_backward", "")
            .typed<std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>(
                const std::optional<Tensor>&, const std::optional<Tensor>&, const Tensor&,
                const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                bool)>();
    const auto saved = ctx->get_saved_variables();
    auto [grad_input, grad_hx, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh] =
        op.call(grads[0], grads[1], saved[0], saved[1], saved[2], saved[3], saved[4], saved[5],
                ctx->saved_data["mode"].toInt(), ctx->saved_data["reverse"].toBool());
    if (!ctx->saved_data["has_biases"].toBool()) grad_b_ih = grad_b_hh = Tensor();
    return {grad_input, grad_hx, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh, Tensor(), Tensor(),
            Tensor()};
  }
};

bool runs_as_rnn_layers(const Tensor& input, const Tensor& hx, TensorList params,
                        bool has_biases, int64_t num_layers, bool bidirectional) {
  const size_t directions = bidirectional ? 2 : 1;
  return input.scalar_type() == at::kFloat && hx.scalar_type() == at::kFloat &&
         input.numel() != 0 &&
         params.size() == static_cast<size_t>(num_layers) * directions * weights_per_layer(has_biases);
}

using RnnSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, TensorList, bool,
                                                int64_t, double, bool, bool, bool);

// aten::gru / rnn_tanh / rnn_relu: each layer one disc::rnn_layer of `mode`;
// what it cannot take runs ATen's `composite`.
template <int64_t mode, RnnSignature* composite>
std::tuple<Tensor, Tensor> rnn(const Tensor& input, const Tensor& hx, TensorList params,
                               bool has_biases, int64_t num_layers, double dropout, bool train,
                               bool bidirectional, bool batch_first) {
  if (!runs_as_rnn_layers(input, hx, params, has_biases, num_layers, bidirectional))
    return composite(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                     batch_first);
  const size_t per_layer = weights_per_layer(has_biases);
  std::vector<Tensor> hy;
  auto run_layer = [&](const Tensor& layer_input, int64_t index, bool reverse) {
    const Tensor* w = &params[index * per_layer];
    auto result = RnnLayer::apply(layer_input, hx[index], w[0], w[1], has_biases ? w[2] : w[0],
                                  has_biases ? w[3] : w[0], mode, reverse, has_biases);
    hy.push_back(result[1]);
    return result[0];
  };
  Tensor output =
      stack_layers(input, num_layers, dropout, train, bidirectional, batch_first, run_layer);
  return {output, at::stack(hy, 0)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", TORCH_FN(lstm));
  m.impl("gru.input", TORCH_FN((rnn<kGru, at::native::gru>)));
  m.impl("rnn_tanh.input", TORCH_FN((rnn<kTanh, at::native::rnn_tanh>)));
  m.impl("rnn_relu.input", TORCH_FN((rnn<kRelu, at::native::rnn_relu>)));
}

}  // namespace disc
