#include "lazy_backend/device/host_cache.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "lazy_backend/base/metrics.h"
#include "runtime/options.h"

namespace disc {

namespace {

constexpr size_t kMinCached = 16 << 10;  // malloc's own bins serve smaller ones well
constexpr size_t kAlignment = 64;        // a cache line, as ATen's CPU allocator gives

thread_local bool t_active = false;

// Sizes round up to one of 8 classes per power of two (at most 12.5% unused),
// so a block freed by one step fits the same request in the next even when
// a batch size changes a little.
size_t size_class(size_t n) {
  const size_t power = size_t{1} << (63 - __builtin_clzll(n));
  const size_t step = power / 8;
  return (n + step - 1) / step * step;
}

// The memory this process may use: the machine's, or its cgroup's limit
// when lower (a container).
int64_t usable_memory_bytes() {
  int64_t bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  std::ifstream limit("/sys/fs/cgroup/memory.max");  // cgroup v2; "max": none
  int64_t cgroup = 0;
  if (limit >> cgroup && cgroup > 0) bytes = std::min(bytes, cgroup);
  return bytes;
}

// DISC_HOST_CACHE_MB: "auto", a quarter of usable_memory_bytes() (as a
// CUDA caching allocator keeps what a step freed, within the device's
// memory: a GPT-2-small training step frees ~3 GB of blocks it asks for
// again, and with a 1 GiB cap 146 of its 524 large allocations a step
// missed and page-faulted fresh memory in), or a whole number of MiB.
int64_t idle_cap_bytes() {
  static const int64_t cap = [] {
    const int64_t mib = options::integer(options::Id::kHostCacheMb);  // -1: auto
    return mib < 0 ? usable_memory_bytes() / 4 : mib << 20;
  }();
  return cap;
}

void give_back(void* p);

class HostCache final : public c10::Allocator {
 public:
  explicit HostCache(c10::Allocator* next) : next_(next) {}

  c10::DataPtr allocate(size_t n) override {
    if (!t_active || n < kMinCached || idle_cap_bytes() == 0) return next_->allocate(n);
    const size_t size = size_class(n);
    void* p = take(size);
    static metrics::Named hits("host_cache.hits"), misses("host_cache.misses");
    ++(p ? hits : misses);
    if (!p) p = fresh(size);
    // Out of memory even without the idle blocks: the previous allocator
    // raises its own error (ATen's "can't allocate memory: you tried to
    // allocate N bytes"), the one users and tests know.
    if (!p) return next_->allocate(n);
    return {p, p, &give_back, c10::Device(c10::DeviceType::CPU)};
  }

  // raw_allocate() pairs this with allocate(): blocks from either source.
  c10::DeleterFnPtr raw_deleter() const override { return &give_back; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  void put(void* p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(p);
      if (it != live_.end()) {
        const size_t size = it->second;
        live_.erase(it);
        in_use_ -= size;
        keep_idle(p, size);
        return;
      }
    }
    next_->raw_deleter()(p);  // not ours: the previous allocator's block
  }

  HostCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    HostCacheStats s;
    s.idle_bytes = idle_;
    s.in_use_bytes = in_use_;
    s.idle_blocks = static_cast<int64_t>(by_age_.size());
    s.idle_cap_bytes = idle_cap_bytes();
    return s;
  }

  int64_t release() {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t freed = idle_;
    for (const Idle& b : by_age_) std::free(b.p);
    by_age_.clear();
    by_size_.clear();
    idle_ = 0;
    return freed;
  }

 private:
  struct Idle {
    void* p;
    size_t size;
  };
  using Age = std::list<Idle>::iterator;

  // The smallest idle block of at least `size` bytes and at most a quarter
  // more: with changing sequence lengths a request rarely meets its exact
  // class again, and a slightly larger block beats fresh pages.
  void* take(size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_size_.lower_bound(size);
    if (it == by_size_.end() || it->first > size + size / 4) return nullptr;
    const Age age = it->second.back();  // the most recently freed of its class
    it->second.pop_back();
    if (it->second.empty()) by_size_.erase(it);
    void* p = age->p;
    const size_t block = age->size;
    by_age_.erase(age);
    idle_ -= block;
    live_[p] = block;
    in_use_ += block;
    return p;
  }

  // Keeps a freed block, making room under the cap by freeing the blocks
  // idle the longest: those of sizes the program no longer asks for (a
  // length it saw once) go first, and the blocks the next step needs stay.
  void keep_idle(void* p, size_t size) {
    if (static_cast<int64_t>(size) > idle_cap_bytes()) return std::free(p);
    while (idle_ + static_cast<int64_t>(size) > idle_cap_bytes()) free_oldest();
    by_age_.push_back({p, size});
    by_size_[size].push_back(std::prev(by_age_.end()));
    idle_ += size;
  }

  void free_oldest() {
    const Idle oldest = by_age_.front();
    auto cls = by_size_.find(oldest.size);
    cls->second.pop_front();  // a class's blocks are kept oldest first
    if (cls->second.empty()) by_size_.erase(cls);
    by_age_.pop_front();
    idle_ -= oldest.size;
    std::free(oldest.p);
  }

  void* fresh(size_t size) {
    void* p = std::aligned_alloc(kAlignment, size);
    if (!p) {  // idle blocks of other sizes may be what stands in the way
      release();
      p = std::aligned_alloc(kAlignment, size);
    }
    if (!p) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = size;
    in_use_ += size;
    return p;
  }

  c10::Allocator* next_;
  std::mutex mu_;
  std::list<Idle> by_age_;                     // idle blocks, least recently freed first
  std::map<size_t, std::deque<Age>> by_size_;  // the same blocks by size class
  std::unordered_map<void*, size_t> live_;     // handed out: its class
  int64_t idle_ = 0, in_use_ = 0;
};

// Never destroyed: tensors freed during interpreter shutdown still call in.
HostCache* g_cache = nullptr;

void give_back(void* p) { g_cache->put(p); }

}  // namespace

void install_host_cache() {
  if (g_cache) return;
  g_cache = new HostCache(c10::GetCPUAllocator());
  c10::SetCPUAllocator(g_cache, /*priority=*/1);
}

ExecutorAllocations::ExecutorAllocations() : previous_(t_active) { t_active = true; }
ExecutorAllocations::~ExecutorAllocations() { t_active = previous_; }

HostCacheStats host_cache_stats() { return g_cache ? g_cache->stats() : HostCacheStats{}; }

int64_t empty_host_cache() { return g_cache ? g_cache->release() : 0; }

}  // namespace disc
