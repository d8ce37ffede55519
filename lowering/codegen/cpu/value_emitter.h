// Emits the MLIR lines of element-wise ops, on f32 scalars or on
// vector<16xf32>: one traced op -> a few arith / math lines. The kernels
// (kernel_skeleton.cpp, row_plans.cpp) build loops and loads around it and
// call it once per loop variant (vector body, masked vector tail, strided fallback),
// so an op's arithmetic is written once for all of them.
#pragma once
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lowering/codegen/common/group_analysis.h"
#include "lowering/program.h"

namespace disc::lowering {

// Lanes of the vector variant. 16 x f32 is one AVX-512 register; on AVX2
// LLVM splits it in two, so one kernel text serves both.
constexpr uint32_t kVectorWidth = 16;

// The element types a kernel input or output may have in memory (bf16 and
// f16: their bits, as i16; bfloat16.cpp, float16.cpp).
const char* memref_elem(ir::DType t);

class ValueEmitter {
 public:
  // `width` 0: scalar f32 values; else vector<width x f32>. `runtime` lists
  // the kernel's runtime scalars (op, slot) in %scalars order. SSA names come
  // from `counter`, shared by every variant of one function.
  ValueEmitter(const Program& p, std::ostringstream& out, std::string indent, uint32_t width,
               const std::vector<std::pair<uint32_t, uint32_t>>& runtime, uint32_t& counter);

  const std::string& type() const { return type_; }
  std::string fresh();
  std::string line(const std::string& s);

  // The value of traced op `op` from its input values (inputs[k] is the
  // value of the op's k-th tensor input).
  std::string compute(uint32_t op, const std::vector<std::string>& inputs);

  std::string constant(double v);
  std::string splat(const std::string& scalar_f32);  // identity for scalars
  std::string binary(const char* op, const std::string& a, const std::string& b);
  std::string unary(const char* op, const std::string& a);
  std::string cmp(const char* pred, const std::string& a, const std::string& b);
  std::string select(const std::string& cond, const std::string& a, const std::string& b);
  std::string exp(const std::string& a);
  // max(a, b) that propagates NaN from either side, as torch's amax does.
  std::string max_nan(const std::string& a, const std::string& b);
  // A loaded element of dtype `t` as f32 (Python scalars arrive as f64 / i64).
  std::string to_f32(const std::string& raw, ir::DType t);
  // bfloat16 (bfloat16.cpp): an f32 rounded to bf16 as ATen rounds, kept
  // as f32; the same as the 16 bits a bf16 buffer holds; those bits as f32.
  std::string round_to_bf16(const std::string& value);
  std::string f32_to_bf16_bits(const std::string& value);
  std::string bf16_to_f32(const std::string& bits);
  // float16 (float16.cpp), likewise.
  std::string round_to_f16(const std::string& value);
  std::string f32_to_f16_bits(const std::string& value);
  std::string f16_to_f32(const std::string& bits);
  // `value` rounded as an op with output dtype `t` rounds it (bf16, f16;
  // other dtypes: as it is), and the 16 bits a bf16 or f16 buffer stores.
  std::string round_to(ir::DType t, const std::string& value);
  std::string to_bits(ir::DType t, const std::string& value);
  // An f32 Scalar operand (alpha, threshold, eps) of op `op`.
  std::string scalar_operand(uint32_t op, size_t operand);
  // The same, as a plain f32 even in the vector variant.
  std::string scalar_operand_f32(uint32_t op, size_t operand);
  bool operand_is_one(uint32_t op, size_t operand) const;

 private:
  std::string vec(const std::string& elem) const;  // "f32" -> this variant's type
  std::string int_constant(int64_t v, const std::string& elem);
  std::string bf16_rounded_bits(const std::string& value);
  std::string f16_rounded_bits(const std::string& value);
  // i32 arithmetic in this variant's shape: `a op b`; `pred(a, b) ? then : otherwise`.
  std::string int_op(const char* op, const std::string& a, const std::string& b);
  std::string int_select(const char* pred, const std::string& a, const std::string& b,
                         const std::string& then, const std::string& otherwise);
  std::vector<std::string> numbers_as_aten_reads(uint32_t op, std::vector<std::string> in);
  std::string add_scaled(uint32_t op, const char* arith, const std::vector<std::string>& in);
  std::string addc(uint32_t op, const char* arith, const std::vector<std::string>& in);
  std::string lerp(uint32_t op, const std::vector<std::string>& in);
  bool gelu_is_tanh(uint32_t op, size_t operand) const;
  std::string gelu_tanh_inner(const std::string& x);
  std::string gelu(uint32_t op, const std::string& x);
  std::string gelu_backward(uint32_t op, const std::string& dy, const std::string& x);
  std::string pow(uint32_t op, const std::string& x);
  std::string tanh_backward(const std::string& grad, const std::string& y);

  const Program& p_;
  std::ostringstream& out_;
  std::string indent_;
  uint32_t width_;
  std::string type_;
  const std::vector<std::pair<uint32_t, uint32_t>>& runtime_;
  uint32_t& counter_;
};

}  // namespace disc::lowering
