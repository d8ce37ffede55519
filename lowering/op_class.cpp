#include "lowering/op_class.h"

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "lowering/ir/node.h"

namespace disc::lowering {

namespace {

// One table: adding an op to a class is one line here.
const std::unordered_map<std::string, OpClass>& table() {
  static const auto* t = [] {
    auto* m = new std::unordered_map<std::string, OpClass>();
    for (const char* n : {
             "aten::add.Tensor", "aten::add_.Tensor", "aten::sub.Tensor", "aten::sub_.Tensor",
             "aten::mul.Tensor", "aten::mul_.Tensor", "aten::div.Tensor", "aten::div_.Tensor",
             "aten::add.Scalar", "aten::mul.Scalar", "aten::mul_.Scalar", "aten::div.Scalar",
             "aten::rsub.Scalar",
             "aten::neg", "aten::exp", "aten::log", "aten::sqrt", "aten::rsqrt", "aten::abs",
             "aten::relu", "aten::sigmoid", "aten::tanh", "aten::gelu", "aten::silu",
             "aten::pow.Tensor_Scalar", "aten::threshold_backward", "aten::where.self",
             "aten::maximum", "aten::minimum", "aten::clamp", "aten::clamp_min",
             "aten::addcmul_", "aten::addcdiv_", "aten::lerp_.Scalar", "aten::sqrt_",
             "aten::addcmul", "aten::addcdiv", "aten::lerp.Scalar",
             "aten::sigmoid_backward", "aten::tanh_backward", "aten::gelu_backward",
             "aten::copy", "aten::clone", "aten::_to_copy", "aten::masked_fill.Scalar",
             "aten::eq.Scalar", "aten::ne.Scalar", "aten::gt.Scalar", "aten::lt.Scalar",
             "aten::eq.Tensor", "aten::ge.Scalar", "aten::le.Scalar", "aten::fill_.Scalar",
             "aten::zero_", "aten::zeros", "aten::mul.out", "aten::add.out",
         })
      (*m)[n] = OpClass::kElementwise;
    for (const char* n : {"aten::expand", "aten::unsqueeze"}) (*m)[n] = OpClass::kBroadcast;
    for (const char* n : {"aten::sum", "aten::sum.dim_IntList", "aten::mean.dim",
                          "aten::amax", "aten::mean"})
      (*m)[n] = OpClass::kReduction;
    for (const char* n : {"aten::_softmax", "aten::_log_softmax", "aten::_safe_softmax",
                          "aten::_softmax_backward_data", "aten::_log_softmax_backward_data",
                          "aten::native_layer_norm", "aten::native_layer_norm_backward"})
      (*m)[n] = OpClass::kStitch;
    for (const char* n : {"aten::mm", "aten::addmm", "aten::bmm", "aten::convolution",
                          "aten::convolution_backward"})
      (*m)[n] = OpClass::kLibrary;
    for (const char* n : {"aten::transpose.int", "aten::permute", "aten::reshape",
                          "aten::squeeze.dim", "aten::squeeze.dims", "aten::squeeze",
                          "aten::as_strided", "aten::select.int", "aten::slice.Tensor",
                          "aten::alias"})
      (*m)[n] = OpClass::kLayout;
    return m;
  }();
  return *t;
}

}  // namespace

OpClass classify(uint32_t op) {
  // Ids are dense and few: memoize by id rather than hashing names.
  static std::mutex mu;
  static std::vector<int16_t> memo;
  std::lock_guard<std::mutex> lock(mu);
  if (op < memo.size() && memo[op] >= 0) return static_cast<OpClass>(memo[op]);
  OpClass c = OpClass::kOpaque;
  if (op == ir::data_op()) {
    c = OpClass::kData;
  } else {
    auto it = table().find(ir::op_name(op));
    if (it != table().end()) c = it->second;
  }
  if (op >= memo.size()) memo.resize(op + 1, -1);
  memo[op] = static_cast<int16_t>(c);
  return c;
}

std::string_view op_class_name(OpClass c) {
  switch (c) {
    case OpClass::kData: return "data";
    case OpClass::kElementwise: return "elementwise";
    case OpClass::kBroadcast: return "broadcast";
    case OpClass::kReduction: return "reduction";
    case OpClass::kStitch: return "stitch";
    case OpClass::kLibrary: return "library";
    case OpClass::kLayout: return "layout";
    case OpClass::kOpaque: return "opaque";
  }
  return "?";
}

}  // namespace disc::lowering
