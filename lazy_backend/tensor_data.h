// Bridges torch tensors and the torch-free trace IR: dtype mapping and the
// payload that data leaves hold (a CPU tensor, the reference executor's
// device memory).
#pragma once
#include <ATen/Tensor.h>

#include "lowering/ir/node.h"

namespace disc {

struct TensorData : ir::Payload {
  explicit TensorData(at::Tensor t) : tensor(std::move(t)) {}
  at::Tensor tensor;
};

ir::DType to_ir(at::ScalarType t);  // throws, naming the dtype, if unsupported
at::ScalarType to_aten(ir::DType t);
ir::TensorType type_of(const at::Tensor& t);

// A leaf node holding `cpu` (which must not be mutated afterwards).
ir::Value make_data(at::Tensor cpu);
// The tensor a data leaf holds, or nullptr for other nodes.
const at::Tensor* data_of(const ir::Node& n);

}  // namespace disc
