#include "lazy_backend/trace/capture.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>
#include <unordered_map>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/base/python_location.h"
#include "lazy_backend/device/rng.h"
#include "lazy_backend/device/target.h"
#include "lazy_backend/trace/aten_ops.h"
#include "lazy_backend/trace/attr_ivalue.h"
#include "lazy_backend/trace/lazy_storage.h"
#include "lazy_backend/trace/node_builder.h"
#include "lazy_backend/trace/shape_cache.h"
#include "lazy_backend/trace/shape_rules.h"
#include "lazy_backend/trace/tensor_data.h"
#include "lowering/ops.h"

namespace disc {

namespace {


// Torch allows a CPU scalar tensor (0-dim) next to device tensors; anything
// else on another device is the user's error, reported as torch does for cuda.
void check_device(const at::Tensor& t, const std::string& op) {
  if (!t.defined() || is_disc(t)) return;
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 0,
              "Expected all tensors to be on the same device, but found at least two devices, "
              "disc:0 and ", t.device(), "! (when checking arguments for ", op, ")");
}

// Tensors become meta tensors, except wrapped numbers: torch only lets those
// live on the CPU (Python meta kernels reject a meta one), and meta kernels
// accept them next to any device.
at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined() || (t.device().is_cpu() && t.unsafeGetTensorImpl()->is_wrapped_number()))
    return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

c10::IValue meta_ivalue(const c10::IValue& v) {
  if (v.isTensor()) return to_meta(v.toTensor());
  if (v.isTensorList()) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(to_meta(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& t : v.toOptionalTensorList()) {
      std::optional<at::Tensor> o = t;
      out.push_back(o && o->defined() ? std::optional(to_meta(*o)) : std::nullopt);
    }
    return out;
  }
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1)
    return c10::Device(c10::kMeta);
  return v;
}

ir::Value value_of(const at::Tensor& t) {
  if (is_disc(t)) return lazy_storage_of(t).read(t);
  // Python scalars arrive as 0-dim CPU "wrapped numbers" (which keep out of
  // type promotion: float32 tensor * 0.9 stays float32). The dispatcher
  // makes one for this one call and nothing writes it: the trace holds it
  // as it is, mark and all. Any other CPU scalar is the user's tensor,
  // which may change after this op: the trace owns a copy.
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) return make_data(t);
  // A 0-dim CPU tensor is a scalar to ATen's kernels on any device; any
  // other goes where values live (device/target.h).
  return make_data(t.dim() == 0 || value_device().is_cpu() ? t.clone() : snapshot_on_target(t));
}

// Why the schema alone makes an op unrecordable, or nullopt.
std::optional<std::string> unrecordable_schema(const c10::FunctionSchema& schema) {
  if (const char* why = aten_ops::host_only(schema.operator_name().name)) return std::string(why);
  for (const auto& r : schema.returns()) {
    const auto* alias = r.alias_info();
    if (alias && !alias->isWrite()) return "view op without a disc kernel";
    const auto kind = r.real_type()->kind();
    bool tensorish = kind == c10::TypeKind::TensorType ||
                     (kind == c10::TypeKind::ListType &&
                      r.real_type()->castRaw<c10::ListType>()->getElementType()->kind() ==
                          c10::TypeKind::TensorType);
    if (!tensorish) return "returns a non-tensor value";
  }
  return std::nullopt;
}

// What capture needs from an op's schema alone, worked out on its first
// call instead of on every one (the name was a string built, hashed and
// interned per op). Per thread, so no lock; keyed by the schema's address,
// which the dispatcher keeps for the operator's lifetime, and checked
// against the name in case an operator was replaced at the same address
// (a new entry's empty name matches no schema).
struct OpInfo {
  std::string name;  // "aten::add.Tensor"
  uint32_t id = 0;   // ir::intern_op(name)
  std::optional<std::string> unrecordable;
  bool random = false, arange = false;
  bool scalar_form = false;  // float Scalars are attributes (aten_ops::scalars_are_form)
  bool may_fail = false;  // on its data, when the graph runs: remember where it was traced
  bool conv = false;      // convolution or convolution_backward (conv_channels_last)
};

