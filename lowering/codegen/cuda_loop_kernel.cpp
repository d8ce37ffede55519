#include "lowering/codegen/cuda_loop_kernel.h"

#include <cstdio>
#include <map>
#include <sstream>
#include <stdexcept>

#include "lowering/codegen/fused_kernel.h"
#include "lowering/ir/hash.h"
#include "lowering/ops.h"

namespace disc::lowering {

namespace {

// The C type a buffer of dtype `t` holds, or nullptr.
const char* c_type(ir::DType t) {
  switch (t) {
    case ir::DType::kFloat32: return "float";
    case ir::DType::kFloat64: return "double";
    case ir::DType::kInt64: return "long long";
    case ir::DType::kInt32: return "int";
    case ir::DType::kBool: return "unsigned char";  // 0 or 1, as torch stores them
    case ir::DType::kBFloat16: return "unsigned short";  // the bits
    default: return nullptr;
  }
}

// bf16 as ATen converts: widening is a shift; narrowing rounds to nearest,
// ties to even, and a NaN becomes the quiet NaN 0x7FC0 (bfloat16.cpp).
constexpr const char* kPrelude = R"(static __device__ __forceinline__ float disc_bf16_to_f32(unsigned short b) {
  return __uint_as_float(static_cast<unsigned>(b) << 16);
}
static __device__ __forceinline__ unsigned short disc_f32_to_bf16(float f) {
  if (f != f) return 0x7FC0;
  const unsigned u = __float_as_uint(f);
  return static_cast<unsigned short>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static __device__ __forceinline__ float disc_round_bf16(float f) {
  return disc_bf16_to_f32(disc_f32_to_bf16(f));
}
)";

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kKappa = 0.044715;

std::string literal(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9ef", v);  // exact for every f32
  return buf;
}

// One kernel's text: every value a named const float, one op per line, so
// the text (a cache key) does not depend on the compiler's argument order.
class Emitter {
 public:
  Emitter(const Program& p, const KernelInterface& k) : p_(p), k_(k) {}

  std::string body();

 private:
  std::string let(const std::string& expr) {
    const std::string name = "v" + std::to_string(next_++);
    out_ << "    const float " << name << " = " << expr << ";\n";
    return name;
  }
  std::string load(size_t k);
  std::string scalar(uint32_t op, size_t operand);
  bool is_one(uint32_t op, size_t operand) const;
  bool gelu_tanh(uint32_t op, size_t operand) const;
  std::string compute(uint32_t op, const std::vector<std::string>& in);
  std::string gelu_tanh_inner(const std::string& x);
  std::string gelu(uint32_t op, const std::string& x);
  std::string gelu_backward(uint32_t op, const std::string& dy, const std::string& x);

