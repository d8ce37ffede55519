#include "lazy_backend/trace/shape_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "lazy_backend/trace/aten_ops.h"
#include "lazy_backend/trace/lazy_storage.h"
#include "lowering/ir/hash.h"

namespace disc {

namespace {

struct KeyHash {
  size_t operator()(const ShapeKey& k) const {
    uint64_t h = 0;
    for (int64_t v : k) h = ir::hash_mix(h, static_cast<uint64_t>(v));
    return h;
  }
};

std::mutex g_mu;
std::unordered_map<ShapeKey, MetaResult, KeyHash>& cache() {
  static auto* c = new std::unordered_map<ShapeKey, MetaResult, KeyHash>();
  return *c;
}
constexpr size_t kMaxEntries = 1 << 16;

// dtype, device and wrapped-ness of a defined tensor, in one key entry.
int64_t tensor_code(const at::Tensor& t) {
  return static_cast<int64_t>(t.scalar_type()) * 4 +
         static_cast<int64_t>(t.device().type() == c10::kCPU) * 2 +
         static_cast<int64_t>(t.unsafeGetTensorImpl()->is_wrapped_number());
}

void add_tensor(ShapeKey& k, const at::Tensor& t) {
  if (!t.defined()) {
    k.push_back(-2);
    return;
  }
  k.push_back(tensor_code(t));
  k.push_back(t.dim());
  for (int64_t s : t.sizes()) k.push_back(s);
  for (int64_t s : t.strides()) k.push_back(s);
}

int64_t bits(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof(b));
  return b;
}

// Output shapes of these depend on float arguments; for all other ops a float
// only matters by type, and leaving its value out keeps a changing learning
// rate from missing the cache.
bool shape_depends_on_floats(const std::string& name) {
  return name.find("range") != std::string::npos || name.find("linspace") != std::string::npos ||
         name.find("logspace") != std::string::npos;
}

bool add_value(ShapeKey& k, const c10::IValue& v, bool float_values) {
  if (v.isTensor()) {
    add_tensor(k, v.toTensor());
  } else if (v.isTensorList()) {
    k.push_back(-3);
    for (const at::Tensor& t : v.toTensorVector()) add_tensor(k, t);
  } else if (v.isOptionalTensorList()) {
    k.push_back(-4);
    for (const auto& t : v.toOptionalTensorList()) {
      std::optional<at::Tensor> o = t;
      add_tensor(k, o ? *o : at::Tensor());
    }
  } else if (v.isNone()) {
    k.push_back(-5);
  } else if (v.isInt()) {
    k.push_back(-6);
    k.push_back(v.toInt());
  } else if (v.isBool()) {
    k.push_back(-7);
    k.push_back(v.toBool());
  } else if (v.isDouble()) {
    k.push_back(-8);
    if (float_values) k.push_back(bits(v.toDouble()));
  } else if (v.isIntList()) {
    k.push_back(-9);
    for (int64_t e : v.toIntVector()) k.push_back(e);
    k.push_back(-9);
  } else if (v.isDevice()) {
    k.push_back(-10);
    k.push_back(static_cast<int64_t>(v.toDevice().type()));
  } else if (v.isString()) {
    k.push_back(-11);
    k.push_back(static_cast<int64_t>(ir::hash_string(v.toStringRef())));
  } else if (v.isList()) {
    k.push_back(-12);
    for (const c10::IValue& e : v.toListRef())
      if (!add_value(k, e, float_values)) return false;
    k.push_back(-12);
  } else {
    return false;
  }
  return true;
}

bool is_symint(const c10::Argument& arg) {
  c10::TypePtr t = arg.real_type();
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  if (auto list = t->cast<c10::ListType>()) t = list->getElementType();
  return t->kind() == c10::TypeKind::SymIntType;
}

// A key by size pattern: sizes, strides and SymInt arguments become symbols
// (numbered by first appearance, their values in `symbols`); sizes 0 and 1
// and every other argument stay literal.
struct SymbolicKey {
  ShapeKey key;
  std::vector<int64_t> symbols;

