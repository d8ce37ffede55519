// The passes each row op makes over a row, in torch's order of operations:
// kLoop's single pass, column sums, last-dim reductions, softmax and
// log_softmax, _safe_softmax (and their backward), layer norm forward and
// backward.
#include "lowering/codegen/cpu/kernel_emitter.h"

namespace disc::lowering {

// The passes of the row op, in torch's order of operations. Producers that
// others read are stored by the first pass over the row only.
void KernelEmitter::emit_row() {
  if (loop_) return emit_loop();
  if (column_) return emit_column_sum();
  switch (row_) {
    case Op::kLayerNormBackward: return emit_layer_norm_backward();
    case Op::kLayerNorm: return emit_layer_norm();
    case Op::kSoftmax:
    case Op::kLogSoftmax:
    case Op::kSafeSoftmax: return emit_softmax();
    case Op::kSoftmaxBackward:
    case Op::kLogSoftmaxBackward: return emit_softmax_backward();
    default: return emit_reduction();
  }
}

// kLoop: one pass, load every input, compute the group, store what leaves it.
void KernelEmitter::emit_loop() {
  pass({}, [&](Variant& v) {
    for (size_t k = 0; k < kernel_.inputs.size(); ++k) load(v, k);
    row_inputs(v, true);
    return std::vector<std::string>{};
  });
}

// A sum / mean / amax over the leading dims: partial sums per column.
void KernelEmitter::emit_column_sum() {
  const size_t out0 = output_slot(row_op_, 0);
  pass({}, [&](Variant& v) {
    accumulate(v, out0, row_inputs(v, true)[0]);
    return std::vector<std::string>{};
  });
}

// A sum / mean / amax over the last dim: one value per row.
void KernelEmitter::emit_reduction() {
  ValueEmitter s = emitter(0);
  const size_t out0 = output_slot(row_op_, 0);
  Acc a = row_ == Op::kAmax ? Acc::kMax : Acc::kAdd;
  std::string r = pass({a}, [&](Variant& v) { return std::vector{row_inputs(v, true)[0]}; })[0];
  if (row_ == Op::kMeanDims) r = s.binary("arith.divf", r, "%nf");
  store_row(out0, r);
}

// softmax, log_softmax, _safe_softmax: max, sum of exp(x - max), scale.
void KernelEmitter::emit_softmax() {
  ValueEmitter s = emitter(0);
  const size_t out0 = output_slot(row_op_, 0);
  std::string mx = pass({Acc::kMax}, [&](Variant& v) {
    return std::vector{row_inputs(v, true)[0]};
  })[0];
  const bool log = row_ == Op::kLogSoftmax;
  // _safe_softmax: a row that is all -inf (fully masked attention) is 0,
  // not NaN: shift it by 0 instead of its max (every exp is then 0) and
  // scale it by 0 instead of 1/0.
  std::string masked_row;
  if (row_ == Op::kSafeSoftmax) {
    masked_row = s.cmp("oeq", mx, identity(Acc::kMax, 0));
    mx = s.select(masked_row, s.constant(0.0), mx);
  }
  // The exps are kept in a f32 output for the last pass; a bf16 one would
  // round them twice, so they are computed again.
  const bool keep_exps = !log && output_dtype(out0) == ir::DType::kFloat32;
  auto shifted = [&](Variant& v) {
    return v.e.binary("arith.subf", row_inputs(v, false)[0], v.e.splat(mx));
  };
  auto exp_of_shifted = [&](Variant& v) { return v.e.exp(shifted(v)); };
  std::string sum = pass({Acc::kAdd}, [&](Variant& v) {
    std::string e = exp_of_shifted(v);
    if (keep_exps) store(v, out0, e);
    return std::vector{e};
  })[0];
  // As ATen: log_softmax subtracts log(sum); softmax multiplies by 1/sum.
  std::string log_sum = log ? s.unary("math.log", sum) : "";
  std::string inv_sum = log ? "" : s.binary("arith.divf", s.constant(1.0), sum);
  if (!masked_row.empty()) inv_sum = s.select(masked_row, s.constant(0.0), inv_sum);
  pass({}, [&](Variant& v) {
    if (log) {
      store(v, out0, v.e.binary("arith.subf", shifted(v), v.e.splat(log_sum)));
    } else {
      const std::string e = keep_exps ? load_output(v, out0) : exp_of_shifted(v);
      store(v, out0, v.e.binary("arith.mulf", e, v.e.splat(inv_sum)));
    }
    return std::vector<std::string>{};
  });
}

// softmax:      grad_in = y * (g - sum(g * y))
// log_softmax:  grad_in = g - exp(y) * sum(g)
void KernelEmitter::emit_softmax_backward() {
  const size_t out0 = output_slot(row_op_, 0);
  const bool log = row_ == Op::kLogSoftmaxBackward;
  std::string sum = pass({Acc::kAdd}, [&](Variant& v) {
    std::vector<std::string> in = row_inputs(v, true);
    return std::vector{log ? in[0] : v.e.binary("arith.mulf", in[0], in[1])};
  })[0];
  pass({}, [&](Variant& v) {
    std::vector<std::string> in = row_inputs(v, false);
    std::string r = log ? v.e.binary("arith.subf", in[0],
                                     v.e.binary("arith.mulf", v.e.exp(in[1]), v.e.splat(sum)))
                        : v.e.binary("arith.mulf", in[1],
                                     v.e.binary("arith.subf", in[0], v.e.splat(sum)));
    store(v, out0, r);
    return std::vector<std::string>{};
  });
}

// native_layer_norm(x, [n], weight?, bias?, eps): two passes for the
// moments (mean, then the centred sum of squares), one to normalize.
void KernelEmitter::emit_layer_norm() {
  ValueEmitter s = emitter(0);
  const size_t out0 = output_slot(row_op_, 0);
  const ir::Node& n = *p_.ops[row_op_].node;
  const int w = n.tensor_operand(2), b = n.tensor_operand(3);
  std::string sum = pass({Acc::kAdd}, [&](Variant& v) {
    return std::vector{row_inputs(v, true)[0]};
  })[0];
  std::string mean = s.binary("arith.divf", sum, "%nf");
  std::string sq = pass({Acc::kAdd}, [&](Variant& v) {
    std::string d = v.e.binary("arith.subf", row_inputs(v, false)[0], v.e.splat(mean));
    return std::vector{v.e.binary("arith.mulf", d, d)};
  })[0];
  std::string var = s.binary("arith.divf", sq, "%nf");
  std::string eps = s.scalar_operand_f32(row_op_, 4);
  std::string rstd = s.binary("arith.divf", s.constant(1.0),
                              s.unary("math.sqrt", s.binary("arith.addf", var, eps)));
  pass({}, [&](Variant& v) {
    std::vector<std::string> in = row_inputs(v, false);
    std::string y = v.e.binary("arith.mulf", v.e.binary("arith.subf", in[0], v.e.splat(mean)),
                               v.e.splat(rstd));
    if (w >= 0) y = v.e.binary("arith.mulf", y, in[w]);
    if (b >= 0) y = v.e.binary("arith.addf", y, in[b]);
    store(v, out0, y);
    return std::vector<std::string>{};
  });
  store_row(output_slot(row_op_, 1), mean);
  store_row(output_slot(row_op_, 2), rstd);
}

// native_layer_norm_backward(dy, x, [n], mean, rstd, w?, b?, mask), as
// torch computes it: ds = sum(dy*w*x), db = sum(dy*w) over the row, then
//   dx = rstd*dy*w + b'*x + c',  b' = (db*mean - ds) * rstd^3 / n,
//                                c' = -b'*mean - db*rstd / n
// and per column dw += dy*(x - mean)*rstd, dbias += dy.
void KernelEmitter::emit_layer_norm_backward() {
  const ir::Node& n = *p_.ops[row_op_].node;
  const int x = n.tensor_operand(1), mean = n.tensor_operand(3), rstd = n.tensor_operand(4);
  const int w = n.tensor_operand(5);
  const int dx = find_output(row_op_, 0), dw = find_output(row_op_, 1),
            db = find_output(row_op_, 2);
  auto dyw = [&](Variant& v, const std::vector<std::string>& in) {
    return w >= 0 ? v.e.binary("arith.mulf", in[0], in[w]) : in[0];
  };
  std::vector<std::string> sums = pass({Acc::kAdd, Acc::kAdd}, [&](Variant& v) {
    std::vector<std::string> in = row_inputs(v, true);
    std::string g = dyw(v, in);
    return std::vector{v.e.binary("arith.mulf", g, in[x]), g};
  });
  pass({}, [&](Variant& v) {
    std::vector<std::string> in = row_inputs(v, false);
    ValueEmitter& e = v.e;
    const std::string m = in[mean], r = in[rstd];
    if (dx >= 0) {
      std::string ds = e.splat(sums[0]), dbs = e.splat(sums[1]);
      std::string inv_n = e.binary("arith.divf", e.constant(1.0), e.splat("%nf"));
      std::string r3 = e.binary("arith.mulf", e.binary("arith.mulf", r, r), r);
      std::string b = e.binary("arith.mulf",
                               e.binary("arith.mulf",
                                        e.binary("arith.subf", e.binary("arith.mulf", dbs, m), ds), r3),
                               inv_n);
      std::string c = e.binary("arith.subf", e.unary("arith.negf", e.binary("arith.mulf", b, m)),
                               e.binary("arith.mulf", e.binary("arith.mulf", dbs, r), inv_n));
      std::string out = e.binary("arith.addf",
                                 e.binary("arith.addf", e.binary("arith.mulf", r, dyw(v, in)),
                                          e.binary("arith.mulf", b, in[x])),
                                 c);
      store(v, dx, out);
    }
    if (dw >= 0)
      accumulate(v, dw, e.binary("arith.mulf", e.binary("arith.mulf", in[0],
                                                          e.binary("arith.subf", in[x], m)), r));
    if (db >= 0) accumulate(v, db, in[0]);
    return std::vector<std::string>{};
  });
}

}  // namespace disc::lowering
