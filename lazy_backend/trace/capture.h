// Op capture: one boxed kernel records any ATen op on disc tensors as a trace
// node. Output shapes and dtypes come from the op's Meta kernel, so the trace
// raises the same errors eager mode would, at the line that caused them.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/core/Tensor.h>

#include <string>

namespace disc {

// The PrivateUse1 kernel of every op without a dedicated one: records the op,
// or runs it through the CPU fallback when it cannot be recorded.
void capture_or_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                         torch::jit::Stack* stack);

// Runs op on CPU copies of its disc arguments (after a sync) and copies the
// results back; counted per op in metrics as fallback.<op>.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                  const std::string& reason);

// Registers the capture kernel for every structured ATen op (see
// capture_registrations.cpp); returns how many. Idempotent.
size_t register_structured_captures();

// t's values without its conjugate and negative bits: a conj() or
// _neg_view() view shares its base's buffer and marks the math in its key
// set, which the trace (values, not tensors) would lose. Applies the math
// as recorded ops; t itself when it has neither bit.
at::Tensor without_math_bits(const at::Tensor& t);

}  // namespace disc
