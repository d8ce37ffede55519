#include "lazy_backend/exec/replay.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/InferSize.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/device/target.h"
#include "lazy_backend/exec/widened_dtypes.h"
#include "lazy_backend/trace/attr_ivalue.h"
#include "lazy_backend/trace/tensor_data.h"
#include "lowering/ops.h"
#include "runtime/cpu/philox.h"

#include <algorithm>
#include <mutex>
#include <optional>

namespace disc {

c10::OperatorHandle resolve_op(uint32_t op) {
  const std::string& full = ir::op_name(op);
  // "aten::name.overload": the overload follows the first '.' after "::".
  size_t ns = full.find("::");
  size_t dot = full.find('.', ns == std::string::npos ? 0 : ns + 2);
  std::string name = dot == std::string::npos ? full : full.substr(0, dot);
  std::string overload = dot == std::string::npos ? "" : full.substr(dot + 1);
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(handle.has_value(), "disc: unknown operator ", full);
  return *handle;
}

at::Tensor param_tensor(const ir::Node& n) {
  const at::Tensor* t = data_of(n);
  TORCH_INTERNAL_ASSERT(t, "disc: parameter without data");
  return *t;
}

bool unchanged_in_inference(const ir::Graph& g, uint32_t node) {
  const ir::GraphNode& gn = g.nodes[node];
  return gn.param >= 0 && (g.read_only_params.empty() || g.read_only_params[gn.param]) &&
         !at::GradMode::is_enabled();
}

uint64_t node_seed(const ir::Node& n) {
  return runtime::stream_seed(static_cast<uint64_t>(n.runtime[n.rng_runtime].i),
                              static_cast<uint64_t>(n.runtime[n.rng_runtime + 1].i));
}

namespace {

// as_strided indexes the storage, not the tensor: give it a fresh,
// contiguous buffer that starts at offset 0 so storage == logical order.
bool needs_flat_storage(uint32_t op) {
  const lowering::Op o = lowering::op_of(op);
  return o == lowering::Op::kAsStrided || o == lowering::Op::kAsStridedScatter;
}

// Random nodes draw from a CPU generator seeded from the (seed, offset) of
// the disc generator they were traced with, so a node's numbers depend on
// nothing else. An op with a generator argument gets a generator of its own:
// replay on the graph worker then never touches the process's CPU
// generator, which the host may be using. True when it did.
bool seed_generator_arguments(const c10::OperatorHandle& op, const ir::Node& n,
                              torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  bool seeded = false;
  for (size_t a = 0; a < args.size() && a < stack.size(); ++a) {
    c10::TypePtr t = args[a].type();
    if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
    if (t->kind() != c10::TypeKind::GeneratorType) continue;
    stack[a] = at::detail::createCPUGenerator(node_seed(n));
    seeded = true;
  }
  return seeded;
}

// Dropout of a dense tensor in its memory order, element k drawing word k
// of the node's stream, in whole groups of 64 elements, the generator's unit
// (philox.h): one pass for float32, bfloat16 and float16; other dtypes
// (float64) draw the mask alone and take ATen's product.
void draw_dropout(uint64_t seed, double kept, double scale, const at::Tensor& x, at::Tensor& output,
                  at::Tensor& mask) {
  const at::ScalarType type = x.scalar_type();
  const bool reduced = type == at::kBFloat16 || type == at::kHalf;
  const bool computed = type == at::kFloat || reduced;
  const auto reduced_type = type == at::kBFloat16 ? runtime::ReducedFloat::kBFloat16
                                                  : runtime::ReducedFloat::kHalf;
  const int64_t numel = x.numel();
  const auto k = static_cast<float>(kept), s = static_cast<float>(scale);
  bool* mp = mask.data_ptr<bool>();
  at::parallel_for(0, (numel + 63) / 64, 256, [&](int64_t g0, int64_t g1) {
    const int64_t begin = g0 * 64, end = std::min(g1 * 64, numel);
    if (reduced) {
      const auto* xp = static_cast<const uint16_t*>(x.const_data_ptr()) + begin;
      auto* yp = static_cast<uint16_t*>(output.data_ptr()) + begin;
      runtime::dropout_reduced(reduced_type, seed, k, s, begin, end, xp, yp, mp + begin);
    } else if (computed) {
      runtime::dropout_f32(seed, k, s, begin, end, x.const_data_ptr<float>() + begin,
                           output.data_ptr<float>() + begin, mp + begin);
    } else {
      runtime::dropout_f32(seed, k, s, begin, end, nullptr, nullptr, mp + begin);
    }
  });
  if (!computed) at::mul_out(output, x, mask).mul_(scale);
}

// native_dropout has no generator argument, so ATen's kernel would draw from
// the process's CPU generator, which the host may be using at the same
// moment. This is ATen's CPU kernel's contract (the same mask dtype, the
// same `input * mask * scale`, the same answers for an empty input and for
// eval), with the mask drawn by Philox (runtime/cpu/philox.h) from the node's
// seed, 16 blocks per vector, in parallel: the same on every executor and
// thread count (an [8, 12, 128, 128] dropout: 7.2 ms with one block at a
// time, 1.6 ms vectorized, 2 threads). It takes the boxed
// arguments (input, p, train) and leaves the results (output, mask).
void native_dropout(const ir::Node& n, torch::jit::Stack& stack) {
  const at::Tensor input = stack.at(0).toTensor();
  const double p = stack.at(1).toDouble();
  const bool train = stack.at(2).isNone() || stack.at(2).toBool();
  at::Tensor output, mask;
  if (input.numel() == 0) {
    output = input, mask = at::empty_like(input);
  } else if (!train) {
    output = input.clone(), mask = at::ones_like(input, input.options().dtype(at::kBool));
  } else {
    const double kept = 1. - p;
    const double scale = kept == 0 ? 0. : 1. / kept;
    // Dense in some order (channels_last too): outputs laid out as the
    // input, element k of its memory drawing word k of the node's stream.
    const at::Tensor x = input.is_non_overlapping_and_dense() ? input : input.contiguous();
    mask = at::empty_like(x, x.options().dtype(at::kBool));
    output = at::empty_like(x);
    draw_dropout(node_seed(n), kept, scale, x, output, mask);
  }
  stack = {output, mask};
}

// Any other random op without a generator argument draws from the process's
// CPU generator, reseeded for the op and restored after it (counted:
// `replay.global_generator`; a host drawing CPU random numbers at the same
// moment would see the swap).
class SeededCpuGenerator {
 public:
  explicit SeededCpuGenerator(uint64_t seed)
      : lock_(mutex()), gen_(at::detail::getDefaultCPUGenerator()) {
    static metrics::Named swaps("replay.global_generator");
    ++swaps;
    std::lock_guard<std::mutex> g(gen_.mutex());
    saved_ = gen_.get_state();
    gen_.set_current_seed(seed);
  }
  ~SeededCpuGenerator() {
    std::lock_guard<std::mutex> g(gen_.mutex());
    gen_.set_state(saved_);
  }

