#include "lazy_backend/shape_cache.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

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

void add_tensor(ShapeKey& k, const at::Tensor& t) {
  if (!t.defined()) {
    k.push_back(-2);
    return;
  }
  k.push_back(static_cast<int64_t>(t.scalar_type()) * 4 +
              static_cast<int64_t>(t.device().type() == c10::kCPU) * 2 +
              static_cast<int64_t>(t.unsafeGetTensorImpl()->is_wrapped_number()));
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

}  // namespace

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
