#include "lazy_backend/trace/node_builder.h"

#include <c10/util/Exception.h>

namespace disc {

using ir::Attr;

NodeBuilder::NodeBuilder(std::string_view op) : NodeBuilder(ir::intern_op(op)) {}

NodeBuilder::NodeBuilder(uint32_t op_id) : node_(std::make_shared<ir::Node>()) { node_->op = op_id; }

NodeBuilder& NodeBuilder::tensor(ir::Value v) {
  TORCH_INTERNAL_ASSERT(v.node, "disc: undefined value for ", ir::op_name(node_->op));
  node_->operands.push_back({ir::Operand::Kind::kTensor, num_inputs(), 1});
  node_->inputs.push_back(std::move(v));
  return *this;
}

NodeBuilder& NodeBuilder::tensor_list(const std::vector<ir::Value>& vs) {
  node_->operands.push_back(
      {ir::Operand::Kind::kTensorList, num_inputs(), static_cast<uint32_t>(vs.size())});
  for (const auto& v : vs) node_->inputs.push_back(v);
  return *this;
}

NodeBuilder& NodeBuilder::optional_tensor_list(const std::vector<std::optional<ir::Value>>& vs) {
  Attr mask;
  mask.kind = Attr::Kind::kBoolList;
  uint32_t first = num_inputs(), count = 0;
  for (const auto& v : vs) {
    mask.ints.push_back(v.has_value());
    if (v) {
      node_->inputs.push_back(*v);
      ++count;
    }
  }
  ir::Operand o{ir::Operand::Kind::kOptionalTensorList, first, count};
  o.mask = static_cast<uint32_t>(node_->attrs.size());
  node_->attrs.push_back(std::move(mask));
  node_->operands.push_back(o);
  return *this;
}

NodeBuilder& NodeBuilder::attr(Attr a) {
  node_->operands.push_back(
      {ir::Operand::Kind::kAttr, static_cast<uint32_t>(node_->attrs.size()), 1});
  node_->attrs.push_back(std::move(a));
  return *this;
}

NodeBuilder& NodeBuilder::ints(std::vector<int64_t> v) {
  Attr a;
  a.kind = Attr::Kind::kIntList;
  a.ints = std::move(v);
  return attr(std::move(a));
}

NodeBuilder& NodeBuilder::integer(int64_t v) { return attr(Attr::of_int(Attr::Kind::kInt, v)); }

NodeBuilder& NodeBuilder::sym_ints(std::vector<int64_t> v) {
  Attr a;
  a.kind = Attr::Kind::kIntList;
  a.ints = std::move(v);
  a.symbolic = true;
  return attr(std::move(a));
}

NodeBuilder& NodeBuilder::sym_integer(int64_t v) {
  Attr a = Attr::of_int(Attr::Kind::kInt, v);
  a.symbolic = true;
  return attr(std::move(a));
}
NodeBuilder& NodeBuilder::none() { return attr(Attr::none()); }

NodeBuilder& NodeBuilder::runtime(Attr a) {
  node_->operands.push_back(
      {ir::Operand::Kind::kRuntime, static_cast<uint32_t>(node_->runtime.size()), 1});
  node_->runtime.push_back(std::move(a));
  return *this;
}

NodeBuilder& NodeBuilder::runtime_list(std::vector<Attr> as) {
  node_->operands.push_back({ir::Operand::Kind::kRuntimeList,
                             static_cast<uint32_t>(node_->runtime.size()),
                             static_cast<uint32_t>(as.size())});
  for (auto& a : as) node_->runtime.push_back(std::move(a));
  return *this;
}

NodeBuilder& NodeBuilder::output(ir::TensorType t) {
  TORCH_INTERNAL_ASSERT(!returns_closed_, "disc: returns must precede mutated outputs");
  node_->outputs.push_back(std::move(t));
  node_->num_returns++;
  return *this;
}

NodeBuilder& NodeBuilder::mutates(uint32_t input_index, ir::TensorType new_type) {
  returns_closed_ = true;
  node_->mutated.push_back(input_index);
  node_->outputs.push_back(std::move(new_type));
  return *this;
}

NodeBuilder& NodeBuilder::rng(uint64_t seed, uint64_t offset) {
  node_->rng_runtime = static_cast<int32_t>(node_->runtime.size());
  node_->runtime.push_back(Attr::of_int(Attr::Kind::kInt, static_cast<int64_t>(seed)));
  node_->runtime.push_back(Attr::of_int(Attr::Kind::kInt, static_cast<int64_t>(offset)));
  return *this;
}

ir::NodePtr NodeBuilder::build() {
  node_->finalize();
  return std::move(node_);
}

const ir::TensorType& type_of(const ir::Value& v) { return v.node->outputs.at(v.index); }

ir::Value op_zeros(const ir::TensorType& type) {
  return {NodeBuilder("aten::zeros")
              .sym_ints(type.sizes)
              .attr(Attr::of_int(Attr::Kind::kDType, static_cast<int64_t>(type.dtype)))
              .none().none().none()
              .output(type)
              .build(),
          0};
}

ir::Value op_reshape(const ir::Value& v, const std::vector<int64_t>& sizes) {
  return {NodeBuilder("aten::reshape")
              .tensor(v)
              .sym_ints(sizes)
              .output({type_of(v).dtype, sizes})
              .build(),
          0};
}

ir::Value op_permute(const ir::Value& v, const std::vector<int64_t>& dims) {
  const std::vector<int64_t>& in = type_of(v).sizes;
  std::vector<int64_t> sizes;
  for (int64_t d : dims) sizes.push_back(in[d]);
  return {NodeBuilder("aten::permute").tensor(v).ints(dims).output({type_of(v).dtype, sizes}).build(), 0};
}

ir::Value op_view_dtype(const ir::Value& flat, ir::DType dtype, int64_t numel) {
  return {NodeBuilder("aten::view.dtype")
              .tensor(flat)
              .attr(Attr::of_int(Attr::Kind::kDType, static_cast<int64_t>(dtype)))
              .output({dtype, {numel}})
              .build(),
          0};
}

ir::Value op_as_strided(const ir::Value& base, const std::vector<int64_t>& sizes,
                        const std::vector<int64_t>& strides, int64_t offset) {
  return {NodeBuilder("aten::as_strided")
              .tensor(base)
              .sym_ints(sizes)
              .sym_ints(strides)
              .sym_integer(offset)
              .output({type_of(base).dtype, sizes})
              .build(),
          0};
}

ir::Value op_as_strided_scatter(const ir::Value& base, const ir::Value& src,
                                const std::vector<int64_t>& sizes,
                                const std::vector<int64_t>& strides, int64_t offset) {
  return {NodeBuilder("aten::as_strided_scatter")
              .tensor(base)
              .tensor(src)
              .sym_ints(sizes)
              .sym_ints(strides)
              .sym_integer(offset)
              .output(type_of(base))
              .build(),
          0};
}

ir::Value op_copy(const ir::Value& dst, const ir::Value& src) {
  return {NodeBuilder("aten::copy")
              .tensor(dst)
              .tensor(src)
              .attr(Attr::of_int(Attr::Kind::kBool, 0))
              .output(type_of(dst))
              .build(),
          0};
}

ir::Value op_pad_flat(const ir::Value& flat, int64_t extra) {
  const ir::TensorType& t = type_of(flat);
  return {NodeBuilder("aten::constant_pad_nd")
              .tensor(flat)
              .sym_ints({0, extra})
              .attr(Attr::of_int(Attr::Kind::kScalarInt, 0))
              .output({t.dtype, {t.sizes.at(0) + extra}})
              .build(),
          0};
}

}  // namespace disc
