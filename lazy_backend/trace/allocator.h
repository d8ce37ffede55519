// The allocator of disc storages: PyTorch's accelerator allocator interface
// (c10::DeviceAllocator), so torch.accelerator.memory_allocated,
// memory_stats, reset_peak_memory_stats and empty_cache work on disc.
//
// A disc storage holds no bytes of its own (lazy_storage.h): its value is
// pending in the trace or held by a data leaf after a sync. What the
// statistics count is what a user would measure: a storage holds its bytes
// from the moment its value first exists as data -- it was copied in from
// the host, or the sync that computes it handed its graph to the worker --
// until the storage is freed. A tensor that is only traced holds nothing.
// "Reserved" adds the idle blocks of the executor's host buffer cache
// (host_cache.h), which empty_cache() returns to the system.
#pragma once
#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>

namespace disc {

c10::DeviceAllocator* disc_allocator();

}  // namespace disc
