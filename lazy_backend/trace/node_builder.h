// Builds trace nodes: the one place that fills ir::Node, for captured ATen
// ops and for the internal ops the storage model emits (reshape, as_strided,
// as_strided_scatter, view.dtype, copy, zeros).
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "lowering/ir/node.h"

namespace disc {

class NodeBuilder {
 public:
  explicit NodeBuilder(std::string_view op);
  explicit NodeBuilder(uint32_t op_id);  // ir::intern_op's id, looked up once by the caller
  NodeBuilder& tensor(ir::Value v);
  NodeBuilder& tensor_list(const std::vector<ir::Value>& vs);
  NodeBuilder& optional_tensor_list(const std::vector<std::optional<ir::Value>>& vs);
  NodeBuilder& attr(ir::Attr a);
  NodeBuilder& ints(std::vector<int64_t> v);
  NodeBuilder& integer(int64_t v);
  // Sizes, strides and offsets: part of the graph's size pattern, not of
  // its structural hash (see ir::Attr::symbolic).
  NodeBuilder& sym_ints(std::vector<int64_t> v);
  NodeBuilder& sym_integer(int64_t v);
  NodeBuilder& none();
  NodeBuilder& runtime(ir::Attr a);
  NodeBuilder& runtime_list(std::vector<ir::Attr> as);
  NodeBuilder& output(ir::TensorType t);
  // Marks inputs[input_index] as written in place; its new value becomes an
  // output after the returns. Call after all returns have been added.
  NodeBuilder& mutates(uint32_t input_index, ir::TensorType new_type);
  // Random ops get (seed, offset) as runtime data, so a new seed never
  // recompiles and every call draws fresh numbers.
  NodeBuilder& rng(uint64_t seed, uint64_t offset);
  uint32_t num_inputs() const { return static_cast<uint32_t>(node_->inputs.size()); }
  ir::NodePtr build();

 private:
  ir::NodePtr node_;
  bool returns_closed_ = false;
};

const ir::TensorType& type_of(const ir::Value& v);

// Internal ops of the storage model. Each returns the single output.
ir::Value op_zeros(const ir::TensorType& type);
ir::Value op_reshape(const ir::Value& v, const std::vector<int64_t>& sizes);
ir::Value op_permute(const ir::Value& v, const std::vector<int64_t>& dims);
ir::Value op_view_dtype(const ir::Value& flat, ir::DType dtype, int64_t numel);
ir::Value op_as_strided(const ir::Value& base, const std::vector<int64_t>& sizes,
                        const std::vector<int64_t>& strides, int64_t offset);
ir::Value op_as_strided_scatter(const ir::Value& base, const ir::Value& src,
                                const std::vector<int64_t>& sizes,
                                const std::vector<int64_t>& strides, int64_t offset);
ir::Value op_copy(const ir::Value& dst, const ir::Value& src);
ir::Value op_pad_flat(const ir::Value& flat, int64_t extra);

}  // namespace disc
