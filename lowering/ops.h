// What the compiler knows about each traced op, from one table (ops.def):
// its class, which decides how shape constraints relate its dims and which
// fusion it can join, and whether generated kernels compute it. Passes and
// codegen name ops by their Op id, never by string.
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
std::string_view op_class_name(OpClass c);

enum class Op : uint16_t {
  kOther,  // in no row of ops.def (opaque), or a graph parameter
#define DISC_OP(id, name, cls, codegen) id,
#include "lowering/ops.def"
#undef DISC_OP
};

struct OpInfo {
  Op op = Op::kOther;
  OpClass cls = OpClass::kOpaque;
  bool codegen = false;  // generated kernels compute it (ops.def's kEmit or kEmitCpu)
  bool cpu_only = false;  // ... on the CPU target only (kEmitCpu): CUDA runs it on ATen
};

// Whether generated kernels for `target` compute the op (before its dtypes
// and attributes are asked: codegen_takes, group_analysis.h).
inline bool generated_for(const OpInfo& info, bool cuda) { return info.codegen && !(cuda && info.cpu_only); }

// The row of interned op `op` (ir::intern_op); ops in no row are opaque
// (parameters: kData), and no kernel computes them.
const OpInfo& op_info(uint32_t op);
inline Op op_of(uint32_t op) { return op_info(op).op; }
inline OpClass classify(uint32_t op) { return op_info(op).cls; }
// Whether running the op may fail on what its inputs hold (an index out of
// range, a target outside the classes): opaque ops run an ATen kernel that
// may check its data. The ops of the table fail only on shapes and dtypes,
// which the trace has checked already.
inline bool may_fail_on_data(uint32_t op) { return classify(op) == OpClass::kOpaque; }
// A collective: it talks to other processes (ops.def).
inline bool is_collective(uint32_t op) {
  const Op o = op_of(op);
  return o == Op::kAllReduce || o == Op::kBroadcast || o == Op::kAllGather ||
         o == Op::kReduceScatter || o == Op::kScatter || o == Op::kGather || o == Op::kAllToAll;
}
// convolution or convolution_backward.
inline bool is_convolution(uint32_t op) {
  const Op o = op_of(op);
  return o == Op::kConvolution || o == Op::kConvolutionBackward;
}
// Readers that see an NHWC tensor as the same values: element-wise ops
// (ATen's and generated kernels, which take strides), max pooling and
// convolutions. layout-plan keeps activations NHWC through them.
inline bool is_layout_agnostic(uint32_t op) {
  const Op o = op_of(op);
  return o == Op::kMaxPool2d || o == Op::kMaxPool2dBackward || is_convolution(op) ||
         classify(op) == OpClass::kElementwise;
}

}  // namespace disc::lowering