// Whether `full` is "<name>" or "<name>.<overload>" of `schema`, without
// building the string.
bool is_name_of(const std::string& full, const c10::FunctionSchema& schema) {
  const std::string& base = schema.name();
  const std::string& overload = schema.overload_name();
  if (full.compare(0, base.size(), base) != 0) return false;
  if (overload.empty()) return full.size() == base.size();
  return full.size() == base.size() + 1 + overload.size() && full[base.size()] == '.' &&
         full.compare(base.size() + 1, overload.size(), overload) == 0;
}

const OpInfo& op_info(const c10::OperatorHandle& op) {
  thread_local std::unordered_map<const c10::FunctionSchema*, OpInfo> infos;
  const c10::FunctionSchema& schema = op.schema();
  OpInfo& info = infos[&schema];
  if (is_name_of(info.name, schema)) return info;
  info.name = schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
  info.id = ir::intern_op(info.name);
  info.unrecordable = unrecordable_schema(schema);
  info.random = op.hasTag(at::Tag::nondeterministic_seeded);
  info.arange = aten_ops::scalars_are_sizes(info.name);
  info.scalar_form = aten_ops::scalars_are_form(info.name);
  info.may_fail = lowering::may_fail_on_data(info.id);
  info.conv = lowering::is_convolution(info.id);
  return info;
}

// Why the op cannot be recorded with these arguments, or nullopt when it can.
std::optional<std::string> unrecordable(const OpInfo& info, const c10::FunctionSchema& schema,
                                        c10::ArrayRef<c10::IValue> args) {
  if (info.unrecordable) return info.unrecordable;
  const auto& formals = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    if (v.isTensor() || v.isTensorList() || v.isOptionalTensorList() || v.isNone()) continue;
    if (v.isGenerator()) return "explicit generator";
    if (v.isList() && formals[i].real_type()->kind() == c10::TypeKind::ListType &&
        formals[i].real_type()->castRaw<c10::ListType>()->getElementType()->kind() ==
            c10::TypeKind::NumberType)
      continue;  // ScalarList: recorded as runtime data
    if (!to_attr(v, formals[i])) return "argument '" + formals[i].name() + "' of unsupported type";
  }
  return std::nullopt;
}

struct Recorded {
  ir::NodePtr node;
  std::vector<at::Tensor> mutated;  // disc tensors written in place
};

// Records the node; meta_args holds the op's arguments after the meta run
// (mutated meta tensors carry their new sizes).
Recorded record(const OpInfo& info, const c10::FunctionSchema& schema,
                c10::ArrayRef<c10::IValue> args, const std::vector<at::Tensor>& fresh_meta,
                const std::vector<at::Tensor>& mutated_meta) {
  NodeBuilder b(info.id);
  Recorded rec;
  std::vector<uint32_t> mutated_inputs;
  const auto& formals = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    const auto* alias = formals[i].alias_info();
    const bool writes = alias && alias->isWrite();
    if (v.isTensor() && v.toTensor().defined()) {
      if (writes) {
        mutated_inputs.push_back(b.num_inputs());
        rec.mutated.push_back(v.toTensor());
      }
      b.tensor(value_of(v.toTensor()));
    } else if (v.isTensorList()) {
      std::vector<ir::Value> vs;
      for (const at::Tensor& t : v.toTensorVector()) {
        if (writes) {
          mutated_inputs.push_back(b.num_inputs() + static_cast<uint32_t>(vs.size()));
          rec.mutated.push_back(t);
        }
        vs.push_back(value_of(t));
      }
      b.tensor_list(vs);
    } else if (v.isOptionalTensorList()) {
      std::vector<std::optional<ir::Value>> vs;
      for (const auto& t : v.toOptionalTensorList()) {
        std::optional<at::Tensor> o = t;
        vs.push_back(o && o->defined() ? std::optional(value_of(*o)) : std::nullopt);
      }
      b.optional_tensor_list(vs);
    } else if (v.isTensor()) {
      b.none();  // an undefined optional tensor
    } else if (is_runtime_scalar(v, formals[i]) && !info.scalar_form) {
      b.runtime(*to_attr(v, formals[i]));
    } else if (v.isList() && !v.isIntList() && !v.isDoubleList() && !v.isBoolList()) {
      std::vector<ir::Attr> scalars;  // ScalarList, e.g. Adam's step sizes
      for (const c10::IValue& e : v.toListRef())
        scalars.push_back(e.isDouble() ? ir::Attr::of_double(ir::Attr::Kind::kScalarDouble, e.toDouble())
                                       : ir::Attr::of_int(ir::Attr::Kind::kScalarInt, e.toInt()));
      b.runtime_list(std::move(scalars));
    } else {
      ir::Attr a = *to_attr(v, formals[i]);
      // arange's bounds are Scalars, not SymInts, but are sizes all the same
      // (position ids of a sequence): keep them out of the structural hash.
      if (a.kind == ir::Attr::Kind::kScalarInt && info.arange) a.symbolic = true;
      b.attr(std::move(a));
    }
  }
  for (const at::Tensor& m : fresh_meta) b.output(type_of(m));
  for (size_t j = 0; j < mutated_inputs.size(); ++j)
    b.mutates(mutated_inputs[j], type_of(mutated_meta[j]));
  if (info.random) {
    auto [seed, offset] = next_random_draw();
    b.rng(seed, offset);
  }
  rec.node = b.build();
  return rec;
}