  void size(int64_t v) {
    if (v < 2) {
      key.push_back(-20);
      key.push_back(v);
      return;
    }
    auto it = std::find(symbols.begin(), symbols.end(), v);
    key.push_back(-21);
    key.push_back(it - symbols.begin());
    if (it == symbols.end()) symbols.push_back(v);
  }
  void tensor(const at::Tensor& t) {
    if (!t.defined()) {
      key.push_back(-2);
      return;
    }
    key.push_back(tensor_code(t));
    key.push_back(t.dim());
    for (int64_t s : t.sizes()) size(s);
    for (int64_t s : t.strides()) size(s);
    layout_order(t);
  }
  // Symbols keep which sizes and strides are equal but not which is larger,
  // and an output's layout follows the order of its inputs' strides (a
  // permuted input gives a permuted output): so that order joins the key.
  // ATen breaks a tie of nonzero strides by size and ignores broadcast dims.
  void layout_order(const at::Tensor& t) {
    const auto sizes = t.sizes();
    const auto strides = t.strides();
    for (size_t i = 0; i < strides.size(); ++i)
      for (size_t j = i + 1; j < strides.size(); ++j)
        key.push_back(order_code(strides[i], strides[j], sizes[i], sizes[j]));
  }
  static int64_t order_code(int64_t stride_a, int64_t stride_b, int64_t size_a, int64_t size_b) {
    if (stride_a != stride_b) return stride_a < stride_b ? -30 : -31;
    if (stride_a == 0 || size_a == size_b) return -32;
    return size_a < size_b ? -33 : -34;
  }
  bool value(const c10::IValue& v, bool symint) {
    if (v.isTensor()) {
      tensor(v.toTensor());
    } else if (v.isTensorList()) {
      key.push_back(-3);
      for (const at::Tensor& t : v.toTensorVector()) tensor(t);
      key.push_back(-3);
    } else if (v.isOptionalTensorList()) {
      key.push_back(-4);
      for (const auto& t : v.toOptionalTensorList()) {
        std::optional<at::Tensor> o = t;
        tensor(o ? *o : at::Tensor());
      }
      key.push_back(-4);
    } else if (symint && v.isInt()) {
      size(v.toInt());
    } else if (symint && v.isIntList()) {
      key.push_back(-9);
      for (int64_t e : v.toIntVector()) size(e);
      key.push_back(-9);
    } else {
      return add_value(key, v, /*float_values=*/false);
    }
    return true;
  }
};

// An output size: a symbol of the key, or a literal.
struct DimCode {
  bool symbol;
  int64_t v;  // symbol index, or the size
};

struct SymbolicEntry {
  std::vector<c10::ScalarType> dtypes;  // per fresh output; Undefined if none
  std::vector<c10::ScalarType> mutated_dtypes;
  std::vector<std::vector<DimCode>> fresh, mutated;
  // Per fresh and mutated output: its dims in memory order where it is
  // dense in another order than row-major (channels_last), else empty.
  std::vector<std::vector<int64_t>> fresh_order, mutated_order;
  std::vector<size_t> return_sizes;
};

// A meta tensor of `sizes` laid out in `order` (memory_order), or row-major.
at::Tensor meta_tensor(const std::vector<int64_t>& sizes, const std::vector<int64_t>& order,
                       c10::ScalarType dtype) {
  const auto options = at::TensorOptions().dtype(dtype).device(c10::kMeta);
  if (order.empty()) return at::empty(sizes, options);
  std::vector<int64_t> in_order, back(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    in_order.push_back(sizes[order[k]]);
    back[order[k]] = static_cast<int64_t>(k);
  }
  return at::empty(in_order, options).permute(back);
}

std::optional<std::vector<DimCode>> encode(at::IntArrayRef sizes,
                                           const std::vector<int64_t>& symbols) {
  std::vector<DimCode> out;
  for (int64_t s : sizes) {
    if (s < 2) {
      out.push_back({false, s});
      continue;
    }
    auto it = std::find(symbols.begin(), symbols.end(), s);
    if (it == symbols.end()) return std::nullopt;  // computed, not an input dim
    out.push_back({true, it - symbols.begin()});
  }
  return out;
}

std::vector<int64_t> decode(const std::vector<DimCode>& dims, const std::vector<int64_t>& symbols) {
  std::vector<int64_t> out;
  out.reserve(dims.size());
  for (const DimCode& d : dims) out.push_back(d.symbol ? symbols[d.v] : d.v);
  return out;
}

std::optional<SymbolicKey> symbolic_key(const c10::OperatorHandle& op,
                                        c10::ArrayRef<c10::IValue> args) {
  const c10::FunctionSchema& schema = op.schema();
  if (!aten_ops::sizes_from_inputs(schema.name())) return std::nullopt;
  SymbolicKey k;
  k.key.reserve(48);
  k.key.push_back(reinterpret_cast<int64_t>(&schema));
  const auto& formals = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i)
    if (!k.value(args[i], is_symint(formals[i]))) return std::nullopt;
  return k;
}

