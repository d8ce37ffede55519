// What the compiler knows about each traced op: its class decides how shape
// constraints propagate through it and which fusion it can join.
#pragma once
#include <cstdint>
#include <string_view>

namespace disc::lowering {

enum class OpClass : uint8_t {
  kData,         // a graph parameter
  kElementwise,  // pointwise with broadcasting (add, mul, relu, where, ...)
  kBroadcast,    // views that only add or repeat dims (expand, unsqueeze)
  kReduction,    // sum / mean / amax over some dims
  kStitch,       // reduction -> elementwise -> reduction in one op (softmax, layer norm)
  kLibrary,      // GEMM and convolution: library calls (oneDNN / cuBLAS)
  kLayout,       // data movement the codegen treats as its own kernel (transpose, reshape)
  kOpaque,       // anything else: run by the reference kernel
};

OpClass classify(uint32_t op);
std::string_view op_class_name(OpClass c);

}  // namespace disc::lowering