// Meta kernels (C++ or Python) that have no data-independent answer say so
// with these exception names; the op then runs on the CPU fallback.
bool means_no_meta(const std::string& msg) {
  return msg.find("NotImplementedError") != std::string::npos ||
         msg.find("DataDependentOutput") != std::string::npos ||
         msg.find("DynamicOutputShape") != std::string::npos;
}

// Output types from the op's Meta kernel; nullopt when it has none.
std::optional<MetaResult> infer_shapes(const c10::OperatorHandle& op, const std::string& name,
                                       c10::ArrayRef<c10::IValue> args) {
  const c10::FunctionSchema& schema = op.schema();
  torch::jit::Stack meta;
  meta.reserve(args.size());
  for (const c10::IValue& v : args) meta.push_back(meta_ivalue(v));
  torch::jit::Stack meta_args = meta;  // keeps the (mutated) meta inputs
  try {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.callBoxed(&meta);
  } catch (const c10::NotImplementedError&) {
    return std::nullopt;
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    if (means_no_meta(msg)) return std::nullopt;
    // Ctrl-C noticed inside a Python meta kernel: it must reach the user as
    // KeyboardInterrupt, not as an op error.
    if (msg.rfind("KeyboardInterrupt", 0) == 0) throw;
    // The user's error (bad shapes, dtypes): say which op, keep torch's words
    // (without the Python stack of a Python meta kernel).
    TORCH_CHECK(false, name, ": ", msg.substr(0, msg.find("\n\nAt:\n")));
  }
  MetaResult r;
  const auto& returns = schema.returns();
  for (size_t i = 0; i < returns.size(); ++i) {
    const auto* alias = returns[i].alias_info();
    size_t before = r.fresh.size();
    if (alias && alias->isWrite()) {
      // an in-place return: it is the argument itself
    } else if (meta[i].isTensor()) {
      r.fresh.push_back(meta[i].toTensor());
    } else {
      for (const at::Tensor& t : meta[i].toTensorVector()) r.fresh.push_back(t);
    }
    r.return_sizes.push_back(r.fresh.size() - before);
  }
  match_cpu_kernel(op, name, args, r);
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (!alias || !alias->isWrite()) continue;
    if (meta_args[i].isTensor() && meta_args[i].toTensor().defined())
      r.mutated.push_back(meta_args[i].toTensor());
    else if (meta_args[i].isTensorList())
      for (const at::Tensor& t : meta_args[i].toTensorVector()) r.mutated.push_back(t);
  }
  return r;
}

// Disc ops take disc tensors (and CPU scalars): anything else is an error
// naming the op.
void check_devices(c10::ArrayRef<c10::IValue> args, const std::string& name) {
  for (const c10::IValue& v : args) {
    if (v.isTensor()) check_device(v.toTensor(), name);
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorVector()) check_device(t, name);
  }
}

