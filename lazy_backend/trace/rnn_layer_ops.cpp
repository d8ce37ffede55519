// disc::rnn_layer and its backward: one GRU or Elman (tanh / relu) layer
// over a whole float32 sequence, as two ops the graph replays on the CPU.
// ATen has no oneDNN layer for these cells, so eager runs them step by
// step through ATen ops; on disc that cost a trace of every step's ops
// (~18 per time step, forward and backward) and a kernel launch each. Here
// a step is one GEMM (the hidden state's) and one loop over the gates; the
// input's GEMM covers the whole sequence at once.
//
//   rnn_layer(input [T, B, I], hx [B, H], w_ih [G*H, I], w_hh [G*H, H],
//             b_ih?, b_hh?, mode, reverse) -> (output [T, B, H], hy [B, H],
//                                              workspace [T, B, W])
//   mode: kTanh, kRelu (G = 1, W = 0) or kGru (G = 3; W = 4H: r, z, n and
//   the hidden n-gate h W_hn + b_hn, which the backward needs).
#include "lazy_backend/trace/rnn_layer_ops.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>

namespace disc {

namespace {

using at::Tensor;
using std::optional;

int64_t gates_of(int64_t mode) { return mode == kGru ? 3 : 1; }
int64_t workspace_width(int64_t mode, int64_t hidden) { return mode == kGru ? 4 * hidden : 0; }

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// The hidden state the step at time t started from.
Tensor previous_state(const Tensor& hx, const Tensor& output, int64_t t, bool reverse) {
  const int64_t last = output.size(0) - 1;
  if (reverse) return t == last ? hx : output[t + 1];
  return t == 0 ? hx : output[t - 1];
}

// One step's gates -> h (and the workspace row). gi, gh: [B, G*H] rows.
void step_gates(int64_t mode, int64_t batch, int64_t hidden, const float* gi, const float* gh,
                const float* h_prev, float* h, float* ws) {
  const int64_t g = gates_of(mode) * hidden;
  for (int64_t b = 0; b < batch; ++b) {
    const float *xi = gi + b * g, *xh = gh + b * g, *hp = h_prev + b * hidden;
    float* out = h + b * hidden;
    if (mode != kGru) {
      for (int64_t j = 0; j < hidden; ++j) {
        const float pre = xi[j] + xh[j];
        out[j] = mode == kTanh ? std::tanh(pre) : std::max(pre, 0.f);
      }
      continue;
    }
    float* w = ws + b * 4 * hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      const float r = sigmoid(xi[j] + xh[j]);
      const float z = sigmoid(xi[hidden + j] + xh[hidden + j]);
      const float hn = xh[2 * hidden + j];
      const float n = std::tanh(xi[2 * hidden + j] + r * hn);
      out[j] = n + z * (hp[j] - n);
      w[j] = r, w[hidden + j] = z, w[2 * hidden + j] = n, w[3 * hidden + j] = hn;
    }
  }
}

std::tuple<Tensor, Tensor, Tensor> rnn_layer_cpu(const Tensor& input, const Tensor& hx,
                                                 const Tensor& w_ih, const Tensor& w_hh,
                                                 const optional<Tensor>& b_ih,
                                                 const optional<Tensor>& b_hh, int64_t mode,
                                                 bool reverse) {
  const int64_t steps = input.size(0), batch = input.size(1), hidden = hx.size(1);
  Tensor gi = at::matmul(input.contiguous(), w_ih.t());  // every step's input gates at once
  if (b_ih && b_ih->defined()) gi.add_(*b_ih);
  Tensor output = at::empty({steps, batch, hidden}, input.options());
  Tensor workspace = at::empty({steps, batch, workspace_width(mode, hidden)}, input.options());
  Tensor h = hx.contiguous();
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    Tensor gh = b_hh && b_hh->defined() ? at::addmm(*b_hh, h, w_hh.t()) : at::mm(h, w_hh.t());
    Tensor h_next = output[t];
    step_gates(mode, batch, hidden, gi[t].data_ptr<float>(), gh.data_ptr<float>(),
               h.data_ptr<float>(), h_next.data_ptr<float>(), workspace[t].data_ptr<float>());
    h = h_next;
  }
  return {output, h.clone(), workspace};
}

