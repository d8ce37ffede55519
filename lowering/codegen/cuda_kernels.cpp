#include "lowering/codegen/cuda_kernels.h"

#include <algorithm>
#include <cstdio>
#include <functional>
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

// A sum / mean / amax over the leading dims: its result (output 0 of the
// row op) is per column. Layer norm's backward sums per column too, but
// its outputs 1 and 2, beside a row op's output 0.
bool reduces_columns(const KernelInterface& k) {
  return std::any_of(k.outputs.begin(), k.outputs.end(), [](const KernelOutput& o) {
    return o.extent == KernelOutput::Extent::kPerColumn && o.index == 0;
  });
}

// bf16 as ATen converts: widening is a shift; narrowing rounds to nearest,
// ties to even, and a NaN becomes the quiet NaN 0x7FC0 (bfloat16.cpp).
constexpr const char* kPrelude =
    R"(static __device__ __forceinline__ float disc_bf16_to_f32(unsigned short b) {
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
static __device__ __forceinline__ float disc_neg_inf() { return __uint_as_float(0xff800000u); }
// max that propagates NaN from either side, as torch's amax.
static __device__ __forceinline__ float disc_max_nan(float a, float b) {
  return (a > b || a != a) ? a : b;
}
// v combined over the block by `f` (disc_add, disc_max), for every thread:
// warp shuffles, then the warps' results through shared memory. blockDim.x
// is a multiple of warpSize.
struct disc_add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct disc_max {
  __device__ float operator()(float a, float b) const { return disc_max_nan(a, b); }
};
template <class F>
static __device__ float disc_block_reduce(float v, float* part, float identity, F f) {
  for (int o = warpSize / 2; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warps = (blockDim.x + warpSize - 1) / warpSize;
  __syncthreads();
  if (threadIdx.x % warpSize == 0) part[threadIdx.x / warpSize] = v;
  __syncthreads();
  float total = identity;
  for (int w = 0; w < warps; ++w) total = f(total, part[w]);
  return total;
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

  std::string loop_body();
  // nullopt (with why) for a row op without CUDA codegen.
  std::optional<std::string> row_body(std::string* why);
  std::string column_body();

 private:
  enum class Acc { kAdd, kMax };
  // Splits index `index` (an element, or a row) over dims [0, dims) into
  // each input's offset o<k>.
  void offsets(const char* index, uint32_t dims, const char* indent);
  // The element-wise producers at the current element; the row op's input
  // values. Producers read outside the group are stored when `store`.
  std::vector<std::string> producers(bool store);
  std::string reduced(Acc a, const std::string& value);
  void store(size_t slot, const std::string& index, const std::string& value);
  size_t slot_of(uint32_t op, uint32_t index) const;
  uint32_t row_op() const { return p_.groups[k_.group].ops.back(); }
  // The row op's operand `operand` as an index among its tensor inputs, or
  // -1 where it is no tensor (an absent weight).
  int tensor_input(size_t operand) const;
  // One pass over the row: `each` writes the body at column j and returns
  // one value per accumulator in `accs` (none: a pass that only stores);
  // returns the accumulators' block totals.
  using Each = std::function<std::vector<std::string>()>;
  std::vector<std::string> pass(const std::vector<Acc>& accs, const Each& each);
  void reduction();
  void softmax();
  void softmax_backward();
  void layer_norm();
  void layer_norm_backward();
  // Writes a per-row value from thread 0.
  void store_row(size_t slot, const std::string& value);
  std::string let(const std::string& expr) {
    const std::string name = "v" + std::to_string(next_++);
    out_ << indent_ << "const float " << name << " = " << expr << ";\n";
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
  bool row_ = false;
  int passes_ = 0;  // over the row, so far
  int scopes_ = 0;  // each pass after the first opens one: its accumulators are its own
  std::string indent_ = "    ";
};

std::string Emitter::load(size_t k) {
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

void Emitter::offsets(const char* index, uint32_t dims, const char* indent) {
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

size_t Emitter::slot_of(uint32_t op, uint32_t index) const {
  for (size_t k = 0; k < k_.outputs.size(); ++k)
    if (k_.outputs[k].op == op && k_.outputs[k].index == index) return k;
  return k_.outputs.size();
}

void Emitter::store(size_t slot, const std::string& index, const std::string& value) {
  const KernelOutput& o = k_.outputs[slot];
  const bool bf16 = p_.ops[o.op].node->outputs[o.index].dtype == ir::DType::kBFloat16;
  out_ << indent_ << "out" << slot << "[" << index << "] = "
       << (bf16 ? "disc_f32_to_bf16(" + value + ")" : value) << ";\n";
}

std::vector<std::string> Emitter::producers(bool store_them) {
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

// The grid-stride loop: each element's index split into the space's dims,
// each input's offset from its strides, the group computed, its outputs
// stored at the element's place in the contiguous result.
std::string Emitter::loop_body() {
  out_ << "  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;\n"
       << "  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;"
       << " i < total; i += step) {\n";
  offsets("i", k_.rank, "    ");
  producers(true);
  out_ << "  }\n";
  return out_.str();
}

// A value reduced over the block: every thread's partial, then the
// block's total (or maximum), which every thread gets.
std::string Emitter::reduced(Acc a, const std::string& value) {
  return let("disc_block_reduce(" + value + ", disc_part, " +
             (a == Acc::kAdd ? "0.0f, disc_add())" : "disc_neg_inf(), disc_max())"));
}

int Emitter::tensor_input(size_t operand) const {
  const ir::Node& node = *p_.ops[row_op()].node;
  return operand < node.operands.size() && node.operands[operand].kind == ir::Operand::Kind::kTensor
             ? static_cast<int>(node.operands[operand].first)
             : -1;
}

std::vector<std::string> Emitter::pass(const std::vector<Acc>& accs, const Each& each) {
  if (passes_++ > 0) {
    out_ << "    {\n";
    ++scopes_;
  }
  for (size_t a = 0; a < accs.size(); ++a)
    out_ << "    float acc" << a << " = " << (accs[a] == Acc::kAdd ? "0.0f" : "disc_neg_inf()") << ";\n";
  out_ << "    for (long long j = threadIdx.x; j < n; j += blockDim.x) {\n";
  indent_ = "      ";
  const std::vector<std::string> v = each();
  for (size_t a = 0; a < accs.size(); ++a) {
    const std::string acc = "acc" + std::to_string(a);
    out_ << indent_ << acc << " = "
         << (accs[a] == Acc::kAdd ? acc + " + " + v.at(a) : "disc_max_nan(" + acc + ", " + v.at(a) + ")")
         << ";\n";
  }
  indent_ = "    ";
  out_ << "    }\n";
  std::vector<std::string> totals;
  for (size_t a = 0; a < accs.size(); ++a) totals.push_back(reduced(accs[a], "acc" + std::to_string(a)));
  return totals;
}

void Emitter::store_row(size_t slot, const std::string& value) {
  out_ << "    if (threadIdx.x == 0) ";
  indent_ = "";
  store(slot, "row", value);
  indent_ = "    ";
}

// One block per row (rows grid-strided): the block's threads stride over
// the row's n columns, each pass a loop over them; a pass's partials are
// combined over the block (warp shuffles, then shared memory), and a
// row's results are written by thread 0. Layer norm's backward sums its
// weight and bias gradients per column into the block's own partial row
// (blockIdx.x of [gridDim.x, n]), cleared first; the launcher adds the
// blocks' rows up, as it adds the CPU kernel's chunks.
std::optional<std::string> Emitter::row_body(std::string* why) {
  row_ = true;
  const Op op = op_of(p_.ops[row_op()].node->op);
  const bool reduces = op == Op::kSumDims || op == Op::kMeanDims || op == Op::kAmax;
  const bool softmaxes = op == Op::kSoftmax || op == Op::kLogSoftmax || op == Op::kSafeSoftmax;
  const bool backward = op == Op::kSoftmaxBackward || op == Op::kLogSoftmaxBackward;
  const bool ln_backward = op == Op::kLayerNormBackward;
  if (!reduces && !softmaxes && !backward && op != Op::kLayerNorm && !ln_backward) {
    if (why) *why = ir::op_name(p_.ops[row_op()].node->op) + ": no CUDA row codegen yet";
    return std::nullopt;
  }
  const uint32_t R = k_.rank;
  out_ << "  __shared__ float disc_part[32];\n"
       << "  const long long n = sizes[" << R - 1 << "];\n";
  for (const KernelOutput& o : k_.outputs)
    if (o.extent == KernelOutput::Extent::kPerColumn)
      out_ << "  for (long long j = threadIdx.x; j < n; j += blockDim.x) out" << slot_of(o.op, o.index)
           << "[blockIdx.x * n + j] = 0.0f;\n";
  out_ << "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n";
  offsets("row", R - 1, "    ");
  if (reduces) reduction();
  else if (softmaxes) softmax();
  else if (backward) softmax_backward();
  else if (ln_backward) layer_norm_backward();
  else layer_norm();
  for (; scopes_ > 0; --scopes_) out_ << "    }\n";
  out_ << "    __syncthreads();\n  }\n";  // disc_part is the next row's
  return out_.str();
}

void Emitter::reduction() {
  const Op op = op_of(p_.ops[row_op()].node->op);
  std::string r = pass({op == Op::kAmax ? Acc::kMax : Acc::kAdd}, [&] {
    return std::vector{producers(true)[0]};
  })[0];
  if (op == Op::kMeanDims) r = let(r + " / static_cast<float>(n)");
  store_row(slot_of(row_op(), 0), r);
}

void Emitter::softmax() {
  const Op op = op_of(p_.ops[row_op()].node->op);
  const size_t out0 = slot_of(row_op(), 0);
  const bool log = op == Op::kLogSoftmax;
  std::string mx = pass({Acc::kMax}, [&] { return std::vector{producers(true)[0]}; })[0];
  std::string masked;
  if (op == Op::kSafeSoftmax) {  // a row all -inf is 0, not NaN
    masked = let(mx + " == disc_neg_inf() ? 1.0f : 0.0f");
    mx = let(masked + " != 0.0f ? 0.0f : " + mx);
  }
  const std::string sum = pass({Acc::kAdd}, [&] {
    const std::string e = let("expf(" + producers(false)[0] + " - " + mx + ")");
    if (!log) store(out0, "row * n + j", e);
    return std::vector{e};
  })[0];
  std::string scale = log ? let("logf(" + sum + ")") : let("1.0f / " + sum);
  if (!masked.empty()) scale = let(masked + " != 0.0f ? 0.0f : " + scale);
  pass({}, [&] {
    if (log) store(out0, "row * n + j", let(producers(false)[0] + " - " + mx + " - " + scale));
    else store(out0, "row * n + j", let("out" + std::to_string(out0) + "[row * n + j] * " + scale));
    return std::vector<std::string>{};
  });
}

// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
void Emitter::softmax_backward() {
  const bool log = op_of(p_.ops[row_op()].node->op) == Op::kLogSoftmaxBackward;
  const std::string sum = pass({Acc::kAdd}, [&] {
    std::vector<std::string> in = producers(true);
    return std::vector{log ? in[0] : let(in[0] + " * " + in[1])};
  })[0];
  pass({}, [&] {
    std::vector<std::string> in = producers(false);
    const std::string r = log ? let(in[0] + " - expf(" + in[1] + ") * " + sum)
                              : let(in[1] + " * (" + in[0] + " - " + sum + ")");
    store(slot_of(row_op(), 0), "row * n + j", r);
    return std::vector<std::string>{};
  });
}

// The mean, the centred sum of squares, then normalize + affine; mean and
// rstd stored per row where the graph reads them.
void Emitter::layer_norm() {
  const int w = tensor_input(2), bias = tensor_input(3);
  const std::string sum = pass({Acc::kAdd}, [&] { return std::vector{producers(true)[0]}; })[0];
  const std::string mean = let(sum + " / static_cast<float>(n)");
  const std::string sq = pass({Acc::kAdd}, [&] {
    const std::string d = let(producers(false)[0] + " - " + mean);
    return std::vector{let(d + " * " + d)};
  })[0];
  const std::string var = let(sq + " / static_cast<float>(n)");
  const std::string rstd = let("1.0f / sqrtf(" + var + " + " + scalar(row_op(), 4) + ")");
  pass({}, [&] {
    std::vector<std::string> in = producers(false);
    std::string y = let("(" + in[0] + " - " + mean + ") * " + rstd);
    if (w >= 0) y = let(y + " * " + in.at(w));
    if (bias >= 0) y = let(y + " + " + in.at(bias));
    store(slot_of(row_op(), 0), "row * n + j", y);
    return std::vector<std::string>{};
  });
  for (uint32_t k : {1u, 2u}) {
    const size_t slot = slot_of(row_op(), k);
    if (slot < k_.outputs.size()) store_row(slot, k == 1 ? mean : rstd);
  }
}

// native_layer_norm_backward(dy, x, [n], mean, rstd, w?, b?, mask) with the
// CPU kernel's formulas (row_plans.cpp): ds = sum(dy*w*x), db = sum(dy*w)
// over the row, then dx = rstd*dy*w + b'*x + c' with
// b' = (db*mean - ds) * rstd^3 / n and c' = -b'*mean - db*rstd / n; per
// column dw += dy*(x - mean)*rstd and dbias += dy, into the block's row.
void Emitter::layer_norm_backward() {
  const int x = tensor_input(1), mean = tensor_input(3), rstd = tensor_input(4), w = tensor_input(5);
  const size_t dx = slot_of(row_op(), 0), dw = slot_of(row_op(), 1), db = slot_of(row_op(), 2);
  const size_t none = k_.outputs.size();
  auto dyw = [&](const std::vector<std::string>& in) { return w >= 0 ? let(in[0] + " * " + in.at(w)) : in[0]; };
  const std::vector<std::string> sums = pass({Acc::kAdd, Acc::kAdd}, [&] {
    std::vector<std::string> in = producers(true);
    const std::string g = dyw(in);
    return std::vector{let(g + " * " + in.at(x)), g};
  });
  pass({}, [&] {
    std::vector<std::string> in = producers(false);
    const std::string m = in.at(mean), r = in.at(rstd);
    if (dx != none) {
      const std::string inv_n = let("1.0f / static_cast<float>(n)");
      const std::string b = let("(" + sums[1] + " * " + m + " - " + sums[0] + ") * (" + r + " * " + r +
                                " * " + r + ") * " + inv_n);
      const std::string c = let("-(" + b + " * " + m + ") - " + sums[1] + " * " + r + " * " + inv_n);
      store(dx, "row * n + j", let(r + " * " + dyw(in) + " + " + b + " * " + in.at(x) + " + " + c));
    }
    auto accumulate = [&](size_t slot, const std::string& v) {
      const std::string at = "out" + std::to_string(slot) + "[blockIdx.x * n + j]";
      out_ << indent_ << at << " = " << at << " + " << v << ";\n";
    };
    if (dw != none) accumulate(dw, let(in[0] + " * (" + in.at(x) + " - " + m + ") * " + r));
    if (db != none) accumulate(db, in[0]);
    return std::vector<std::string>{};
  });
}

// A sum / mean / amax over the leading dims (a bias gradient): thread j of
// the grid owns column j of its chunk of rows and writes the chunk's
// partial at [chunk, j]. The chunks are gridDim.y contiguous row ranges, or
// one per index of dim 0 for a reduction over the middle dims (per_outer);
// the launcher combines them as it combines the CPU kernel's chunks (a
// mean's division included).
std::string Emitter::column_body() {
  row_ = true;  // loads: the row's offset plus j along the last dim
  const bool max = op_of(p_.ops[row_op()].node->op) == Op::kAmax;
  const uint32_t R = k_.rank;
  out_ << "  const long long n = sizes[" << R - 1 << "];\n"
       << "  const long long chunks = "
       << (k_.per_outer ? "sizes[0]" : "static_cast<long long>(gridDim.y)") << ";\n"
       << "  for (long long c = blockIdx.y; c < chunks; c += gridDim.y) {\n"
       << "    const long long begin = rows * c / chunks, end = rows * (c + 1) / chunks;\n"
       << "    for (long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;"
       << " j += static_cast<long long>(gridDim.x) * blockDim.x) {\n"
       << "      float acc = " << (max ? "disc_neg_inf()" : "0.0f") << ";\n"
       << "      for (long long row = begin; row < end; ++row) {\n";
  offsets("row", R - 1, "        ");
  indent_ = "        ";
  const std::string v = producers(true)[0];
  out_ << indent_ << "acc = " << (max ? "disc_max_nan(acc, " + v + ")" : "acc + " + v) << ";\n";
  out_ << "      }\n";
  indent_ = "      ";
  store(slot_of(row_op(), 0), "c * n + j", "acc");
  out_ << "    }\n  }\n";
  return out_.str();
}

}  // namespace

std::optional<CudaKernel> emit_cuda_kernel(const Program& p, uint32_t g, std::string* why) {
  std::optional<KernelInterface> k = plan_fused_kernel(p, g, why);
  if (!k) return std::nullopt;
  const bool loop = k->kind == FusionKind::kLoop;
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
            "const double* __restrict__ scalars, long long "
         << (loop ? "total" : "rows");
  Emitter e(p, *k);
  const bool column = !loop && reduces_columns(*k);
  std::optional<std::string> body = loop ? e.loop_body() : column ? e.column_body() : e.row_body(why);
  if (!body) return std::nullopt;
  char name[40];
  std::snprintf(name, sizeof name, "disc_%s_%016llx", loop ? "loop" : "row",
                static_cast<unsigned long long>(ir::hash_string(params.str() + *body)));
  CudaKernel out;
  static_cast<KernelInterface&>(out) = *k;
  out.launch = loop ? CudaKernel::Launch::kElements : column ? CudaKernel::Launch::kColumns : CudaKernel::Launch::kRows;
  out.name = name;
  out.source = std::string(kPrelude) + "\nextern \"C\" __global__ void " + name + "(" +
               params.str() + ") {\n" + *body + "}\n";
  return out;
}

}  // namespace disc::lowering
