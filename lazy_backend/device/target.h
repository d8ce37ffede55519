// Where disc values live (DISC_TARGET): host memory, or a CUDA GPU's through
// PyTorch's caching allocator, so that ATen's CUDA kernels serve every op the
// executors replay. Transfers place host data on the target and read it back;
// nothing else in the trace cares where values are.
#pragma once
#include <ATen/Tensor.h>
#include <c10/core/Device.h>

namespace disc {

// The device of every value: CPU, or cuda:0. Resolved on first use; with
// DISC_TARGET=cuda and no GPU torch can use, every use throws, naming both.
c10::Device value_device();

// "cpu" or "cuda" (throws as value_device does).
const char* target_name();

// A host tensor's values on the target, contiguous: `host` itself where it
// is that already (the CPU target), else a copy.
at::Tensor on_target(const at::Tensor& host);

// The same, always a copy of its own: the caller may change `host` next.
at::Tensor snapshot_on_target(const at::Tensor& host);

}  // namespace disc
