// A cache of freed host buffers for the compiled executor, the CPU analogue
// of CUDA's caching allocator. A training step allocates the same large
// buffers every time (activations, grads, GEMM outputs); through malloc each
// of them grows the heap, page-faults its pages in, and is trimmed back to
// the OS when the step frees it -- about a tenth of a small MLP step. Blocks
// cached here are handed out again instead: one of the request's size class,
// else the smallest at most a quarter larger. Over the cap of idle bytes,
// the blocks idle longest are freed first.
//
// Only allocations made while an ExecutorAllocations scope is alive on the
// calling thread (the compiled executor's run) and of at least 16 KiB come
// from the cache; every other CPU allocation goes to the allocator that was
// installed before, unchanged. Freed blocks return to the cache wherever
// they are freed, up to DISC_HOST_CACHE_MB of idle bytes (docs/env_vars.md;
// by default a quarter of the memory the process may use).
#pragma once
#include <cstdint>

namespace disc {

// Installs the cache as ATen's CPU allocator (it wraps the previous one).
// Called once when the extension loads.
void install_host_cache();

// While alive, large CPU allocations on this thread are served by the cache.
class ExecutorAllocations {
 public:
  ExecutorAllocations();
  ~ExecutorAllocations();
  ExecutorAllocations(const ExecutorAllocations&) = delete;
  ExecutorAllocations& operator=(const ExecutorAllocations&) = delete;

 private:
  bool previous_;
};

struct HostCacheStats {
  int64_t idle_bytes = 0;    // cached, free for reuse
  int64_t in_use_bytes = 0;  // handed out, not yet freed
  int64_t idle_blocks = 0;
  int64_t idle_cap_bytes = 0;  // the most idle bytes kept (DISC_HOST_CACHE_MB)
};
HostCacheStats host_cache_stats();

// Returns every idle block to the system; the bytes released.
int64_t empty_host_cache();

}  // namespace disc
