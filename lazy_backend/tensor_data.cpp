#include "lazy_backend/tensor_data.h"

#include <c10/util/Exception.h>

namespace disc {

ir::DType to_ir(at::ScalarType t) {
  switch (t) {
    case at::kBool: return ir::DType::kBool;
    case at::kByte: return ir::DType::kUInt8;
    case at::kChar: return ir::DType::kInt8;
    case at::kShort: return ir::DType::kInt16;
    case at::kInt: return ir::DType::kInt32;
    case at::kLong: return ir::DType::kInt64;
    case at::kHalf: return ir::DType::kFloat16;
    case at::kBFloat16: return ir::DType::kBFloat16;
    case at::kFloat: return ir::DType::kFloat32;
    case at::kDouble: return ir::DType::kFloat64;
    case at::kComplexFloat: return ir::DType::kComplex64;
    case at::kComplexDouble: return ir::DType::kComplex128;
    default:
      TORCH_CHECK(false, "disc: dtype ", t, " is not supported on the disc device");
  }
}

at::ScalarType to_aten(ir::DType t) {
  switch (t) {
    case ir::DType::kBool: return at::kBool;
    case ir::DType::kUInt8: return at::kByte;
    case ir::DType::kInt8: return at::kChar;
    case ir::DType::kInt16: return at::kShort;
    case ir::DType::kInt32: return at::kInt;
    case ir::DType::kInt64: return at::kLong;
    case ir::DType::kFloat16: return at::kHalf;
    case ir::DType::kBFloat16: return at::kBFloat16;
    case ir::DType::kFloat32: return at::kFloat;
    case ir::DType::kFloat64: return at::kDouble;
    case ir::DType::kComplex64: return at::kComplexFloat;
    case ir::DType::kComplex128: return at::kComplexDouble;
  }
  TORCH_CHECK(false, "disc: bad ir dtype");
}

ir::TensorType type_of(const at::Tensor& t) {
  if (!t.defined()) return {ir::DType::kFloat32, {}, /*undefined=*/true};
  return {to_ir(t.scalar_type()), t.sizes().vec()};
}

ir::Value make_data(at::Tensor cpu) {
  ir::TensorType type = type_of(cpu);
  return {ir::make_data_node(std::move(type), std::make_shared<TensorData>(std::move(cpu))), 0};
}

const at::Tensor* data_of(const ir::Node& n) {
  if (!n.payload) return nullptr;
  return &static_cast<const TensorData*>(n.payload.get())->tensor;
}

}  // namespace disc
