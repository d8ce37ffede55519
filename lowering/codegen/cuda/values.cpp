// A CUDA kernel's values: input loads at the current element or column,
// scalars (runtime arguments or constants), each op's formula -- the CPU
// kernels' (value_emitter.cpp), op for op -- the group's element-wise
// producers, and output stores.
#include <cstdio>
#include <stdexcept>

#include "lowering/codegen/common/group_analysis.h"
#include "lowering/codegen/cuda/emitter.h"
#include "lowering/ops.h"

namespace disc::lowering {

namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kKappa = 0.044715;

std::string literal(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9ef", v);  // exact for every f32
  return buf;
}

}  // namespace

std::string CudaEmitter::load(size_t k) {
  auto it = loaded_.find(k);
  if (it != loaded_.end()) return it->second;
  // Loop kernels: the element's offset; row kernels: the row's offset plus
  // the column's along the last dim.
  const std::string K = std::to_string(k);
  const std::string raw = row_ ? "in" + K + "[o" + K + " + j * strides[" +
                                     std::to_string(k * k_.rank + k_.rank - 1) + "]]"
                               : "in" + K + "[o" + K + "]";
  const ir::DType t = k_.input_dtypes[k];
  const std::string v = t == ir::DType::kFloat32    ? let(raw)
                        : t == ir::DType::kBFloat16 ? let("disc_bf16_to_f32(" + raw + ")")
                                                    : let("static_cast<float>(" + raw + ")");
  return loaded_[k] = v;
}

// Operand `operand` of `op`, a Scalar: a runtime argument (its slot in
// `scalars`) or a constant of the graph.
std::string CudaEmitter::scalar(uint32_t op, size_t operand) {
  const ir::Node& n = *p_.ops[op].node;
  const ir::Operand& o = n.operands.at(operand);
  if (o.kind == ir::Operand::Kind::kRuntime) {
    for (size_t slot = 0; slot < k_.runtime.size(); ++slot)
      if (k_.runtime[slot] == std::make_pair(op, o.first))
        return let("static_cast<float>(scalars[" + std::to_string(slot) + "])");
    throw std::logic_error("runtime scalar not in the kernel's list");
  }
  const ir::Attr* a = n.attr_operand(operand);
  if (!a) throw std::logic_error("operand is not a scalar");
  const bool floating = a->kind == ir::Attr::Kind::kScalarDouble || a->kind == ir::Attr::Kind::kDouble;
  return literal(floating ? a->d : static_cast<double>(a->i));
}

bool CudaEmitter::is_one(uint32_t op, size_t operand) const {
  const ir::Attr* a = p_.ops[op].node->attr_operand(operand);
  return a && ((a->kind == ir::Attr::Kind::kScalarInt && a->i == 1) ||
               (a->kind == ir::Attr::Kind::kScalarDouble && a->d == 1.0));
}

bool CudaEmitter::gelu_tanh(uint32_t op, size_t operand) const {
  const ir::Attr* a = p_.ops[op].node->attr_operand(operand);
  if (!a || a->kind != ir::Attr::Kind::kString || (a->s != "none" && a->s != "tanh"))
    throw std::logic_error("gelu: approximate is neither 'none' nor 'tanh'");
  return a->s == "tanh";
}

std::string CudaEmitter::gelu_tanh_inner(const std::string& x) {
  const std::string cube = let(x + " * " + x + " * " + x);
  const std::string inner = let(x + " + " + literal(kKappa) + " * " + cube);
  return let("tanhf(" + literal(kSqrt2OverPi) + " * " + inner + ")");
}

std::string CudaEmitter::gelu(uint32_t op, const std::string& x) {
  const std::string t = gelu_tanh(op, 1) ? gelu_tanh_inner(x)
                                          : let("erff(" + x + " * " + literal(kSqrtHalf) + ")");
  return let(x + " * 0.5f * (1.0f + " + t + ")");
}

