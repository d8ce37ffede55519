// The figures behind torch.accelerator.memory_stats on disc, kept as CUDA's
// caching allocator keeps them (c10::CachingDeviceAllocator::DeviceStats).
// A disc storage holds its bytes from the moment its value first exists as
// data until the storage is freed (see accelerator/allocator.h); LazyStorage
// reports those moments here. "Reserved" adds the idle blocks of the host
// buffer cache (host_cache.h).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>

namespace disc {

// Called by LazyStorage: a storage's bytes begin (+) or stop (-) to count.
void count_held_bytes(size_t nbytes, bool held);

// The statistics now, reserved bytes included.
c10::CachingDeviceAllocator::DeviceStats memory_stats();
void reset_accumulated_memory_stats();
void reset_peak_memory_stats();

}  // namespace disc
