#include "lazy_backend/device/allocator.h"

#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "lazy_backend/device/device_index.h"
#include "lazy_backend/exec/host_cache.h"
#include "lazy_backend/sync/graph_worker.h"
#include "lazy_backend/trace/lazy_storage.h"

namespace disc {

namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingAllocator::StatType;

// CUDA's split: blocks up to 1 MiB come from its small pool. Kept so that
// per-pool figures mean what they mean on CUDA.
constexpr size_t kSmallBlock = size_t{1} << 20;

std::mutex g_mu;
DeviceStats g_stats;  // guarded by g_mu; reserved_bytes is filled per query

void update(c10::CachingAllocator::StatArray& stats, StatType pool, size_t amount, bool increase) {
  for (StatType t : {StatType::AGGREGATE, pool}) {
    auto& s = stats[static_cast<size_t>(t)];
    increase ? s.increase(amount) : s.decrease(amount);
  }
}

void for_each_stat(DeviceStats& s, void (*f)(c10::CachingAllocator::Stat&)) {
  for (auto* array : {&s.allocation, &s.segment, &s.active, &s.allocated_bytes,
                      &s.reserved_bytes, &s.active_bytes, &s.requested_bytes})
    for (auto& stat : *array) f(stat);
}

void delete_storage(void* ctx) { delete static_cast<LazyStorage*>(ctx); }

int64_t host_bytes(int name) {
  const long pages = sysconf(name), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

// Hands out storages without memory (see lazy_storage.h); the statistics
// are LazyStorage's, counted through count_held_bytes.
struct DiscAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    auto* s = new LazyStorage(nbytes);
    // The data pointer is a unique, never-dereferenced handle: Python code
    // (torch.save, storage dedup) treats a null pointer as an invalid storage.
    return {s, s, &delete_storage, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "disc: storages hold no bytes to copy; use tensor.copy_()");
  }

  bool initialized() override { return true; }

  void emptyCache(c10::MempoolId_t) override {
    // Blocks a running graph still uses stay: wait for it, without the GIL
    // (its Python ops may need it) and open to Ctrl-C.
    GilReleased released;
    wait_for_worker_interruptibly();
    empty_host_cache();
  }

  // One execution order for every stream (device.cpp): a buffer is never
  // reused while work queued before its free still reads it.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device_index(device, "memory_stats");
    const HostCacheStats cache = host_cache_stats();
    std::lock_guard<std::mutex> lock(g_mu);
    DeviceStats out = g_stats;
    auto& reserved = out.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)];
    const auto& allocated = out.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)];
    // Reserved is never below allocated; its peak is seen by queries only.
    reserved.current = allocated.current + cache.idle_bytes;
    reserved.peak = std::max({reserved.current, allocated.peak, reserved.peak});
    g_stats.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)].peak = reserved.peak;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device_index(device, "reset_accumulated_memory_stats");
    std::lock_guard<std::mutex> lock(g_mu);
    for_each_stat(g_stats, [](c10::CachingAllocator::Stat& s) { s.reset_accumulated(); });
    g_stats.num_alloc_retries = g_stats.num_ooms = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device_index(device, "reset_peak_memory_stats");
    std::lock_guard<std::mutex> lock(g_mu);
    for_each_stat(g_stats, [](c10::CachingAllocator::Stat& s) { s.reset_peak(); });
  }

  // Disc's buffers live in host memory: the host's free and total bytes.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device_index(device, "mem_get_info");
    return {static_cast<size_t>(host_bytes(_SC_AVPHYS_PAGES)),
            static_cast<size_t>(host_bytes(_SC_PHYS_PAGES))};
  }
};

DiscAllocator g_allocator;

}  // namespace

c10::DeviceAllocator* disc_allocator() { return &g_allocator; }

void count_held_bytes(size_t nbytes, bool held) {
  const StatType pool = nbytes <= kSmallBlock ? StatType::SMALL_POOL : StatType::LARGE_POOL;
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto* bytes : {&g_stats.allocated_bytes, &g_stats.active_bytes, &g_stats.requested_bytes})
    update(*bytes, pool, nbytes, held);
  for (auto* count : {&g_stats.allocation, &g_stats.active}) update(*count, pool, 1, held);
}

}  // namespace disc
