// What a fusion group's kernel computes, decided before any code is written
// and the same for every target: its ops, inputs, outputs and their extents,
// and whether a row op reduces the last dim (a row) or all leading dims (a
// column). A group no target's codegen handles is declined here, with the
// reason. The kernels pass plans with it; each target's emitter (cpu/,
// cuda/) writes code from it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lowering/program.h"

namespace disc::lowering {

// What group `g`'s kernel reads and writes, or nullopt with `why` set when
// the group has an op, dtype or dim the codegen does not handle (its ops
// then run one by one).
std::optional<KernelInterface> plan_fused_kernel(const Program& p, uint32_t g, std::string* why);

// Whether generated kernels take op's dtypes: f32 and reduced_float
// outputs, and a bf16 (f16) op's inputs bf16 (f16) too unless it is a cast
// (copy, _to_copy), or, on the CPU, where's bool condition or a number
// (is_number) that add, sub, mul, div or where reads as ATen's CPU kernels
// do (scalar_operand_rounding). Other ops with an input of another dtype
// stay ATen's. Layer norm and its backward: bf16 or f16 rows with f32
// weights, as autocast mixes them.
bool codegen_takes_dtypes(const Program& p, uint32_t op);

// Whether generated kernels for p's target compute `op` as it is here: its
// row in ops.def (generated_for), its dtypes (codegen_takes_dtypes) and its
// attributes (pow: emitted_pow_exponent).
bool codegen_takes(const Program& p, uint32_t op);

// pow.Tensor_Scalar's exponent where generated kernels compute it in f32
// to ATen's bits, by filling, copying, multiplying or dividing: 0, 1, 2, 3
// or -1. nullopt: any other exponent (0.5 and -0.5 are ATen's exact sqrt,
// which the generated one is not; others std::pow), or one known only at
// run time.
std::optional<double> emitted_pow_exponent(const Program& p, uint32_t op);

// A 0-dim f32, f64 or int64 tensor: a Python number as torch passes it
// (x * 0.5), or a 0-dim tensor (clipping's coefficient).
bool is_number(const ir::TensorType& t);

// How ATen's CPU kernel reads a number operand of a bf16 or f16 op: add,
// sub and where round it to the op's dtype first, wherever it is; mul and
// div read it in f32 when it is the second operand (their scalar fast
// path) and round it when it is the first. nullopt: an op whose number
// operands generated kernels do not take.
enum class ScalarRounding : uint8_t { kAlways, kFirstOnly };
std::optional<ScalarRounding> scalar_operand_rounding(Op id);

// The 16-bit floats generated kernels compute in f32 and round as ATen
// does after every op: bf16 on every target, f16 on the CPU (its CUDA
// emitter has no f16 conversions).
bool reduced_float(const Program& p, ir::DType t);

// The dtype a kernel stores output `o` in (f32, or bf16 / f16 as its bits).
// Per-column outputs are f32 partial sums whatever the op's dtype: the
// launcher adds the chunks up and rounds once.
inline ir::DType output_dtype(const Program& p, const KernelOutput& o) {
  if (o.extent == KernelOutput::Extent::kPerColumn) return ir::DType::kFloat32;
  return p.ops[o.op].node->outputs[o.index].dtype;
}

// The dtypes a generated kernel reads: f32, f64, i64, i32, bool and the
// target's reduced_float ones.
bool kernels_read(const Program& p, ir::DType t);

// The analysis of one group, kept by an emitter that writes its code.
class GroupAnalysis {
 public:
  GroupAnalysis(const Program& p, uint32_t g);

  // Fills the interface; false (with `why`) when the group is declined.
  bool analyze(std::string* why);
  const KernelInterface& interface() const { return kernel_; }

 protected:
  bool fail(std::string* why, uint32_t op, const std::string& what) {
    if (why) *why = ir::op_name(p_.ops[op].node->op) + ": " + what;
    return false;
  }
  const ir::TensorType& type_of(const ir::GraphRef& r) const {
    return p_.ops[r.node].node->outputs.at(r.index);
  }
  bool is_reduction() const;
  bool reduced_row_output(const ir::TensorType& t) const;
  bool reduced_column_output(const ir::TensorType& t) const;

  const Program& p_;
  const FusionGroup& group_;
  const std::vector<bool> used_outside_;  // per op: read outside its group
  std::map<uint32_t, bool> in_group_;
  std::map<std::pair<uint32_t, uint32_t>, size_t> input_index_;
  std::vector<bool> row_broadcast_;  // per input
  bool loop_ = false;
  bool column_ = false;  // a sum over all leading dims
  uint32_t row_op_ = 0;  // the reduction / stitch op, last in a kInput / kStitch group
  Op row_ = Op::kOther;  // the row op's kind (kInput / kStitch)
  KernelInterface kernel_;

 private:
  // Reduces dims [first, R - 1) of a rank-R input; first is 0 or 1.
  bool reduces_dims_before_last(const ir::Node& n, uint32_t R, uint32_t first) const;
  bool collect(std::string* why);
  bool last_dim_only(const ir::Node& n, uint32_t R) const;
};

}  // namespace disc::lowering