// d(pre-activation gates) of one step from dh, the gradient reaching h_t.
// grad_gi / grad_gh: [B, G*H] rows (they differ in the GRU's n gate).
void step_gate_grads(int64_t mode, int64_t batch, int64_t hidden, const float* dh,
                     const float* h, const float* h_prev, const float* ws, float* grad_gi,
                     float* grad_gh) {
  const int64_t g = gates_of(mode) * hidden;
  for (int64_t b = 0; b < batch; ++b) {
    const float *d = dh + b * hidden, *hb = h + b * hidden, *hp = h_prev + b * hidden;
    float *gi = grad_gi + b * g, *gh = grad_gh + b * g;
    if (mode != kGru) {
      for (int64_t j = 0; j < hidden; ++j) {
        const float slope = mode == kTanh ? 1.f - hb[j] * hb[j] : (hb[j] > 0.f ? 1.f : 0.f);
        gi[j] = gh[j] = d[j] * slope;
      }
      continue;
    }
    const float* w = ws + b * 4 * hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      const float r = w[j], z = w[hidden + j], n = w[2 * hidden + j], hn = w[3 * hidden + j];
      const float dz = d[j] * (hp[j] - n) * z * (1.f - z);
      const float dn = d[j] * (1.f - z) * (1.f - n * n);
      const float dr = dn * hn * r * (1.f - r);
      gi[j] = gh[j] = dr;
      gi[hidden + j] = gh[hidden + j] = dz;
      gi[2 * hidden + j] = dn;
      gh[2 * hidden + j] = dn * r;
    }
  }
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> rnn_layer_backward_cpu(
    const optional<Tensor>& grad_output, const optional<Tensor>& grad_hy, const Tensor& input,
    const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& output,
    const Tensor& workspace, int64_t mode, bool reverse) {
  const int64_t steps = input.size(0), batch = input.size(1), hidden = hx.size(1);
  const int64_t g = gates_of(mode) * hidden;
  Tensor grad_gi = at::empty({steps, batch, g}, input.options());
  Tensor grad_gh = at::empty({steps, batch, g}, input.options());
  Tensor previous = at::empty({steps, batch, hidden}, input.options());
  Tensor grad_h = grad_hy && grad_hy->defined() ? grad_hy->contiguous() : at::zeros_like(hx);
  const Tensor out = output.contiguous(), ws = workspace.contiguous(), h0 = hx.contiguous();
  const bool has_grad_output = grad_output && grad_output->defined();
  const Tensor go = has_grad_output ? grad_output->contiguous() : Tensor();
  for (int64_t s = steps - 1; s >= 0; --s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    Tensor dh = has_grad_output ? grad_h + go[t] : grad_h;
    Tensor h_prev = previous_state(h0, out, t, reverse);
    previous[t].copy_(h_prev);
    step_gate_grads(mode, batch, hidden, dh.data_ptr<float>(), out[t].data_ptr<float>(),
                    h_prev.data_ptr<float>(), ws[t].data_ptr<float>(),
                    grad_gi[t].data_ptr<float>(), grad_gh[t].data_ptr<float>());
    grad_h = at::mm(grad_gh[t], w_hh);
    if (mode == kGru) grad_h.add_(dh * ws[t].narrow(1, hidden, hidden));  // through z * h_prev
  }
  const Tensor gi2 = grad_gi.view({steps * batch, g}), gh2 = grad_gh.view({steps * batch, g});
  Tensor grad_input = at::mm(gi2, w_ih).view({steps, batch, input.size(2)});
  Tensor grad_w_ih = at::mm(gi2.t(), input.contiguous().view({steps * batch, input.size(2)}));
  Tensor grad_w_hh = at::mm(gh2.t(), previous.view({steps * batch, hidden}));
  return {grad_input, grad_h, grad_w_ih, grad_w_hh, gi2.sum(0), gh2.sum(0)};
}

std::tuple<Tensor, Tensor, Tensor> rnn_layer_meta(const Tensor& input, const Tensor& hx,
                                                  const Tensor&, const Tensor&,
                                                  const optional<Tensor>&, const optional<Tensor>&,
                                                  int64_t mode, bool) {
  const int64_t steps = input.size(0), batch = input.size(1), hidden = hx.size(1);
  return {at::empty({steps, batch, hidden}, input.options()), at::empty_like(hx),
          at::empty({steps, batch, workspace_width(mode, hidden)}, input.options())};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> rnn_layer_backward_meta(
    const optional<Tensor>&, const optional<Tensor>&, const Tensor& input, const Tensor& hx,
    const Tensor& w_ih, const Tensor& w_hh, const Tensor&, const Tensor&, int64_t, bool) {
  return {at::empty_like(input), at::empty_like(hx), at::empty_like(w_ih), at::empty_like(w_hh),
          at::empty({w_ih.size(0)}, w_ih.options()), at::empty({w_hh.size(0)}, w_hh.options())};
}

}  // namespace

TORCH_LIBRARY(disc, m) {
  m.def("rnn_layer(Tensor input, Tensor hx, Tensor w_ih, Tensor w_hh, Tensor? b_ih, Tensor? b_hh, "
        "int mode, bool reverse) -> (Tensor, Tensor, Tensor)");
  m.def("rnn_layer_backward(Tensor? grad_output, Tensor? grad_hy, Tensor input, Tensor hx, "
        "Tensor w_ih, Tensor w_hh, Tensor output, Tensor workspace, int mode, bool reverse) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(disc, CPU, m) {
  m.impl("rnn_layer", TORCH_FN(rnn_layer_cpu));
  m.impl("rnn_layer_backward", TORCH_FN(rnn_layer_backward_cpu));
}

TORCH_LIBRARY_IMPL(disc, Meta, m) {
  m.impl("rnn_layer", TORCH_FN(rnn_layer_meta));
  m.impl("rnn_layer_backward", TORCH_FN(rnn_layer_backward_meta));
}

}  // namespace disc