// The op's output shapes: by exact key, else by size pattern (a new
// length), else by a rule of shape_rules.h, else from the Meta kernel,
// learning both keys. nullptr when the op has neither rule nor Meta
// kernel. `scratch` holds a result not in the cache.
const MetaResult* shapes_of(const c10::OperatorHandle& op, const std::string& name,
                            c10::ArrayRef<c10::IValue> args, MetaResult& scratch) {
  std::optional<ShapeKey> key = shape_key(op, args);
  if (const MetaResult* cached = key ? lookup_shapes(*key) : nullptr) return cached;
  if (std::optional<MetaResult> r = lookup_symbolic_shapes(op, args)) {
    scratch = std::move(*r);
    metrics::bump("shape_cache.symbolic_hits");
  } else {
    r = shapes_by_rule(name, args);
    if (!r) r = infer_shapes(op, name, args);
    if (!r) return nullptr;
    scratch = std::move(*r);
    remember_symbolic_shapes(op, args, scratch);
    metrics::bump("shape_cache.meta_runs");
    metrics::bump("shape_cache.meta_runs." + name);
  }
  if (key) remember_shapes(std::move(*key), scratch);
  return &scratch;
}

// Whether a convolution's results are channels_last in eager: when one of
// its 4-D tensor arguments (input, weight, gradient) is, as ATen's CPU
// convolutions decide; their Meta kernels say contiguous.
bool conv_channels_last(const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  if (!info.conv) return false;
  for (size_t i = 0; i < std::min<size_t>(args.size(), 3); ++i) {
    if (!args[i].isTensor()) continue;
    const at::Tensor& t = args[i].toTensor();
    if (t.defined() && t.dim() == 4 && t.suggest_memory_format() == at::MemoryFormat::ChannelsLast)
      return true;
  }
  return false;
}

// A new disc tensor for `meta`: its strides where they are dense in another
// order, or channels_last where eager's kernel would choose it.
at::Tensor output_like(const at::Tensor& meta, bool channels_last) {
  if (channels_last && meta.dim() == 4)
    return empty_disc_like(meta.contiguous(at::MemoryFormat::ChannelsLast));
  return empty_disc_like(meta);
}

// The layout an empty out= argument takes in eager: ATen's CPU kernels lay
// a resized output out as their input of its sizes (abs.out of a
// channels_last tensor is channels_last); Meta kernels make it row-major.
at::Tensor out_layout(const at::Tensor& out, const at::Tensor& meta, c10::ArrayRef<c10::IValue> args) {
  if (out.numel() != 0 || !meta.is_contiguous()) return meta;
  for (const c10::IValue& v : args) {
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (t.defined() && !t.is_same(out) && t.sizes() == meta.sizes() && !t.is_contiguous() &&
        t.is_non_overlapping_and_dense())
      return at::empty_strided(meta.sizes(), t.strides(), meta.options());
  }
  return meta;
}

// New disc tensors for the node's fresh outputs; the mutated arguments'
// storages now hold the node's later outputs.
std::vector<at::Tensor> bind_outputs(const Recorded& rec, const MetaResult& shapes,
                                     bool channels_last, c10::ArrayRef<c10::IValue> args) {
  std::vector<at::Tensor> results;
  for (size_t k = 0; k < shapes.fresh.size(); ++k) {
    const at::Tensor& meta = shapes.fresh[k];
    if (!meta.defined()) {  // e.g. grad_input of a first conv layer
      results.emplace_back();
      continue;
    }
    at::Tensor out = output_like(meta, channels_last);
    lazy_storage_of(out).write(out, {rec.node, static_cast<uint32_t>(k)});
    results.push_back(out);
  }
  for (size_t j = 0; j < rec.mutated.size(); ++j) {
    resize_disc(rec.mutated[j], out_layout(rec.mutated[j], shapes.mutated[j], args));
    lazy_storage_of(rec.mutated[j])
        .write(rec.mutated[j], {rec.node, static_cast<uint32_t>(shapes.fresh.size() + j)});
  }
  return results;
}