std::unordered_map<ShapeKey, SymbolicEntry, KeyHash>& symbolic_cache() {
  static auto* c = new std::unordered_map<ShapeKey, SymbolicEntry, KeyHash>();
  return *c;
}

}  // namespace

std::optional<MetaResult> lookup_symbolic_shapes(const c10::OperatorHandle& op,
                                                 c10::ArrayRef<c10::IValue> args) {
  std::optional<SymbolicKey> k = symbolic_key(op, args);
  if (!k) return std::nullopt;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = symbolic_cache().find(k->key);
  if (it == symbolic_cache().end()) return std::nullopt;
  const SymbolicEntry& e = it->second;
  MetaResult r;
  for (size_t j = 0; j < e.fresh.size(); ++j)
    r.fresh.push_back(e.dtypes[j] == c10::ScalarType::Undefined
                          ? at::Tensor()
                          : meta_tensor(decode(e.fresh[j], k->symbols), e.fresh_order[j], e.dtypes[j]));
  for (size_t j = 0; j < e.mutated.size(); ++j)
    r.mutated.push_back(meta_tensor(decode(e.mutated[j], k->symbols), e.mutated_order[j], e.mutated_dtypes[j]));
  r.return_sizes = e.return_sizes;
  return r;
}

void remember_symbolic_shapes(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                              const MetaResult& result) {
  std::optional<SymbolicKey> k = symbolic_key(op, args);
  if (!k) return;
  SymbolicEntry e;
  e.return_sizes = result.return_sizes;
  for (const at::Tensor& t : result.fresh) {
    e.dtypes.push_back(t.defined() ? t.scalar_type() : c10::ScalarType::Undefined);
    auto dims = t.defined() ? encode(t.sizes(), k->symbols) : std::vector<DimCode>{};
    if (!dims) return;
    e.fresh.push_back(std::move(*dims));
    e.fresh_order.push_back(memory_order(t));
  }
  for (const at::Tensor& t : result.mutated) {
    auto dims = encode(t.sizes(), k->symbols);
    if (!dims) return;
    e.mutated.push_back(std::move(*dims));
    e.mutated_order.push_back(memory_order(t));
    e.mutated_dtypes.push_back(t.scalar_type());
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (symbolic_cache().size() >= kMaxEntries) return;
  symbolic_cache().emplace(std::move(k->key), std::move(e));
}

std::optional<ShapeKey> shape_key(const c10::OperatorHandle& op,
                                  c10::ArrayRef<c10::IValue> args) {
  ShapeKey k;
  k.reserve(32);
  k.push_back(reinterpret_cast<int64_t>(&op.schema()));
  const bool float_values = shape_depends_on_floats(op.schema().name());
  for (const c10::IValue& v : args)
    if (!add_value(k, v, float_values)) return std::nullopt;
  return k;
}

const MetaResult* lookup_shapes(const ShapeKey& key) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = cache().find(key);
  return it == cache().end() ? nullptr : &it->second;  // entries are never moved out
}

void remember_shapes(ShapeKey key, MetaResult result) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (cache().size() >= kMaxEntries) return;  // a bound, not an eviction policy
  cache().emplace(std::move(key), std::move(result));
}

}  // namespace disc