 private:
  static std::mutex& mutex() {
    static std::mutex mu;
    return mu;
  }
  std::lock_guard<std::mutex> lock_;
  at::Generator gen_;
  at::Tensor saved_;
};

// transpose.int, and reshape / view of a contiguous tensor, made here as a
// view of the input's storage: the boxed call through the dispatcher cost
// ~1.3-4 us per view, and an MLP training step has eleven. nullopt: not
// one of those (or a reshape that must copy); replay the op.
std::optional<at::Tensor> plain_view(const ir::Node& n, const at::Tensor& in) {
  using lowering::Op;
  const Op kind = lowering::op_of(n.op);
  if (kind != Op::kTranspose && kind != Op::kReshape && kind != Op::kView) return std::nullopt;
  if (!in.defined() || !in.has_storage() || in.is_mkldnn() || in.is_sparse()) return std::nullopt;
  std::vector<int64_t> sizes = in.sizes().vec(), strides = in.strides().vec();
  if (kind == Op::kTranspose) {
    const ir::Attr *a = n.attr_operand(1), *b = n.attr_operand(2);
    if (!a || !b || a->kind != ir::Attr::Kind::kInt || b->kind != ir::Attr::Kind::kInt) return std::nullopt;
    if (in.dim() == 0) return std::nullopt;  // transpose(0, 0) of a scalar: ATen's answer
    const int64_t d0 = c10::maybe_wrap_dim(a->i, in.dim()), d1 = c10::maybe_wrap_dim(b->i, in.dim());
    std::swap(sizes[d0], sizes[d1]);
    std::swap(strides[d0], strides[d1]);
  } else {
    const ir::Attr* shape = n.attr_operand(1);
    if (!shape || shape->kind != ir::Attr::Kind::kIntList || !in.is_contiguous()) return std::nullopt;
    const c10::DimVector shaped = at::infer_size_dv(shape->ints, in.numel());  // resolves a -1
    sizes.assign(shaped.begin(), shaped.end());
    const c10::DimVector contiguous = c10::contiguous_strides(sizes);
    strides.assign(contiguous.begin(), contiguous.end());
  }
  at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(in.storage()), in.key_set(), in.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, in.storage_offset());
  // One version counter with the input, as views have: a write through
  // either is a write to both (prepacked weights are keyed by it).
  if (!in.is_inference())
    out.unsafeGetTensorImpl()->set_version_counter(in.unsafeGetTensorImpl()->version_counter());
  return out;
}

bool is_mutated(const ir::Node& n, size_t input) {
  return std::find(n.mutated.begin(), n.mutated.end(), input) != n.mutated.end();
}

// _grouped_mm's kernel (CPU's, like CUDA's) reads each operand row- or
// column-major in its last two dims, the other stride a multiple of 16
// bytes, as eager's transposed weights are.
bool grouped_mm_layout(const at::Tensor& t) {
  const int64_t align = 16 / static_cast<int64_t>(t.element_size());
  const int64_t rows = t.stride(-2), cols = t.stride(-1);
  return (cols == 1 && rows % align == 0 && rows >= t.size(-1)) ||
         (rows == 1 && cols % align == 0 && cols >= t.size(-2));
}

at::Tensor grouped_mm_operand(const at::Tensor& t) {
  if (grouped_mm_layout(t)) return t;
  at::Tensor row_major = t.contiguous();
  if (grouped_mm_layout(row_major)) return row_major;
  at::Tensor column_major = t.transpose(-2, -1).contiguous().transpose(-2, -1);
  // Neither: the kernel's own error names the op, as in eager.
  return grouped_mm_layout(column_major) ? column_major : row_major;
}

// Ops whose CPU kernels read inputs of any strides as the same values,
// besides the layout-agnostic ones: permute and reshape, views where the
// strides allow (a merged QKV GEMM's column slice reshaped to heads; a
// [B, L, H, D]-laid-out attention output stored for a later graph), and
// disc's attention, which reads strided heads (attention_ops.cpp).
bool reads_any_strides(uint32_t op) {
  static const uint32_t attention = ir::intern_op("disc::attention"),
                        attention_backward = ir::intern_op("disc::attention_backward");
  const lowering::Op o = lowering::op_of(op);
  return lowering::is_layout_agnostic(op) || o == lowering::Op::kPermute || o == lowering::Op::kReshape ||
         op == attention || op == attention_backward;
}

// Inputs the op writes: its own copy unless the plan lets it write the
// buffer in place (then the version is bumped, as ADInplaceOrView would).
void prepare_inputs(const ir::Node& n, std::vector<at::Tensor>& ins, const std::vector<bool>* in_place) {
  if (needs_flat_storage(n.op) && (!ins[0].is_contiguous() || ins[0].storage_offset() != 0))
    ins[0] = ins[0].clone(at::MemoryFormat::Contiguous);
  // Values have no layout: a traced contiguous() of a view records no copy,
  // and the executor may hold a value transposed or strided. Some CPU
  // kernels rely on their composite caller's contiguous() and read their
  // input as row-major (mkldnn_rnn_layer, _embedding_bag's indices), so
  // inputs come row-major, except to the ops layout-plan lets read NHWC.
  static const uint32_t grouped_mm = ir::intern_op("aten::_grouped_mm");
  if (n.op == grouped_mm) {
    for (size_t i = 0; i < 2; ++i) ins[i] = grouped_mm_operand(ins[i]);
  } else if (!reads_any_strides(n.op)) {
    for (size_t i = 0; i < ins.size(); ++i)
      if (ins[i].defined() && !ins[i].is_contiguous() && !is_mutated(n, i)) {
        ins[i] = ins[i].contiguous();
        metrics::bump("replay.contiguous_copies." + ir::op_name(n.op));
      }
  }
  for (size_t j = 0; j < n.mutated.size(); ++j) {
    if (!in_place || !(*in_place)[j]) {
      ins[n.mutated[j]] = ins[n.mutated[j]].clone();
    } else {
      // Below ADInplaceOrView nothing bumps the version: do it, so caches
      // keyed by (buffer, version) -- packed weights -- see the write.
      c10::TensorImpl* impl = ins[n.mutated[j]].unsafeGetTensorImpl();
      if (!impl->is_inference()) impl->bump_version();
    }
  }
}

// The boxed arguments of node `n`, in schema order, for a run on `device`.
torch::jit::Stack boxed_arguments(const ir::Node& n, const std::vector<at::Tensor>& ins, c10::Device device) {
  torch::jit::Stack stack;
  stack.reserve(n.operands.size());
  for (const ir::Operand& o : n.operands) {
    switch (o.kind) {
      case ir::Operand::Kind::kTensor:
        stack.emplace_back(ins[o.first]);
        break;
      case ir::Operand::Kind::kTensorList:
        stack.emplace_back(std::vector<at::Tensor>(ins.begin() + o.first,
                                                   ins.begin() + o.first + o.count));
        break;
      case ir::Operand::Kind::kOptionalTensorList: {
        c10::List<std::optional<at::Tensor>> l;
        uint32_t next = o.first;
        for (int64_t present : n.attrs[o.mask].ints)
          l.push_back(present ? std::optional<at::Tensor>(ins[next++]) : std::nullopt);
        stack.emplace_back(std::move(l));
        break;
      }
      case ir::Operand::Kind::kAttr:
        stack.push_back(to_ivalue(n.attrs[o.first], device));
        break;
      case ir::Operand::Kind::kRuntime:
        stack.push_back(to_ivalue(n.runtime[o.first], device));
        break;
      case ir::Operand::Kind::kRuntimeList: {
        std::vector<at::Scalar> l;
        for (uint32_t k = 0; k < o.count; ++k) l.push_back(to_ivalue(n.runtime[o.first + k], device).toScalar());
        stack.emplace_back(l);
        break;
      }
    }
  }
  return stack;
}

// Calls the op's kernel; a random op draws from the node's own seed.
void call_kernel(const c10::OperatorHandle& op, const ir::Node& n, torch::jit::Stack& stack) {
  // Values never require grad here; skip the autograd layers.
  at::AutoDispatchBelowADInplaceOrView guard;
  if (n.rng_runtime < 0 || seed_generator_arguments(op, n, stack)) {
    op.callBoxed(&stack);
  } else if (lowering::op_of(n.op) == lowering::Op::kNativeDropout) {
    native_dropout(n, stack);
  } else {
    SeededCpuGenerator global(node_seed(n));
    op.callBoxed(&stack);
  }
}

// Outputs whose dtype is not the traced one, which the op's meta kernel
// gave: an op whose CPU kernel disagrees with its meta kernel and that has
// no META_THEN fix in aten_ops.def yet. They stay as ATen made them, for the ATen kernels that read them; a
// generated kernel casts what it reads (kernel_launch.cpp). Counted:
// replay.dtype_mismatches.<op>.
void count_dtype_mismatches(const ir::Node& n, const std::vector<at::Tensor>& outs) {
  for (size_t k = 0; k < outs.size(); ++k) {
    const ir::TensorType& traced = n.outputs[k];
    if (outs[k].defined() && !traced.undefined && outs[k].scalar_type() != to_aten(traced.dtype))
      metrics::bump("replay.dtype_mismatches." + ir::op_name(n.op));
  }
}

// The node's outputs: the kernel's fresh returns, then the mutated inputs.
std::vector<at::Tensor> node_outputs(const c10::OperatorHandle& op, const ir::Node& n,
                                     const torch::jit::Stack& stack, const std::vector<at::Tensor>& ins) {
  std::vector<at::Tensor> outs;
  outs.reserve(n.outputs.size());
  const auto& returns = op.schema().returns();
  for (size_t r = 0; r < returns.size() && r < stack.size(); ++r) {
    const auto* alias = returns[r].alias_info();
    if (alias && alias->isWrite()) continue;  // the mutated input, added below
    const c10::IValue& v = stack[r];
    if (v.isTensor()) {
      outs.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) outs.push_back(t);
    }
  }
  for (uint32_t m : n.mutated) outs.push_back(ins[m]);
  TORCH_INTERNAL_ASSERT(outs.size() == n.outputs.size(), "disc: ", ir::op_name(n.op),
                        " replay gave ", outs.size(), " outputs, expected ",
                        n.outputs.size());
  count_dtype_mismatches(n, outs);
  return outs;
}