std::string CudaEmitter::gelu_backward(uint32_t op, const std::string& dy, const std::string& x) {
  std::string derivative;
  if (gelu_tanh(op, 2)) {
    const std::string t = gelu_tanh_inner(x);
    const std::string left = let("0.5f * (1.0f + " + t + ")");
    const std::string slope = let(literal(kSqrt2OverPi) + " * (1.0f + " + literal(3.0 * kKappa) +
                                  " * " + x + " * " + x + ")");
    const std::string right = let("0.5f * " + x + " * (1.0f - " + t + " * " + t + ") * " + slope);
    derivative = let(left + " + " + right);
  } else {
    const std::string cdf = let("0.5f * (1.0f + erff(" + x + " * " + literal(kSqrtHalf) + "))");
    const std::string pdf = let(literal(kInvSqrt2Pi) + " * expf(" + x + " * " + x + " * -0.5f)");
    derivative = let(cdf + " + " + x + " * " + pdf);
  }
  return let(dy + " * " + derivative);
}

// One traced op's value from its inputs' values: value_emitter.cpp's
// formulas, op for op.
std::string CudaEmitter::compute(uint32_t op, const std::vector<std::string>& in) {
  auto scaled = [&](size_t operand, const std::string& v) {
    return is_one(op, operand) ? v : let(scalar(op, operand) + " * " + v);
  };
  switch (op_of(p_.ops[op].node->op)) {
    case Op::kAdd: case Op::kAddInplace: case Op::kAddOut:
      return let(in.at(0) + " + " + scaled(2, in.at(1)));
    case Op::kSub: case Op::kSubInplace:
      return let(in.at(0) + " - " + scaled(2, in.at(1)));
    case Op::kMul: case Op::kMulInplace: case Op::kMulOut:
      return let(in.at(0) + " * " + in.at(1));
    case Op::kMulScalar: case Op::kMulScalarInplace:
      return let(in.at(0) + " * " + scalar(op, 1));
    case Op::kNativeDropoutBackward:  // grad * mask * scale, as ATen
      return let(in.at(0) + " * " + in.at(1) + " * " + scalar(op, 2));
    case Op::kAddScalar:
      return let(in.at(0) + " + " + scaled(2, scalar(op, 1)));
    case Op::kDiv: case Op::kDivInplace: return let(in.at(0) + " / " + in.at(1));
    case Op::kNeg: return let("-" + in.at(0));
    case Op::kExpand: case Op::kToCopy: return in.at(0);  // the loads broadcast and convert
    case Op::kCopy: return in.at(1);
    case Op::kZeros: case Op::kZeroInplace: return let("0.0f");
    case Op::kFillInplace: return let(scalar(op, 1));
    case Op::kSqrt: case Op::kSqrtInplace: return let("sqrtf(" + in.at(0) + ")");
    case Op::kRsqrt: return let("1.0f / sqrtf(" + in.at(0) + ")");
    case Op::kAddcmulInplace: case Op::kAddcdivInplace: {  // self + value * (t1 op t2)
      const char* sign = op_of(p_.ops[op].node->op) == Op::kAddcmulInplace ? " * " : " / ";
      const std::string t = let(in.at(1) + sign + in.at(2));
      return let(in.at(0) + " + " + scaled(3, t));
    }
    case Op::kLerpInplace: {  // as torch, exact at both ends
      const std::string w = let(scalar(op, 2)), diff = let(in.at(1) + " - " + in.at(0));
      return let(w + " < 0.5f ? " + in.at(0) + " + " + w + " * " + diff + " : " + in.at(1) + " - " +
                 diff + " * (1.0f - " + w + ")");
    }
    case Op::kExp: return let("expf(" + in.at(0) + ")");
    case Op::kLog: return let("logf(" + in.at(0) + ")");
    case Op::kTanh: return let("tanhf(" + in.at(0) + ")");
    case Op::kAbs: return let("fabsf(" + in.at(0) + ")");
    case Op::kSigmoid: return let("1.0f / (1.0f + expf(-" + in.at(0) + "))");
    case Op::kRelu:  // NaN stays NaN: only x > 0 passes, as the CPU kernel's select
      return let("(" + in.at(0) + " > 0.0f || " + in.at(0) + " != " + in.at(0) + ") ? " + in.at(0) +
                 " : 0.0f");
    case Op::kWhere: return let(in.at(0) + " != 0.0f ? " + in.at(1) + " : " + in.at(2));
    case Op::kGelu: return gelu(op, in.at(0));
    case Op::kGeluBackward: return gelu_backward(op, in.at(0), in.at(1));
    case Op::kThresholdBackward:  // grad where self > threshold, else 0
      return let(in.at(1) + " <= " + scalar(op, 2) + " ? 0.0f : " + in.at(0));
    default: break;
  }
  throw std::logic_error("an op without CUDA codegen reached the emitter: " +
                         ir::op_name(p_.ops[op].node->op));
}

