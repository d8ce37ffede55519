#include "lowering/codegen/common/group_analysis.h"

#include <algorithm>
#include <optional>

namespace disc::lowering {

GroupAnalysis::GroupAnalysis(const Program& p, uint32_t g)
    : p_(p), group_(p.groups[g]), used_outside_(used_outside_groups(p)) {
  loop_ = group_.kind == FusionKind::kLoop;
  kernel_.group = g;
  kernel_.kind = group_.kind;
  for (uint32_t op : group_.ops) in_group_[op] = true;
  if (!loop_) row_op_ = group_.ops.back();
}

bool GroupAnalysis::analyze(std::string* why) {
  if (loop_) {
    // The space a kLoop group iterates: its consumer-most op's output.
    kernel_.space = {group_.ops.back(), 0};
    const uint32_t R = static_cast<uint32_t>(type_of(kernel_.space).sizes.size());
    kernel_.rank = std::max<uint32_t>(R, 1);
    kernel_.loads_before_stores = true;  // one pass: every input loaded, then stores
    return collect(why);
  }
  const ir::Node& row = *p_.ops[row_op_].node;
  row_ = op_of(row.op);
  if (!op_info(row.op).codegen) return fail(why, row_op_, "no row codegen for this op");
  if (row.inputs.empty()) return fail(why, row_op_, "no tensor input");
  kernel_.space = p_.ops[row_op_].inputs[0];
  const ir::TensorType& space = type_of(kernel_.space);
  const uint32_t R = static_cast<uint32_t>(space.sizes.size());
  if (R == 0) return fail(why, row_op_, "0-dim input");
  kernel_.rank = std::max<uint32_t>(R, 2);
  kernel_.per_outer = R >= 3 && reduces_dims_before_last(row, R, 1);
  column_ = kernel_.per_outer || reduces_dims_before_last(row, R, 0);
  for (const ir::TensorType& t : row.outputs)
    if (t.dtype != ir::DType::kFloat32 && !t.undefined && !reduced_row_output(t) &&
        !reduced_column_output(t))
      return fail(why, row_op_,
                  "only f32 outputs (bf16 and f16 for softmaxes, layer norm and, on the CPU, "
                  "column sums) are generated");
  if (!column_ && !last_dim_only(row, R))
    return fail(why, row_op_,
                "reduces neither the last dim, nor all leading dims, nor all but the first and last");
  if (!collect(why)) return false;
  using Extent = KernelOutput::Extent;
  for (uint32_t k = 0; k < row.num_returns; ++k) {
    if (row.outputs[k].undefined) continue;  // output_mask left it out
    Extent e = Extent::kElements;
    if (column_ || (row_ == Op::kLayerNormBackward && k > 0)) e = Extent::kPerColumn;
    else if (is_reduction() || k > 0) e = Extent::kPerRow;
    using Combine = KernelOutput::Combine;
    const Combine c = !column_                  ? Combine::kSum
                      : row_ == Op::kAmax     ? Combine::kMax
                      : row_ == Op::kMeanDims ? Combine::kMean
                                                  : Combine::kSum;
    kernel_.outputs.push_back({row_op_, k, e, c});
  }
  return true;
}

// sum / mean / amax over every dim but the last (first = 0: nn.Linear's bias
// grad, a mean over batch and sequence), or over every dim but the first and
// the last (first = 1: a mean over the sequence per batch entry): a column
// reduction.
bool GroupAnalysis::reduces_dims_before_last(const ir::Node& n, uint32_t R, uint32_t first) const {
  const bool has_dtype = row_ == Op::kSumDims || row_ == Op::kMeanDims;
  if ((!has_dtype && row_ != Op::kAmax) || R < 2) return false;
  const ir::Attr* dims = n.attr_operand(1);
  const ir::Attr* dtype = has_dtype ? n.attr_operand(3) : nullptr;
  if (!dims || dims->kind != ir::Attr::Kind::kIntList ||
      (has_dtype && (!dtype || dtype->kind != ir::Attr::Kind::kNone)))
    return false;
  std::vector<bool> seen(R, false);
  for (int64_t d : dims->ints) {
    const int64_t a = d < 0 ? d + R : d;
    if (a < static_cast<int64_t>(first) || a >= static_cast<int64_t>(R) - 1 || seen[a])
      return false;
    seen[a] = true;
  }
  return dims->ints.size() == R - 1 - first;
}

// Checks the element-wise ops; collects inputs, outputs, runtime scalars.
bool GroupAnalysis::collect(std::string* why) {
  for (uint32_t op : group_.ops) {
    const ir::Node& n = *p_.ops[op].node;
    if (loop_ || op != row_op_) {
      const ir::DType out = n.outputs.size() == 1 ? n.outputs[0].dtype : ir::DType::kBool;
      if (out != ir::DType::kFloat32 && !reduced_float(p_, out))
        return fail(why, op, "only single f32, bf16 or f16 (CPU) outputs are generated");
      if (!op_info(n.op).codegen) return fail(why, op, "op has no codegen");
      if (!codegen_takes_dtypes(p_, op))
        return fail(why, op, "a bf16 or f16 op with an input of another dtype");
      if (!codegen_takes(p_, op)) return fail(why, op, "no codegen for this target, dtype or exponent");
      if (used_outside_[op]) kernel_.outputs.push_back({op, 0, KernelOutput::Extent::kElements});
    }
    for (const ir::GraphRef& r : p_.ops[op].inputs) {
      if (in_group_.count(r.node) || input_index_.count({r.node, r.index})) continue;
      const ir::TensorType& t = type_of(r);
      if (!kernels_read(p_, t.dtype)) return fail(why, op, "input dtype has no codegen");
      if (t.sizes.size() > kernel_.rank) return fail(why, op, "input of higher rank");
      input_index_[{r.node, r.index}] = kernel_.inputs.size();
      kernel_.inputs.push_back(r);
      kernel_.input_dtypes.push_back(t.dtype);
      // Broadcast along the row: its stride there is 0 (a size-1 or
      // missing dim, which the size pattern fixes at compile time).
      const auto& dims = p_.ops[r.node].dims.at(r.index);
      row_broadcast_.push_back(dims.empty() || dims.back() == 0);
    }
    for (uint32_t k = 0; k < n.runtime.size(); ++k) kernel_.runtime.push_back({op, k});
  }
  return true;
}

// bf16 and f16 rows: computed in f32, each element rounded once when
// stored, as ATen's CPU and CUDA kernels do; which mixes of dtypes,
// codegen_takes_dtypes.
bool GroupAnalysis::reduced_row_output(const ir::TensorType& t) const {
  const bool rows = row_ == Op::kSoftmax || row_ == Op::kLogSoftmax || row_ == Op::kSafeSoftmax ||
                    row_ == Op::kSoftmaxBackward || row_ == Op::kLogSoftmaxBackward ||
                    row_ == Op::kLayerNorm || row_ == Op::kLayerNormBackward;
  return rows && reduced_float(p_, t.dtype) && codegen_takes_dtypes(p_, row_op_);
}

// bf16 and f16 column sums (bias gradients under autocast): f32 partial
// sums, rounded once by the CPU launcher when it adds them up (ATen's CPU
// sum also accumulates them in f32 and rounds once). Its input must be of
// the same dtype, as ATen's is.
bool GroupAnalysis::reduced_column_output(const ir::TensorType& t) const {
  return column_ && row_ == Op::kSumDims && p_.target == Target::kCpu &&
         reduced_float(p_, t.dtype) && codegen_takes_dtypes(p_, row_op_);
}

bool GroupAnalysis::is_reduction() const {
  return row_ == Op::kSumDims || row_ == Op::kMeanDims || row_ == Op::kAmax;
}

bool GroupAnalysis::last_dim_only(const ir::Node& n, uint32_t R) const {
  auto is_last = [&](int64_t d) { return d == -1 || d == static_cast<int64_t>(R) - 1; };
  if (is_reduction()) {
    const ir::Attr* dims = n.attr_operand(1);
    if (!dims || dims->kind != ir::Attr::Kind::kIntList || dims->ints.size() != 1) return false;
    if (row_ != Op::kAmax) {  // dtype= must be absent
      const ir::Attr* dtype = n.attr_operand(3);
      if (!dtype || dtype->kind != ir::Attr::Kind::kNone) return false;
    }
    return is_last(dims->ints[0]);
  }
  if (row_ == Op::kLayerNorm || row_ == Op::kLayerNormBackward) {
    const ir::Attr* shape = n.attr_operand(row_ == Op::kLayerNorm ? 1 : 2);
    return shape && shape->ints.size() == 1;
  }
  const bool backward = row_ == Op::kSoftmaxBackward || row_ == Op::kLogSoftmaxBackward;
  const ir::Attr* dim = n.attr_operand(backward ? 2 : 1);
  if (!dim || dim->kind != ir::Attr::Kind::kInt || !is_last(dim->i)) return false;
  if (row_ == Op::kSoftmax || row_ == Op::kLogSoftmax) {
    const ir::Attr* half_to_float = n.attr_operand(2);
    if (!half_to_float || half_to_float->i != 0) return false;
  }
  return true;
}

bool reduced_float(const Program& p, ir::DType t) {
  return t == ir::DType::kBFloat16 || (t == ir::DType::kFloat16 && p.target == Target::kCpu);
}

bool kernels_read(const Program& p, ir::DType t) {
  switch (t) {
    case ir::DType::kFloat16:
      return reduced_float(p, t);
    case ir::DType::kFloat32:
    case ir::DType::kFloat64:
    case ir::DType::kInt64:
    case ir::DType::kInt32:
    case ir::DType::kBFloat16:
    case ir::DType::kBool:
      return true;
    default:
      return false;
  }
}

namespace {

// The dtype of operand `k` of op `op` where it is a tensor.
std::optional<ir::DType> operand_dtype(const Program& p, uint32_t op, size_t k) {
  const int input = p.ops[op].node->tensor_operand(k);
  if (input < 0) return std::nullopt;
  const ir::GraphRef& r = p.ops[op].inputs.at(input);
  return p.ops[r.node].node->outputs[r.index].dtype;
}

// Layer norm of bf16 (or f16) rows: with f32 weights (autocast's mix) the
// row (or its grad) is bf16, mean, rstd and the weight grads f32; with
// weights of the row's dtype, or none, everything is in that dtype, mean
// and rstd rounded from the f32 the output is computed with (as ATen's CPU
// kernel keeps them), on the CPU target.
bool layer_norm_takes_dtypes(const Program& p, uint32_t op, bool backward) {
  const ir::Node& n = *p.ops[op].node;
  const ir::DType out = n.outputs[0].dtype;
  if (out != ir::DType::kFloat32 && !reduced_float(p, out)) return false;
  const size_t rows = backward ? 2 : 1;  // x, or dy and x
  for (size_t k = 0; k < rows; ++k)
    if (operand_dtype(p, op, k) != out) return false;
  const size_t weight = backward ? 5 : 2;
  std::optional<ir::DType> params;
  for (size_t k : {weight, weight + 1}) {
    const std::optional<ir::DType> t = operand_dtype(p, op, k);
    if (t && params && *t != *params) return false;
    if (t) params = t;
  }
  const bool mixed = params && *params == ir::DType::kFloat32;
  if (params && !mixed && *params != out) return false;
  if (out != ir::DType::kFloat32 && !mixed && p.target != Target::kCpu) return false;
  const ir::DType statistics = mixed ? ir::DType::kFloat32 : out;
  if (backward) return operand_dtype(p, op, 3) == statistics && operand_dtype(p, op, 4) == statistics;
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (!n.outputs[k].undefined && n.outputs[k].dtype != statistics) return false;
  return true;
}

// A bf16 (f16) op's bool operand, read as 0 or 1: where's condition, and
// dropout's mask, which ATen's CPU backward multiplies exactly
// (grad * mask), then by the scale read in f32, rounding once.
bool bool_operand(Op id, size_t k, const ir::TensorType& t) {
  if (t.dtype != ir::DType::kBool) return false;
  return (id == Op::kWhere && k == 0) || (id == Op::kNativeDropoutBackward && k == 1);
}

}  // namespace

std::optional<ScalarRounding> scalar_operand_rounding(Op id) {
  switch (id) {
    case Op::kAdd: case Op::kAddInplace: case Op::kSub: case Op::kSubInplace: case Op::kWhere:
      return ScalarRounding::kAlways;
    case Op::kMul: case Op::kMulInplace: case Op::kDiv: case Op::kDivInplace:
      return ScalarRounding::kFirstOnly;
    default:
      return std::nullopt;
  }
}

bool is_number(const ir::TensorType& t) {
  return t.sizes.empty() && (t.dtype == ir::DType::kFloat32 || t.dtype == ir::DType::kFloat64 ||
                             t.dtype == ir::DType::kInt64);
}

bool codegen_takes_dtypes(const Program& p, uint32_t op) {
  const ir::Node& n = *p.ops[op].node;
  const Op id = op_of(n.op);
  if (id == Op::kLayerNorm || id == Op::kLayerNormBackward)
    return layer_norm_takes_dtypes(p, op, id == Op::kLayerNormBackward);
  std::optional<ir::DType> reduced;  // the outputs' bf16 or f16, all the same
  for (const ir::TensorType& t : n.outputs) {
    if (t.undefined || t.dtype == ir::DType::kFloat32) continue;
    if (!reduced_float(p, t.dtype) || (reduced && *reduced != t.dtype)) return false;
    reduced = t.dtype;
  }
  if (!reduced || id == Op::kCopy || id == Op::kToCopy) return true;
  const bool cpu = p.target == Target::kCpu;
  const bool takes_numbers = cpu && scalar_operand_rounding(id).has_value();
  const std::vector<ir::GraphRef>& inputs = p.ops[op].inputs;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ir::TensorType& t = p.ops[inputs[k].node].node->outputs[inputs[k].index];
    if (t.dtype != *reduced && !(takes_numbers && is_number(t)) && !(cpu && bool_operand(id, k, t)))
      return false;
  }
  return true;
}