// The op in the wider dtype widened_dtypes.h names for its first input's:
// every input of that dtype is widened, every output of the wide dtype cast
// back. Mutated inputs are left to the plain path (no rule names one).
std::optional<std::vector<at::Tensor>> run_widened(const c10::OperatorHandle& op, const ir::Node& n,
                                                   std::vector<at::Tensor>& ins, c10::Device device) {
  if (ins.empty() || !ins[0].defined() || !n.mutated.empty()) return std::nullopt;
  const at::ScalarType narrow = ins[0].scalar_type();
  const std::optional<at::ScalarType> wide = widened_dtype(n.op, narrow);
  if (!wide) return std::nullopt;
  metrics::bump("widened." + ir::op_name(n.op));
  for (at::Tensor& t : ins)
    if (t.defined() && t.scalar_type() == narrow) t = t.to(*wide);
  torch::jit::Stack stack = boxed_arguments(n, ins, device);
  call_kernel(op, n, stack);
  std::vector<at::Tensor> outs = node_outputs(op, n, stack, ins);
  for (at::Tensor& t : outs)
    if (t.defined() && t.scalar_type() == *wide) t = t.to(narrow);
  return outs;
}

std::vector<at::Tensor> replay_on(c10::Device device, const c10::OperatorHandle& op, const ir::Node& n,
                                  std::vector<at::Tensor> ins, const std::vector<bool>* in_place) {
  if (ins.size() == 1 && n.outputs.size() == 1)
    if (std::optional<at::Tensor> v = plain_view(n, ins[0])) return {std::move(*v)};
  prepare_inputs(n, ins, in_place);
  if (std::optional<std::vector<at::Tensor>> outs = run_widened(op, n, ins, device)) return std::move(*outs);
  torch::jit::Stack stack = boxed_arguments(n, ins, device);
  call_kernel(op, n, stack);
  return node_outputs(op, n, stack, ins);
}

