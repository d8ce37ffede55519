// Element types of the trace IR. Mirrors the subset of torch dtypes the
// backend accepts; lowering/ never sees at::ScalarType (no torch headers here).
#pragma once
#include <cstdint>
#include <string_view>

namespace disc::ir {

enum class DType : uint8_t {
  kBool, kUInt8, kInt8, kInt16, kInt32, kInt64,
  kFloat16, kBFloat16, kFloat32, kFloat64, kComplex64, kComplex128,
};

std::string_view dtype_name(DType t);

}  // namespace disc::ir