void CudaEmitter::offsets(const char* index, uint32_t dims, const char* indent) {
  const uint32_t R = k_.rank;
  out_ << indent << "long long rest = " << index << ";\n";
  for (size_t k = 0; k < k_.inputs.size(); ++k) out_ << indent << "long long o" << k << " = 0;\n";
  for (uint32_t a = dims; a-- > 0;) {
    out_ << indent << "{\n" << indent << "  const long long at = "
         << (a == 0 ? "rest" : "rest % sizes[" + std::to_string(a) + "]") << ";\n";
    if (a > 0) out_ << indent << "  rest /= sizes[" << a << "];\n";
    for (size_t k = 0; k < k_.inputs.size(); ++k)
      out_ << indent << "  o" << k << " += at * strides[" << k * R + a << "];\n";
    out_ << indent << "}\n";
  }
}

size_t CudaEmitter::slot_of(uint32_t op, uint32_t index) const {
  for (size_t k = 0; k < k_.outputs.size(); ++k)
    if (k_.outputs[k].op == op && k_.outputs[k].index == index) return k;
  return k_.outputs.size();
}

void CudaEmitter::store(size_t slot, const std::string& index, const std::string& value) {
  const KernelOutput& o = k_.outputs[slot];
  const bool bf16 = output_dtype(p_, o) == ir::DType::kBFloat16;
  out_ << indent_ << "out" << slot << "[" << index << "] = "
       << (bf16 ? "disc_f32_to_bf16(" + value + ")" : value) << ";\n";
}

std::vector<std::string> CudaEmitter::producers(bool store_them) {
  loaded_.clear();
  const FusionGroup& group = p_.groups[k_.group];
  std::map<uint32_t, std::string> value;
  std::map<std::pair<uint32_t, uint32_t>, size_t> input_of;
  for (size_t k = 0; k < k_.inputs.size(); ++k) input_of[{k_.inputs[k].node, k_.inputs[k].index}] = k;
  auto of = [&](const ir::GraphRef& r) {
    return value.count(r.node) ? value.at(r.node) : load(input_of.at({r.node, r.index}));
  };
  for (uint32_t op : group.ops) {
    if (row_ && op == row_op()) break;
    std::vector<std::string> ins;
    for (const ir::GraphRef& r : p_.ops[op].inputs) ins.push_back(of(r));
    value[op] = compute(op, ins);
    if (p_.ops[op].node->outputs[0].dtype == ir::DType::kBFloat16)
      value[op] = let("disc_round_bf16(" + value[op] + ")");
    const size_t slot = slot_of(op, 0);
    if (store_them && slot < k_.outputs.size()) store(slot, row_ ? "row * n + j" : "i", value[op]);
  }
  std::vector<std::string> row_inputs;
  if (row_)
    for (const ir::GraphRef& r : p_.ops[row_op()].inputs) row_inputs.push_back(of(r));
  return row_inputs;
}

}  // namespace disc::lowering