std::optional<double> emitted_pow_exponent(const Program& p, uint32_t op) {
  const ir::Node& n = *p.ops[op].node;
  if (op_of(n.op) != Op::kPowScalar || n.outputs[0].dtype != ir::DType::kFloat32) return std::nullopt;
  const ir::Attr* a = n.attr_operand(1);
  if (!a) return std::nullopt;
  double e = 0;
  if (a->kind == ir::Attr::Kind::kScalarDouble) e = a->d;
  else if (a->kind == ir::Attr::Kind::kScalarInt) e = static_cast<double>(a->i);
  else return std::nullopt;
  for (double emitted : {0.0, 1.0, 2.0, 3.0, -1.0})
    if (e == emitted) return e;
  return std::nullopt;
}

bool codegen_takes(const Program& p, uint32_t op) {
  const ir::Node& n = *p.ops[op].node;
  if (!generated_for(op_info(n.op), p.target == Target::kCuda) || !codegen_takes_dtypes(p, op))
    return false;
  switch (op_of(n.op)) {
    case Op::kPowScalar: return emitted_pow_exponent(p, op).has_value();
    case Op::kTanhBackward: return n.outputs[0].dtype == ir::DType::kFloat32;
    default: return true;
  }
}

std::optional<KernelInterface> plan_fused_kernel(const Program& p, uint32_t g, std::string* why) {
  GroupAnalysis a(p, g);
  if (!a.analyze(why)) return std::nullopt;
  return a.interface();
}

}  // namespace disc::lowering