// On the CUDA target a random node runs on the host, its inputs copied
// there and its outputs back: its numbers come from its own seed as on the
// CPU target (the same bits; native_dropout's Philox mask included), and
// no CUDA generator is drawn from behind the user's back. Counted:
// replay.random_on_host.
std::vector<at::Tensor> replay_random_on_host(const c10::OperatorHandle& op, const ir::Node& n,
                                              std::vector<at::Tensor> ins, c10::Device device) {
  static metrics::Named on_host("replay.random_on_host");
  ++on_host;
  for (at::Tensor& t : ins)
    if (t.defined()) t = t.cpu();
  std::vector<at::Tensor> outs = replay_on(c10::Device(c10::kCPU), op, n, std::move(ins), nullptr);
  for (at::Tensor& t : outs)
    if (t.defined()) t = t.to(device);
  return outs;
}

}  // namespace

std::vector<at::Tensor> replay(const c10::OperatorHandle& op, const ir::Node& n,
                               std::vector<at::Tensor> ins, const std::vector<bool>* in_place) {
  const c10::Device device = value_device();
  if (n.rng_runtime >= 0 && !device.is_cpu()) return replay_random_on_host(op, n, std::move(ins), device);
  return replay_on(device, op, n, std::move(ins), in_place);
}

void rethrow_naming(const ir::Node& n) {
  try {
    throw;
  } catch (c10::Error& e) {
    std::string what = "disc: in " + ir::op_name(n.op);
    if (n.origin && !n.origin->empty()) what += ", traced at " + *n.origin;
    e.add_context(std::move(what));
    throw;
  }
}

}  // namespace disc
