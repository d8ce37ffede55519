// The fused LSTM and GRU cells on disc. For a device other than CPU,
// ATen's nn.LSTM / nn.GRU / LSTMCell / GRUCell run every time step through
// _thnn_fused_lstm_cell / _thnn_fused_gru_cell (and their backwards), which
// only CUDA implements. Here each is the cell's element-wise arithmetic in
// ATen ops, recorded like any other: the fusion planner turns a step's
// gate math into a kernel or two, and autograd keeps ATen's own formulas,
// which call the backwards below. The workspace (what the backward needs)
// is ours to lay out, since only these kernels read it:
//   LSTM: the activated gates [i, f, g, o]     -> [B, 4H]
//   GRU:  [r, z, n, hidden n-gate, hx]         -> [B, 5H]
#include <ATen/ATen.h>
#include <torch/library.h>

namespace disc {

namespace {

using at::Tensor;
using std::optional;

// input_gates + hidden_gates (+ their biases): the pre-activation gates.
Tensor gate_sum(const Tensor& input_gates, const Tensor& hidden_gates,
                const optional<Tensor>& input_bias, const optional<Tensor>& hidden_bias) {
  Tensor gates = input_gates + hidden_gates;
  if (input_bias && input_bias->defined()) gates = gates + *input_bias;
  if (hidden_bias && hidden_bias->defined()) gates = gates + *hidden_bias;
  return gates;
}

// s * (1 - s): the derivative of sigmoid at its output s.
Tensor sigmoid_slope(const Tensor& s) { return s * (1 - s); }

std::tuple<Tensor, Tensor, Tensor> lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                             const Tensor& cx, const optional<Tensor>& input_bias,
                                             const optional<Tensor>& hidden_bias) {
  std::vector<Tensor> g = gate_sum(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1);
  Tensor i = g[0].sigmoid(), f = g[1].sigmoid(), c = g[2].tanh(), o = g[3].sigmoid();
  Tensor cy = f * cx + i * c;
  Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, c, o}, 1)};
}

std::tuple<Tensor, Tensor, Tensor> lstm_cell_backward(const optional<Tensor>& grad_hy,
                                                      const optional<Tensor>& grad_cy,
                                                      const Tensor& cx, const Tensor& cy,
                                                      const Tensor& workspace, bool has_bias) {
  std::vector<Tensor> w = workspace.chunk(4, 1);
  const Tensor &i = w[0], &f = w[1], &c = w[2], &o = w[3];
  const Tensor tanh_cy = cy.tanh();
  const bool has_ghy = grad_hy && grad_hy->defined();
  Tensor gcy = grad_cy && grad_cy->defined() ? *grad_cy : at::zeros_like(cy);
  Tensor go = at::zeros_like(o);
  if (has_ghy) {
    gcy = gcy + *grad_hy * o * (1 - tanh_cy * tanh_cy);
    go = *grad_hy * tanh_cy * sigmoid_slope(o);
  }
  Tensor gi = gcy * c * sigmoid_slope(i);
  Tensor gf = gcy * cx * sigmoid_slope(f);
  Tensor gc = gcy * i * (1 - c * c);
  Tensor grad_gates = at::cat({gi, gf, gc, go}, 1);
  Tensor grad_bias = has_bias ? grad_gates.sum(0) : Tensor();
  return {grad_gates, gcy * f, grad_bias};
}

std::tuple<Tensor, Tensor> gru_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                    const Tensor& hx, const optional<Tensor>& input_bias,
                                    const optional<Tensor>& hidden_bias) {
  Tensor ig = input_bias && input_bias->defined() ? input_gates + *input_bias : input_gates;
  Tensor hg = hidden_bias && hidden_bias->defined() ? hidden_gates + *hidden_bias : hidden_gates;
  std::vector<Tensor> in = ig.chunk(3, 1), hid = hg.chunk(3, 1);
  Tensor r = (in[0] + hid[0]).sigmoid();
  Tensor z = (in[1] + hid[1]).sigmoid();
  Tensor n = (in[2] + r * hid[2]).tanh();
  Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hid[2], hx}, 1)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> gru_cell_backward(const Tensor& grad_hy,
                                                                     const Tensor& workspace,
                                                                     bool has_bias) {
  std::vector<Tensor> w = workspace.chunk(5, 1);
  const Tensor &r = w[0], &z = w[1], &n = w[2], &hn = w[3], &hx = w[4];
  Tensor gz = grad_hy * (hx - n) * sigmoid_slope(z);
  Tensor gn = grad_hy * (1 - z) * (1 - n * n);
  Tensor gr = gn * hn * sigmoid_slope(r);
  Tensor grad_input_gates = at::cat({gr, gz, gn}, 1);
  Tensor grad_hidden_gates = at::cat({gr, gz, gn * r}, 1);
  Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : Tensor();
  Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : Tensor();
  return {grad_input_gates, grad_hidden_gates, grad_hy * z, grad_input_bias, grad_hidden_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gru_cell_backward));
}

}  // namespace disc
