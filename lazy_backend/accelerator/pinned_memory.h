// Pinned host memory for the disc device: what tensor.pin_memory() and
// DataLoader(pin_memory=True) allocate once torch_disc is the accelerator.
// Disc buffers are host memory, so page-locking would buy nothing: pinned
// tensors are ordinary CPU allocations that this allocator remembers, so
// that is_pinned() says true for them (and only them), as on CUDA.
#pragma once
#include <c10/core/Allocator.h>

namespace disc {

c10::Allocator* pinned_memory_allocator();
// Whether `data` is the start of a live allocation of that allocator.
bool is_pinned_ptr(const void* data);

}  // namespace disc