  const Program& p_;
  const KernelInterface& k_;
  std::ostringstream out_;
  uint32_t next_ = 0;
  std::map<size_t, std::string> loaded_;
};

std::string Emitter::load(size_t k) {
  auto it = loaded_.find(k);
  if (it != loaded_.end()) return it->second;
  const std::string raw = "in" + std::to_string(k) + "[o" + std::to_string(k) + "]";
  const ir::DType t = k_.input_dtypes[k];
  const std::string v = t == ir::DType::kFloat32    ? let(raw)
                        : t == ir::DType::kBFloat16 ? let("disc_bf16_to_f32(" + raw + ")")
                                                    : let("static_cast<float>(" + raw + ")");
  return loaded_[k] = v;
}

// Operand `operand` of `op`, a Scalar: a runtime argument (its slot in
// `scalars`) or a constant of the graph.
std::string Emitter::scalar(uint32_t op, size_t operand) {
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

bool Emitter::is_one(uint32_t op, size_t operand) const {
  const ir::Attr* a = p_.ops[op].node->attr_operand(operand);
  return a && ((a->kind == ir::Attr::Kind::kScalarInt && a->i == 1) ||
               (a->kind == ir::Attr::Kind::kScalarDouble && a->d == 1.0));
}

bool Emitter::gelu_tanh(uint32_t op, size_t operand) const {
  const ir::Attr* a = p_.ops[op].node->attr_operand(operand);
  if (!a || a->kind != ir::Attr::Kind::kString || (a->s != "none" && a->s != "tanh"))
    throw std::logic_error("gelu: approximate is neither 'none' nor 'tanh'");
  return a->s == "tanh";
}

std::string Emitter::gelu_tanh_inner(const std::string& x) {
  const std::string cube = let(x + " * " + x + " * " + x);
  const std::string inner = let(x + " + " + literal(kKappa) + " * " + cube);
  return let("tanhf(" + literal(kSqrt2OverPi) + " * " + inner + ")");
}

std::string Emitter::gelu(uint32_t op, const std::string& x) {
  const std::string t = gelu_tanh(op, 1) ? gelu_tanh_inner(x)
                                          : let("erff(" + x + " * " + literal(kSqrtHalf) + ")");
  return let(x + " * 0.5f * (1.0f + " + t + ")");
}

std::string Emitter::gelu_backward(uint32_t op, const std::string& dy, const std::string& x) {
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
std::string Emitter::compute(uint32_t op, const std::vector<std::string>& in) {
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

// The grid-stride loop: each element's index split into the space's dims,
// each input's offset from its strides, the group computed, its outputs
// stored at the element's place in the contiguous result.
std::string Emitter::body() {
  const uint32_t R = k_.rank;
  const size_t n_in = k_.inputs.size();
  out_ << "  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;\n"
       << "  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;"
       << " i < total; i += step) {\n"
       << "    long long rest = i;\n";
  for (size_t k = 0; k < n_in; ++k) out_ << "    long long o" << k << " = 0;\n";
  for (uint32_t a = R; a-- > 0;) {
    out_ << "    {\n      const long long at = " << (a == 0 ? "rest" : "rest % sizes[" + std::to_string(a) + "]")
         << ";\n";
    if (a > 0) out_ << "      rest /= sizes[" << a << "];\n";
    for (size_t k = 0; k < n_in; ++k)
      out_ << "      o" << k << " += at * strides[" << k * R + a << "];\n";
    out_ << "    }\n";
  }
  const FusionGroup& group = p_.groups[k_.group];
  std::map<uint32_t, std::string> value;
  std::map<std::pair<uint32_t, uint32_t>, size_t> input_of;
  for (size_t k = 0; k < n_in; ++k) input_of[{k_.inputs[k].node, k_.inputs[k].index}] = k;
  for (uint32_t op : group.ops) {
    std::vector<std::string> ins;
    for (const ir::GraphRef& r : p_.ops[op].inputs)
      ins.push_back(value.count(r.node) ? value.at(r.node) : load(input_of.at({r.node, r.index})));
    value[op] = compute(op, ins);
    if (p_.ops[op].node->outputs[0].dtype == ir::DType::kBFloat16)
      value[op] = let("disc_round_bf16(" + value[op] + ")");
  }
  for (size_t k = 0; k < k_.outputs.size(); ++k) {
    const KernelOutput& o = k_.outputs[k];
    const bool bf16 = p_.ops[o.op].node->outputs[o.index].dtype == ir::DType::kBFloat16;
    out_ << "    out" << k << "[i] = " << (bf16 ? "disc_f32_to_bf16(" + value.at(o.op) + ")" : value.at(o.op))
         << ";\n";
  }
  out_ << "  }\n";
  return out_.str();
}

}  // namespace

std::optional<CudaKernel> emit_cuda_loop_kernel(const Program& p, uint32_t g, std::string* why) {
  if (p.groups.at(g).kind != FusionKind::kLoop) {
    if (why) *why = "a kInput or kStitch group: the CUDA codegen makes kLoop kernels only";
    return std::nullopt;
  }
  std::optional<KernelInterface> k = plan_fused_kernel(p, g, why);
  if (!k) return std::nullopt;
  std::ostringstream params;
  for (size_t i = 0; i < k->inputs.size(); ++i) {
    const char* t = c_type(k->input_dtypes[i]);
    if (!t) {
      if (why) *why = "input dtype " + std::string(ir::dtype_name(k->input_dtypes[i]));
      return std::nullopt;
    }
    params << "const " << t << "* __restrict__ in" << i << ", ";
  }
  for (size_t i = 0; i < k->outputs.size(); ++i) {
    const KernelOutput& o = k->outputs[i];
    const bool bf16 = p.ops[o.op].node->outputs[o.index].dtype == ir::DType::kBFloat16;
    params << (bf16 ? "unsigned short" : "float") << "* __restrict__ out" << i << ", ";
  }
  params << "const long long* __restrict__ sizes, const long long* __restrict__ strides, "
            "const double* __restrict__ scalars, long long total";
  const std::string body = Emitter(p, *k).body();
  char name[40];
  std::snprintf(name, sizeof name, "disc_loop_%016llx",
                static_cast<unsigned long long>(ir::hash_string(params.str() + body)));
  CudaKernel out;
  static_cast<KernelInterface&>(out) = *k;
  out.name = name;
  out.source = std::string(kPrelude) + "\nextern \"C\" __global__ void " + name + "(" + params.str() +
               ") {\n" + body + "}\n";
  return out;
}

}  // namespace disc::lowering
