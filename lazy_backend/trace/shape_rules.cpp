#include "lazy_backend/trace/shape_rules.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <unordered_map>

namespace disc {

namespace {

at::Tensor meta(at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(c10::kMeta));
}

at::Tensor meta_like(const c10::IValue& v) {
  const at::Tensor& t = v.toTensor();
  return meta(t.sizes(), t.scalar_type());
}

// One result per schema return, each a single tensor.
MetaResult returning(std::vector<at::Tensor> fresh) {
  MetaResult r;
  r.return_sizes.assign(fresh.size(), 1);
  r.fresh = std::move(fresh);
  return r;
}

// The input's shape again (what a scan or a loss's input gradient has).
MetaResult like_argument(c10::ArrayRef<c10::IValue> args, size_t i) {
  return returning({meta_like(args[i])});
}

// _cummax_helper(self, values(a!), indices(b!), dim): both written with
// self's shape.
MetaResult cumulative_helper(c10::ArrayRef<c10::IValue> args) {
  MetaResult r;
  const at::Tensor& self = args[0].toTensor();
  r.mutated = {meta(self.sizes(), args[1].toTensor().scalar_type()),
               meta(self.sizes(), args[2].toTensor().scalar_type())};
  return r;
}

// geqrf(A) -> (a, tau): a as LAPACK leaves it, column-major per matrix;
// tau holds min(m, n) reflector scales per matrix.
MetaResult geqrf(c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& a = args[0].toTensor();
  const int64_t m = a.size(-2), n = a.size(-1);
  std::vector<int64_t> strides(a.dim());
  strides[a.dim() - 2] = 1;
  strides[a.dim() - 1] = m;
  int64_t step = m * n;
  for (int64_t d = a.dim() - 3; d >= 0; --d) {
    strides[d] = step;
    step *= a.size(d);
  }
  std::vector<int64_t> tau(a.sizes().begin(), a.sizes().end() - 2);
  tau.push_back(std::min(m, n));
  return returning({at::empty_strided(a.sizes(), strides, a.options().device(c10::kMeta)),
                    meta(tau, a.scalar_type())});
}

// histogram.bin_ct(self, bins, ...) -> (hist [bins], bin_edges [bins + 1]).
MetaResult histogram(c10::ArrayRef<c10::IValue> args) {
  const int64_t bins = args[1].toInt();
  const at::ScalarType t = args[0].toTensor().scalar_type();
  return returning({meta({bins}, t), meta({bins + 1}, t)});
}

// histogram.bins_tensor(self, bins, ...) -> (hist, bin_edges): bins are the
// edges, so one count fewer.
MetaResult histogram_by_edges(c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& edges = args[1].toTensor();
  return returning({meta({edges.numel() - 1}, args[0].toTensor().scalar_type()), meta_like(args[1])});
}

// _histogramdd_from_bin_tensors(self, bins[], ...): a count per pair of
// neighbouring edges along each dim.
MetaResult histogramdd_counts_by_edges(c10::ArrayRef<c10::IValue> args) {
  std::vector<int64_t> sizes;
  for (const at::Tensor& edges : args[1].toTensorVector()) sizes.push_back(edges.numel() - 1);
  return returning({meta(sizes, args[0].toTensor().scalar_type())});
}

// _histogramdd_bin_edges(self, bins[], ...) -> one [bins[i] + 1] per dim.
MetaResult histogramdd_bin_edges(c10::ArrayRef<c10::IValue> args) {
  MetaResult r;
  const at::ScalarType t = args[0].toTensor().scalar_type();
  for (int64_t b : args[1].toIntVector()) r.fresh.push_back(meta({b + 1}, t));
  r.return_sizes = {r.fresh.size()};
  return r;
}

// _histogramdd_from_bin_cts(self, bins[], ...) -> counts of shape bins.
MetaResult histogramdd_counts(c10::ArrayRef<c10::IValue> args) {
  return returning({meta(args[1].toIntVector(), args[0].toTensor().scalar_type())});
}

// _grouped_mm(a, b, offs, bias, out_dtype): its Meta kernel takes bf16 only
// (CUDA's rule) while ATen's CPU kernel, which runs it here, takes every
// float type. Groups come from b's leading dim or from offs (a 2-D x 2-D
// product grouped along K); the output's rows are padded to 16 bytes as
// the kernel allocates them.
MetaResult grouped_mm(c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& a = args[0].toTensor();
  const at::Tensor& b = args[1].toTensor();
  const at::ScalarType dtype =
      args.size() > 4 && !args[4].isNone() ? args[4].toScalarType() : a.scalar_type();
  std::vector<int64_t> sizes;
  if (a.dim() == 2 && b.dim() == 2) {
    TORCH_CHECK(args.size() > 2 && args[2].isTensor(), "aten::_grouped_mm: 2-D x 2-D needs offs");
    sizes = {args[2].toTensor().size(0), a.size(0), b.size(1)};
  } else if (a.dim() == 3 && b.dim() == 3) {
    sizes = {a.size(0), a.size(1), b.size(2)};
  } else {
    sizes = {a.size(-2), b.size(-1)};
  }
  const int64_t align = 16 / static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t row = (sizes.back() + align - 1) / align * align;
  std::vector<int64_t> strides(sizes.size(), 1);
  if (sizes.size() > 1) strides[sizes.size() - 2] = row;
  if (sizes.size() > 2) strides[0] = row * sizes[1];
  return returning({at::empty_strided(sizes, strides, at::TensorOptions().dtype(dtype).device(c10::kMeta))});
}

MetaResult like_argument_0(c10::ArrayRef<c10::IValue> args) { return like_argument(args, 0); }
// (grad_output, self, ...) -> grad_self; (grad, log_probs, ...) -> grad_log_probs
MetaResult like_argument_1(c10::ArrayRef<c10::IValue> args) { return like_argument(args, 1); }

// oneDNN's LSTM workspace, whose size only oneDNN knows (Meta says 0): the
// CPU kernel, run once per shape (the shape cache keeps the answer) on
// zeros, tells. Its size depends on the shapes only.
void rnn_workspace_from_cpu(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                            MetaResult& r) {
  if (r.fresh.size() != 4) return;
  torch::jit::Stack stack;
  for (const c10::IValue& v : args)
    stack.push_back(v.isTensor() && v.toTensor().defined()
                        ? c10::IValue(at::zeros(v.toTensor().sizes(),
                                                v.toTensor().options().device(c10::kCPU)))
                        : v);
  op.callBoxed(&stack);
  const at::Tensor& workspace = stack[3].toTensor();
  r.fresh[3] = workspace.defined()  // none kept with train=False
                   ? at::empty(workspace.sizes(), workspace.options().device(c10::kMeta))
                   : at::Tensor();
}

// nonzero_static's indices: row-major on CPU, column-major from Meta.
void row_major(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue>, MetaResult& r) {
  if (r.fresh.size() == 1) r.fresh[0] = at::empty(r.fresh[0].sizes(), r.fresh[0].options());
}

// Batch norm in eval saves no statistics: CPU returns them empty, Meta [C].
void no_saved_statistics(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue>, MetaResult& r) {
  if (r.fresh.size() == 3)
    for (size_t k = 1; k < 3; ++k) r.fresh[k] = at::empty({0}, r.fresh[k].options());
}

// _native_batch_norm_legit(input, weight, bias, running_mean, running_var,
// training, ...): the same when training is false.
void no_saved_statistics_in_eval(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                 MetaResult& r) {
  if (args.size() > 5 && args[5].isBool() && !args[5].toBool()) no_saved_statistics(op, args, r);
}

// A meta output, where defined, in `dtype` (the CPU kernel's), its sizes and
// strides kept.
void retype(at::Tensor& t, at::ScalarType dtype) {
  if (t.defined() && t.scalar_type() != dtype)
    t = at::empty_strided(t.sizes(), t.strides(), t.options().dtype(dtype));
}

// Layer and group norm's saved mean and rstd (outputs 1 and 2): ATen's CPU
// kernels keep them in f32 when a bf16 or f16 input comes with weights of
// another dtype (f32: autocast's mix), else in the input's dtype. Meta says
// f32 for layer norm and the input's dtype for group norm, either way.
void statistics_as_cpu(c10::ArrayRef<c10::IValue> args, size_t weight, MetaResult& r) {
  if (r.fresh.size() != 3 || args.empty() || !args[0].isTensor()) return;
  const at::ScalarType input = args[0].toTensor().scalar_type();
  if (input != at::kBFloat16 && input != at::kHalf) return;
  bool mixed = false;
  for (size_t k : {weight, weight + 1})
    if (k < args.size() && args[k].isTensor() && args[k].toTensor().defined())
      mixed |= args[k].toTensor().scalar_type() != input;
  for (size_t k = 1; k < 3; ++k) retype(r.fresh[k], mixed ? at::kFloat : input);
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps)
void layer_norm_statistics(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args,
                           MetaResult& r) {
  statistics_as_cpu(args, 2, r);
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps)
void group_norm_statistics(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args,
                           MetaResult& r) {
  statistics_as_cpu(args, 1, r);
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW,
// group, output_mask)
void group_norm_grad_input(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args,
                           MetaResult& r) {
  if (!r.fresh.empty() && args.size() > 1 && args[1].isTensor())
    retype(r.fresh[0], args[1].toTensor().scalar_type());
}

// mkldnn_rnn_layer_backward: the CPU kernel returns every gradient in f32,
// whatever the input's dtype (oneDNN computes them in f32); Meta says the
// input's. Autograd then casts each to its input's dtype, as in eager.
void rnn_gradients_in_f32(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue>, MetaResult& r) {
  for (at::Tensor& t : r.fresh) retype(t, at::kFloat);
}

using Rule = MetaResult (*)(c10::ArrayRef<c10::IValue>);
using Fix = void (*)(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue>, MetaResult&);

// aten_ops.def's shapes column: the rows with a rule or a fix.
struct Shapes {
  Rule rule = nullptr;
  Fix fix = nullptr;
};
constexpr Shapes META{};
constexpr Shapes RULE(Rule f) { return {f, nullptr}; }
constexpr Shapes META_THEN(Fix f) { return {nullptr, f}; }

const std::unordered_map<std::string, Shapes>& shapes_table() {
  static const auto* rows = [] {
    auto* m = new std::unordered_map<std::string, Shapes>;
#define ATEN_OP(name, sizes, shapes, capture, host) \
  if (Shapes s = shapes; s.rule || s.fix) m->emplace(name, s);
#include "lazy_backend/trace/aten_ops.def"
    return m;
  }();
  return *rows;
}

const Shapes* shapes_of(const std::string& name) {
  auto it = shapes_table().find(name);
  return it == shapes_table().end() ? nullptr : &it->second;
}

}  // namespace

std::optional<MetaResult> shapes_by_rule(const std::string& name, c10::ArrayRef<c10::IValue> args) {
  const Shapes* s = shapes_of(name);
  if (!s || !s->rule) return std::nullopt;
  return s->rule(args);
}

void match_cpu_kernel(const c10::OperatorHandle& op, const std::string& name,
                      c10::ArrayRef<c10::IValue> args, MetaResult& r) {
  const Shapes* s = shapes_of(name);
  if (s && s->fix) s->fix(op, args, r);
}

}  // namespace disc
