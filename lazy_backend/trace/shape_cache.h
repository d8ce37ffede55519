// Memoized shape inference. Running an op's Meta kernel costs tens of
// microseconds; a training loop asks the same question every step, so the
// answer (output dtypes and sizes) is cached by the op's signature: input
// dtypes, sizes and strides plus its non-tensor arguments.
#pragma once
#include <ATen/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <vector>

namespace disc {

struct MetaResult {
  std::vector<at::Tensor> fresh;    // meta tensors of the op's new outputs
  std::vector<size_t> return_sizes; // tensors per schema return (lists > 1)
  std::vector<at::Tensor> mutated;  // meta tensors of written arguments, after the op
};

using ShapeKey = std::vector<int64_t>;

// nullopt when an argument has no stable signature (then: no caching).
std::optional<ShapeKey> shape_key(const c10::OperatorHandle& op,
                                  c10::ArrayRef<c10::IValue> args);

const MetaResult* lookup_shapes(const ShapeKey& key);
void remember_shapes(ShapeKey key, MetaResult result);

// The same answers by size pattern: for ops whose every output dim is one
// of their input dims or SymInt arguments (element-wise, reductions, GEMMs,
// layer norm, embedding...), an answer learned at one batch size or sequence
// length serves every other with the same pattern of equal sizes, so a new
// length does not run a Meta kernel per op. Other ops (cat, conv, pooling:
// sizes computed from several inputs) answer only by concrete key.
std::optional<MetaResult> lookup_symbolic_shapes(const c10::OperatorHandle& op,
                                                 c10::ArrayRef<c10::IValue> args);
void remember_symbolic_shapes(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                              const MetaResult& result);

}  // namespace disc