// Replaces the arguments on the stack with the returns: fresh tensors in
// order; an in-place return is its argument.
void push_returns(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                  const std::vector<at::Tensor>& results, const std::vector<size_t>& return_sizes,
                  torch::jit::Stack* stack) {
  const size_t nargs = schema.arguments().size();
  const auto& returns = schema.returns();
  torch::jit::Stack out;
  size_t next = 0;
  for (size_t r = 0; r < returns.size(); ++r) {
    const auto* alias = returns[r].alias_info();
    if (alias && alias->isWrite()) {
      for (size_t i = 0; i < nargs; ++i) {
        const auto* a = schema.arguments()[i].alias_info();
        if (a && a->isWrite() && a->beforeSets() == alias->beforeSets()) {
          out.push_back(args[i]);
          break;
        }
      }
    } else if (returns[r].real_type()->kind() == c10::TypeKind::TensorType) {
      out.emplace_back(results[next++]);
    } else {
      size_t n = return_sizes.at(r);
      out.emplace_back(std::vector<at::Tensor>(results.begin() + next, results.begin() + next + n));
      next += n;
    }
  }
  torch::jit::drop(*stack, nargs);
  for (auto& v : out) stack->push_back(std::move(v));
}

bool has_math_bits(const at::Tensor& t) {
  return t.defined() && (t.is_conj() || t.is_neg());
}

// Ops that handle the conjugate and negative bits themselves (mm, dot,
// clone) reach disc with them set: their inputs become plain values, and a
// written argument with a bit set is an error rather than a silently plain
// write.
void resolve_math_bits(const c10::FunctionSchema& schema, torch::jit::Stack* stack,
                       const std::string& name) {
  const size_t n = schema.arguments().size();
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[stack->size() - n + i];
    const auto* alias = schema.arguments()[i].alias_info();
    const bool written = alias && alias->isWrite();
    if (v.isTensor() && has_math_bits(v.toTensor())) {
      TORCH_CHECK(!written, "disc: ", name, " cannot write into a conjugate or negative view; "
                  "resolve_conj() / resolve_neg() it first");
      v = without_math_bits(v.toTensor());
    } else if (v.isTensorList() && !written) {
      auto list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k)
        if (has_math_bits(list[k])) list.set(k, without_math_bits(list[k]));
    }
  }
}

}  // namespace

at::Tensor without_math_bits(const at::Tensor& t) {
  at::Tensor r = t;
  // Each step clears its bit (_neg_view and conj toggle it on the same
  // buffer), then applies its math to the plain values.
  if (r.is_neg()) r = at::neg(r._neg_view());
  if (r.is_conj()) r = at::conj_physical(r.conj());
  return r;
}

void capture_or_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet,
                         torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const OpInfo& info = op_info(op);
  resolve_math_bits(schema, stack, info.name);
  c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, schema.arguments().size());
  if (auto why = unrecordable(info, schema, args)) return cpu_fallback(op, stack, *why);

  metrics::ScopedTimer timer(metrics::counters().trace_ns);
  check_devices(args, info.name);
  MetaResult scratch;
  const MetaResult* shapes = shapes_of(op, info.name, args, scratch);
  if (!shapes) return cpu_fallback(op, stack, "no meta kernel");
  for (const at::Tensor& t : shapes->fresh)
    if (t.defined()) to_ir(t.scalar_type());  // names unsupported dtypes

  // Outside the trace lock: the location takes the GIL.
  std::shared_ptr<const std::string> origin;
  if (info.may_fail) {
    static metrics::Named located("trace.located_ops");
    ++located;
    origin = std::make_shared<const std::string>(python_location());
  }
  TraceLock lock;
  Recorded rec = record(info, schema, args, shapes->fresh, shapes->mutated);
  rec.node->origin = std::move(origin);
  metrics::counters().ops_traced++;
  std::vector<at::Tensor> results = bind_outputs(rec, *shapes, conv_channels_last(info, args), args);
  push_returns(schema, args, results, shapes->return_sizes, stack);
}

}  // namespace disc
