// The kept casts (see cast_cache.h): a map from (parameter buffer, dtype)
// to the cast, checked against the buffer's identity and version.
#include "lazy_backend/exec/cast_cache.h"

#include <map>
#include <mutex>
#include <utility>

#include "lazy_backend/base/metrics.h"
#include "runtime/options.h"

namespace disc {

namespace {

struct Entry {
  c10::weak_intrusive_ptr<c10::TensorImpl> param;
  int64_t version;
  at::Tensor cast;
};

using Key = std::pair<const c10::TensorImpl*, at::ScalarType>;

struct Cache {
  std::mutex mu;
  std::map<Key, Entry> entries;
};

Cache& cache() {
  static Cache c;
  return c;
}

int64_t version_of(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->version_counter().current_version();
}

// The parameter is gone, or was written since the cast was made.
bool stale(const Entry& e) {
  c10::intrusive_ptr<c10::TensorImpl> live = e.param.lock();
  return !live || live->version_counter().current_version() != e.version;
}

// Dead and outdated entries, dropped when a cast is kept (not on every
// lookup: a forward looks up each of its weights).
void prune(Cache& c) {
  std::erase_if(c.entries, [](const auto& kv) { return stale(kv.second); });
}

}  // namespace

bool cast_cache_enabled() { return options::flag(options::Id::kCastCache); }

std::optional<at::Tensor> kept_cast(const at::Tensor& param, at::ScalarType dtype) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.entries.find({param.unsafeGetTensorImpl(), dtype});
  // The same address may be a new buffer: the weak reference says which.
  if (it == c.entries.end() || it->second.param._unsafe_get_target() != param.unsafeGetTensorImpl() ||
      it->second.version != version_of(param)) {
    metrics::bump("cast_cache.misses");
    return std::nullopt;
  }
  metrics::bump("cast_cache.hits");
  return it->second.cast;
}

void keep_cast(const at::Tensor& param, const at::Tensor& cast) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  prune(c);
  c.entries.insert_or_assign(
      Key{param.unsafeGetTensorImpl(), cast.scalar_type()},
      Entry{c10::weak_intrusive_ptr<c10::TensorImpl>(param.getIntrusivePtr()), version_of(param), cast});
}

void clear_kept_casts() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.entries.clear();
}

size_t kept_casts_size() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  prune(c);
  return c.entries.size();
}

}  // namespace disc
