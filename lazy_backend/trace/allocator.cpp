#include "lazy_backend/trace/allocator.h"

#include <unistd.h>

#include "lazy_backend/base/graph_worker.h"
#include "lazy_backend/device/device_index.h"
#include "lazy_backend/device/host_cache.h"
#include "lazy_backend/device/memory_stats.h"
#include "lazy_backend/trace/lazy_storage.h"

namespace disc {

namespace {

using c10::CachingDeviceAllocator::DeviceStats;

void delete_storage(void* ctx) { delete static_cast<LazyStorage*>(ctx); }

int64_t host_bytes(int name) {
  const long pages = sysconf(name), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

// Hands out storages without memory (see lazy_storage.h); the statistics
// are LazyStorage's, counted in memory_stats.h.
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
    return memory_stats();
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device_index(device, "reset_accumulated_memory_stats");
    reset_accumulated_memory_stats();
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device_index(device, "reset_peak_memory_stats");
    reset_peak_memory_stats();
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

}  // namespace disc
