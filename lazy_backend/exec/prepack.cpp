// The pre-packed weight cache (see prepack.h): a short list scanned per
// GEMM, pruned of dead and outdated weights on every lookup.
#include "lazy_backend/exec/prepack.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "lazy_backend/base/metrics.h"
#include "runtime/options.h"

namespace disc {

namespace {

struct BaseId {
  c10::weak_intrusive_ptr<c10::TensorImpl> impl;
  int64_t version;
  std::vector<int64_t> geometry;  // view's offset in base, sizes, strides
};

struct Entry {
  std::vector<BaseId> bases;
  std::shared_ptr<const runtime::PackedB> packed;
};

std::vector<int64_t> geometry(const WeightView& w) {
  std::vector<int64_t> g{static_cast<int64_t>(static_cast<const char*>(w.view.data_ptr()) -
                                              static_cast<const char*>(w.base.data_ptr()))};
  for (int64_t s : w.view.sizes()) g.push_back(s);
  for (int64_t s : w.view.strides()) g.push_back(s);
  return g;
}

// Dead (the parameter is gone) or outdated (written since it was packed).
bool stale(const BaseId& b) {
  if (b.impl.expired()) return true;
  c10::intrusive_ptr<c10::TensorImpl> live = b.impl.lock();
  return !live || live->version_counter().current_version() != b.version;
}

bool same(const BaseId& b, const WeightView& w) {
  return b.impl._unsafe_get_target() == w.base.unsafeGetTensorImpl() &&
         w.base.unsafeGetTensorImpl()->version_counter().current_version() == b.version &&
         b.geometry == geometry(w);
}

struct Cache {
  std::mutex mu;
  std::vector<Entry> entries;
};
Cache& cache() {
  static Cache c;
  return c;
}

}  // namespace

bool prepack_enabled() { return options::flag(options::Id::kPrepack); }
void set_prepack(bool on) { options::set(options::Id::kPrepack, on ? "1" : "0"); }

std::shared_ptr<const runtime::PackedB> packed_weights(const std::vector<WeightView>& views,
                                                       const runtime::Gemm& g,
                                                       const std::function<at::Tensor()>& make_b) {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    std::erase_if(c.entries, [](const Entry& e) {
      for (const BaseId& b : e.bases)
        if (stale(b)) return true;
      return false;
    });
    for (const Entry& e : c.entries) {
      if (e.bases.size() != views.size()) continue;
      bool match = true;
      for (size_t i = 0; i < views.size() && match; ++i) match = same(e.bases[i], views[i]);
      if (match && runtime::packed_b_fits(*e.packed, g)) {
        metrics::bump("prepack.hits");
        return e.packed;
      }
    }
  }
  // Pack outside the lock: a reorder reads the whole weight.
  at::Tensor b = make_b();
  runtime::Gemm packing = g;
  packing.b = {b.data_ptr<float>(), 0, b.stride(0), b.stride(1)};
  std::shared_ptr<const runtime::PackedB> packed = runtime::pack_b(packing);
  metrics::bump("prepack.misses");
  metrics::bump("onednn.reorders");
  Entry e;
  for (const WeightView& w : views)
    e.bases.push_back({c10::weak_intrusive_ptr<c10::TensorImpl>(
                           c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(w.base.unsafeGetTensorImpl())),
                       w.base.unsafeGetTensorImpl()->version_counter().current_version(), geometry(w)});
  e.packed = packed;
  std::lock_guard<std::mutex> lock(c.mu);
  // The same weight packed for another shape (a new m) replaces its entry.
  std::erase_if(c.entries, [&](const Entry& old) {
    if (old.bases.size() != views.size()) return false;
    for (size_t i = 0; i < views.size(); ++i)
      if (!same(old.bases[i], views[i])) return false;
    return true;
  });
  c.entries.push_back(std::move(e));
  return packed;
}

void clear_packed_weights() {
  std::lock_guard<std::mutex> lock(cache().mu);
  cache().entries.clear();
}

size_t packed_weights_size() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return cache().entries.size();
}

}  // namespace disc
