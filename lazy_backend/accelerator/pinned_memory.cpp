#include "lazy_backend/accelerator/pinned_memory.h"

#include <c10/core/impl/alloc_cpu.h>

#include <mutex>
#include <unordered_set>

namespace disc {

namespace {

std::mutex& pinned_mutex() {
  static std::mutex m;
  return m;
}

std::unordered_set<const void*>& pinned_ptrs() {
  static auto* ptrs = new std::unordered_set<const void*>();  // outlives static tensors
  return *ptrs;
}

void free_pinned(void* p) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex());
    pinned_ptrs().erase(p);
  }
  c10::free_cpu(p);
}

struct PinnedMemoryAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> lock(pinned_mutex());
      pinned_ptrs().insert(p);
    }
    return {p, p, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

c10::Allocator* pinned_memory_allocator() {
  static PinnedMemoryAllocator allocator;
  return &allocator;
}

bool is_pinned_ptr(const void* data) {
  std::lock_guard<std::mutex> lock(pinned_mutex());
  return pinned_ptrs().count(data) != 0;
}

}  // namespace disc
