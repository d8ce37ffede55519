// Element-wise ops as MLIR lines, in torch's order of operations (so that
// results round as CPU eager's do wherever the ops are exact in f32).
// Values are f32; the vector variant uses the same ops on vector<16xf32>.
#include "lowering/codegen/cpu/value_emitter.h"

#include <stdexcept>

namespace disc::lowering {

const char* memref_elem(ir::DType t) {
  switch (t) {
    case ir::DType::kFloat32: return "f32";
    case ir::DType::kFloat64: return "f64";
    case ir::DType::kInt64: return "i64";
    case ir::DType::kInt32: return "i32";
    case ir::DType::kBFloat16: return "i16";
    case ir::DType::kFloat16: return "i16";
    case ir::DType::kBool: return "i8";  // 0 or 1, as torch stores them
    default: return nullptr;
  }
}

ValueEmitter::ValueEmitter(const Program& p, std::ostringstream& out, std::string indent,
                           uint32_t width,
                           const std::vector<std::pair<uint32_t, uint32_t>>& runtime,
                           uint32_t& counter)
    : p_(p), out_(out), indent_(std::move(indent)), width_(width), runtime_(runtime),
      counter_(counter) {
  type_ = vec("f32");
}

std::string ValueEmitter::vec(const std::string& elem) const {
  return width_ ? "vector<" + std::to_string(width_) + "x" + elem + ">" : elem;
}

std::string ValueEmitter::fresh() { return "%v" + std::to_string(counter_++); }

std::string ValueEmitter::line(const std::string& s) {
  out_ << indent_ << s << "\n";
  return s;
}

std::string ValueEmitter::constant(double v) {
  std::string name = fresh();
  std::ostringstream os;
  os.precision(17);
  os << std::scientific << v;
  line(name + " = arith.constant " + (width_ ? "dense<" + os.str() + ">" : os.str()) + " : " +
       type_);
  return name;
}

std::string ValueEmitter::splat(const std::string& scalar_f32) {
  if (!width_) return scalar_f32;
  std::string r = fresh();
  line(r + " = vector.broadcast " + scalar_f32 + " : f32 to " + type_);
  return r;
}

std::string ValueEmitter::binary(const char* op, const std::string& a, const std::string& b) {
  std::string r = fresh();
  line(r + " = " + op + " " + a + ", " + b + " : " + type_);
  return r;
}

std::string ValueEmitter::unary(const char* op, const std::string& a) {
  std::string r = fresh();
  line(r + " = " + op + " " + a + " : " + type_);
  return r;
}

std::string ValueEmitter::cmp(const char* pred, const std::string& a, const std::string& b) {
  std::string r = fresh();
  line(r + " = arith.cmpf " + pred + ", " + a + ", " + b + " : " + type_);
  return r;
}

std::string ValueEmitter::select(const std::string& cond, const std::string& a,
                                 const std::string& b) {
  std::string r = fresh();
  line(r + " = arith.select " + cond + ", " + a + ", " + b + " : " +
       (width_ ? vec("i1") + ", " : "") + type_);
  return r;
}

std::string ValueEmitter::exp(const std::string& a) {
  std::string r = fresh();
  line(r + " = func.call @disc_expf" + (width_ ? std::to_string(width_) : "") + "(" + a +
       ") : (" + type_ + ") -> " + type_);
  return r;
}

std::string ValueEmitter::max_nan(const std::string& a, const std::string& b) {
  // (arith.maxf has no LLVM lowering in MLIR 15.) a if a > b or a is NaN,
  // else b -- which is NaN when b is.
  std::string c = fresh();
  line(c + " = arith.ori " + cmp("ogt", a, b) + ", " + cmp("uno", a, a) + " : " + vec("i1"));
  return select(c, a, b);
}

std::string ValueEmitter::to_f32(const std::string& raw, ir::DType t) {
  const std::string elem = memref_elem(t);
  if (elem == "f32") return raw;
  if (t == ir::DType::kBFloat16) return bf16_to_f32(raw);
  if (t == ir::DType::kFloat16) return f16_to_f32(raw);
  std::string v = fresh();
  if (elem == "f64")
    line(v + " = arith.truncf " + raw + " : " + vec("f64") + " to " + type_);
  else
    line(v + " = arith.sitofp " + raw + " : " + vec(elem) + " to " + type_);
  return v;
}

std::string ValueEmitter::scalar_operand_f32(uint32_t op, size_t k) {
  const ir::Node& n = *p_.ops[op].node;
  const ir::Operand& o = n.operands.at(k);
  if (o.kind == ir::Operand::Kind::kRuntime) {
    size_t slot = 0;
    for (; slot < runtime_.size(); ++slot)
      if (runtime_[slot] == std::make_pair(op, o.first)) break;
    if (slot == runtime_.size()) throw std::logic_error("runtime scalar not in the kernel's list");
    std::string idx = fresh(), d = fresh(), f = fresh();
    line(idx + " = arith.constant " + std::to_string(slot) + " : index");
    line(d + " = memref.load %scalars[" + idx + "] : memref<?xf64>");
    line(f + " = arith.truncf " + d + " : f64 to f32");
    return f;
  }
  if (o.kind != ir::Operand::Kind::kAttr) throw std::logic_error("operand is not a scalar");
  const ir::Attr& a = n.attrs.at(o.first);
  const double v = a.kind == ir::Attr::Kind::kScalarDouble || a.kind == ir::Attr::Kind::kDouble
                       ? a.d
                       : static_cast<double>(a.i);
  std::string name = fresh();
  std::ostringstream os;
  os.precision(17);
  os << std::scientific << v;
  line(name + " = arith.constant " + os.str() + " : f32");
  return name;
}

std::string ValueEmitter::scalar_operand(uint32_t op, size_t k) {
  return splat(scalar_operand_f32(op, k));
}

bool ValueEmitter::operand_is_one(uint32_t op, size_t k) const {
  const ir::Node& n = *p_.ops[op].node;
  const ir::Attr* attr = n.attr_operand(k);
  if (!attr) return false;
  const ir::Attr& a = *attr;
  return (a.kind == ir::Attr::Kind::kScalarInt && a.i == 1) ||
         (a.kind == ir::Attr::Kind::kScalarDouble && a.d == 1.0);
}

// A bf16 or f16 op's number operands (is_number) as ATen's CPU kernel
// reads them: rounded to the op's dtype, or (mul's and div's second
// operand) in f32.
std::vector<std::string> ValueEmitter::numbers_as_aten_reads(uint32_t op,
                                                             std::vector<std::string> in) {
  const ProgramOp& o = p_.ops[op];
  const ir::DType out = o.node->outputs[0].dtype;
  const std::optional<ScalarRounding> rounding = scalar_operand_rounding(op_of(o.node->op));
  if (!reduced_float(p_, out) || !rounding) return in;
  for (size_t k = 0; k < in.size() && k < o.inputs.size(); ++k) {
    const ir::TensorType& t = p_.ops[o.inputs[k].node].node->outputs[o.inputs[k].index];
    if (t.dtype == out || !is_number(t)) continue;
    if (*rounding == ScalarRounding::kAlways || k == 0) in[k] = round_to(out, in[k]);
  }
  return in;
}

std::string ValueEmitter::compute(uint32_t op, const std::vector<std::string>& inputs) {
  const std::vector<std::string> in = numbers_as_aten_reads(op, inputs);
  switch (op_of(p_.ops[op].node->op)) {
    // out= variants (SGD's momentum buffer: mul.out(m, buf, out=buf)): the
    // kernel writes a new buffer that then stands for `out`.
    case Op::kAdd:
    case Op::kAddInplace:
    case Op::kAddOut: return add_scaled(op, "arith.addf", in);
    case Op::kSub:
    case Op::kSubInplace: return add_scaled(op, "arith.subf", in);
    case Op::kMul:
    case Op::kMulInplace:
    case Op::kMulOut: return binary("arith.mulf", in.at(0), in.at(1));
    case Op::kMulScalar:
    case Op::kMulScalarInplace: return binary("arith.mulf", in.at(0), scalar_operand(op, 1));
    case Op::kNativeDropoutBackward: {  // grad * mask * scale, as ATen
      std::string scale = scalar_operand(op, 2);
      return binary("arith.mulf", binary("arith.mulf", in.at(0), in.at(1)), scale);
    }
    case Op::kAddScalar: {  // self + alpha * other, other a Scalar
      std::string b = scalar_operand(op, 1);
      if (!operand_is_one(op, 2)) b = binary("arith.mulf", scalar_operand(op, 2), b);
      return binary("arith.addf", in.at(0), b);
    }
    case Op::kDiv:
    case Op::kDivInplace: return binary("arith.divf", in.at(0), in.at(1));
    case Op::kNeg: return unary("arith.negf", in.at(0));
    case Op::kExpand: return in.at(0);  // right-aligned broadcast: the loads do it
    // Casts: the value in f32; a bf16 or f16 result is rounded like every such op's.
    case Op::kToCopy: return in.at(0);
    case Op::kCopy: return in.at(1);  // src, broadcast to self's shape and dtype
    case Op::kZeros: return constant(0.0);
    case Op::kZeroInplace: return constant(0.0);
    case Op::kFillInplace: return scalar_operand(op, 1);
    case Op::kSqrt:
    case Op::kSqrtInplace: return unary("math.sqrt", in.at(0));
    case Op::kAddcmulInplace: return addc(op, "arith.mulf", in);
    case Op::kAddcdivInplace: return addc(op, "arith.divf", in);
    case Op::kLerpInplace: return lerp(op, in);
    case Op::kExp: return exp(in.at(0));
    case Op::kLog: return unary("math.log", in.at(0));
    case Op::kRsqrt: return binary("arith.divf", constant(1.0), unary("math.sqrt", in.at(0)));
    case Op::kTanh: return unary("math.tanh", in.at(0));
    case Op::kAbs: return unary("math.abs", in.at(0));
    case Op::kSigmoid: {
      std::string e = exp(unary("arith.negf", in.at(0)));
      return binary("arith.divf", constant(1.0), binary("arith.addf", constant(1.0), e));
    }
    case Op::kRelu: {
      // NaN stays NaN, as in torch: "unordered or greater than zero".
      std::string zero = constant(0.0);
      return select(cmp("ugt", in.at(0), zero), in.at(0), zero);
    }
    case Op::kWhere: {  // condition (a bool, read as 0 or 1) ? self : other
      std::string zero = constant(0.0);
      return select(cmp("one", in.at(0), zero), in.at(1), in.at(2));
    }
    case Op::kGelu: return gelu(op, in.at(0));
    case Op::kGeluBackward: return gelu_backward(op, in.at(0), in.at(1));
    case Op::kPowScalar: return pow(op, in.at(0));
    case Op::kTanhBackward: return tanh_backward(in.at(0), in.at(1));
    case Op::kThresholdBackward: {  // grad where self > threshold, else 0
      // Named first: argument order is unspecified, and the kernel text
      // (a cache key) must not depend on the compiler.
      std::string t = scalar_operand(op, 2);
      return select(cmp("ole", in.at(1), t), constant(0.0), in.at(0));
    }
    default: break;
  }
  throw std::logic_error("an op without codegen (ops.def) reached the emitter: " +
                         ir::op_name(p_.ops[op].node->op));
}

// GELU as ATen's vectorized CPU kernel writes it: exact (erf, MLIR's
// polynomial) or approximate="tanh".
bool ValueEmitter::gelu_is_tanh(uint32_t op, size_t operand) const {
  const ir::Attr* a = p_.ops[op].node->attr_operand(operand);
  if (!a || a->kind != ir::Attr::Kind::kString || (a->s != "none" && a->s != "tanh"))
    throw std::logic_error("gelu: approximate is neither 'none' nor 'tanh'");
  return a->s == "tanh";
}

namespace {
constexpr double kSqrtHalf = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kKappa = 0.044715;
}  // namespace

// Each line below emits one op: values are named before use, since the
// order of a call's arguments is unspecified and the kernel text (a cache
// key) must not depend on the compiler.

// tanh(sqrt(2 / pi) * (x + 0.044715 x^3))
std::string ValueEmitter::gelu_tanh_inner(const std::string& x) {
  std::string square = binary("arith.mulf", x, x);
  std::string cube = binary("arith.mulf", square, x);
  std::string kappa = constant(kKappa);
  std::string inner = binary("arith.addf", x, binary("arith.mulf", kappa, cube));
  std::string beta = constant(kSqrt2OverPi);
  return unary("math.tanh", binary("arith.mulf", beta, inner));
}

// x * 0.5 * (1 + erf(x / sqrt(2))), or with tanh(...) for the erf.
std::string ValueEmitter::gelu(uint32_t op, const std::string& x) {
  std::string t;
  if (gelu_is_tanh(op, 1)) {
    t = gelu_tanh_inner(x);
  } else {
    std::string alpha = constant(kSqrtHalf);
    t = unary("math.erf", binary("arith.mulf", x, alpha));
  }
  std::string half = constant(0.5);
  std::string half_x = binary("arith.mulf", x, half);
  std::string one = constant(1.0);
  return binary("arith.mulf", half_x, binary("arith.addf", one, t));
}

// dy * (cdf(x) + x * pdf(x)); for tanh, dy * (0.5 (1 + t) + 0.5 x (1 - t^2)
// sqrt(2 / pi) (1 + 3 * 0.044715 x^2)).
std::string ValueEmitter::gelu_backward(uint32_t op, const std::string& dy, const std::string& x) {
  std::string one = constant(1.0), half = constant(0.5);
  std::string derivative;
  if (gelu_is_tanh(op, 2)) {
    std::string t = gelu_tanh_inner(x);
    std::string left_d = binary("arith.mulf", half, binary("arith.addf", one, t));
    std::string tanh_d = binary("arith.subf", one, binary("arith.mulf", t, t));
    std::string square = binary("arith.mulf", x, x);
    std::string three_kappa = constant(3.0 * kKappa);
    std::string slope = binary("arith.addf", one, binary("arith.mulf", three_kappa, square));
    std::string beta = constant(kSqrt2OverPi);
    std::string inner_d = binary("arith.mulf", beta, slope);
    std::string half_x = binary("arith.mulf", half, x);
    std::string right_d = binary("arith.mulf", binary("arith.mulf", half_x, tanh_d), inner_d);
    derivative = binary("arith.addf", left_d, right_d);
  } else {
    std::string alpha = constant(kSqrtHalf);
    std::string erf = unary("math.erf", binary("arith.mulf", x, alpha));
    std::string cdf = binary("arith.mulf", half, binary("arith.addf", one, erf));
    std::string minus_half = constant(-0.5);
    std::string square = binary("arith.mulf", x, x);
    std::string e = exp(binary("arith.mulf", square, minus_half));
    std::string norm = constant(kInvSqrt2Pi);
    std::string pdf = binary("arith.mulf", norm, e);
    derivative = binary("arith.addf", cdf, binary("arith.mulf", x, pdf));
  }
  return binary("arith.mulf", dy, derivative);
}

// x ** e for the exponents emitted_pow_exponent allows, as ATen's CPU
// kernel computes them: 0 fills 1 and 1 copies (even NaN), 2 and 3
// multiply left to right, -1 divides 1.
std::string ValueEmitter::pow(uint32_t op, const std::string& x) {
  const std::optional<double> e = emitted_pow_exponent(p_, op);
  if (!e) throw std::logic_error("pow: an exponent generated kernels do not compute");
  if (*e == 0.0) return constant(1.0);
  if (*e == 1.0) return x;
  if (*e == 2.0) return binary("arith.mulf", x, x);
  if (*e == 3.0) return binary("arith.mulf", binary("arith.mulf", x, x), x);
  return binary("arith.divf", constant(1.0), x);  // -1
}

// grad * (1 - y * y), y = tanh(x), as ATen's vectorized CPU kernel computes
// it: 1 - y * y as one fused multiply-add, then the product.
std::string ValueEmitter::tanh_backward(const std::string& grad, const std::string& y) {
  std::string one = constant(1.0);
  std::string minus_y = unary("arith.negf", y);
  std::string d = fresh();
  line(d + " = math.fma " + minus_y + ", " + y + ", " + one + " : " + type_);
  return binary("arith.mulf", grad, d);
}

// self +/- alpha * other, alpha left out when it is 1.
std::string ValueEmitter::add_scaled(uint32_t op, const char* arith, const std::vector<std::string>& in) {
  if (operand_is_one(op, 2)) return binary(arith, in.at(0), in.at(1));
  std::string alpha = scalar_operand(op, 2);
  const ir::DType out = p_.ops[op].node->outputs[0].dtype;
  if (reduced_float(p_, out)) {
    // ATen's CPU kernel rounds alpha to the tensors' dtype and, in its
    // vector body, computes fma(other, +-alpha, self) in f32, rounded once.
    // (Its scalar tail rounds alpha * other first: up to one ulp apart.)
    if (std::string(arith) == "arith.subf") alpha = unary("arith.negf", alpha);
    std::string r = fresh();
    line(r + " = math.fma " + in.at(1) + ", " + round_to(out, alpha) + ", " + in.at(0) + " : " + type_);
    return r;
  }
  return binary(arith, in.at(0), binary("arith.mulf", alpha, in.at(1)));
}

// self + value * (t1 op t2), torch's order of operations (addcmul_, addcdiv_).
std::string ValueEmitter::addc(uint32_t op, const char* arith, const std::vector<std::string>& in) {
  std::string t = binary(arith, in.at(1), in.at(2));
  if (!operand_is_one(op, 3)) t = binary("arith.mulf", scalar_operand(op, 3), t);
  return binary("arith.addf", in.at(0), t);
}

// As torch: w < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w).
std::string ValueEmitter::lerp(uint32_t op, const std::vector<std::string>& in) {
  std::string self = in.at(0), end = in.at(1), w = scalar_operand(op, 2);
  std::string diff = binary("arith.subf", end, self);
  std::string low = binary("arith.addf", self, binary("arith.mulf", w, diff));
  std::string high = binary("arith.subf", end,
                            binary("arith.mulf", diff, binary("arith.subf", constant(1.0), w)));
  return select(cmp("olt", w, constant(0.5)), low, high);
}

}  // namespace disc::lowering
