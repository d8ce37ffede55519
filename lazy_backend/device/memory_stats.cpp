#include "lazy_backend/device/memory_stats.h"

#include <algorithm>
#include <mutex>

#include "lazy_backend/device/host_cache.h"

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

}  // namespace

void count_held_bytes(size_t nbytes, bool held) {
  const StatType pool = nbytes <= kSmallBlock ? StatType::SMALL_POOL : StatType::LARGE_POOL;
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto* bytes : {&g_stats.allocated_bytes, &g_stats.active_bytes, &g_stats.requested_bytes})
    update(*bytes, pool, nbytes, held);
  for (auto* count : {&g_stats.allocation, &g_stats.active}) update(*count, pool, 1, held);
}

DeviceStats memory_stats() {
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

void reset_accumulated_memory_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  for_each_stat(g_stats, [](c10::CachingAllocator::Stat& s) { s.reset_accumulated(); });
  g_stats.num_alloc_retries = g_stats.num_ooms = 0;
}

void reset_peak_memory_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  for_each_stat(g_stats, [](c10::CachingAllocator::Stat& s) { s.reset_peak(); });
}

}  // namespace disc
