// Builds small trace graphs for compiler tests without torch. The builder
// owns every node it makes: a Graph refers to nodes by raw pointer, so they
// must outlive it (in the backend, live tensors keep them alive).
#pragma once
#include <gtest/gtest.h>

#include <initializer_list>
#include <vector>

#include "lowering/ir/graph.h"
#include "lowering/passes/pipeline.h"
#include "lowering/program.h"

namespace disc::testing {

class GraphBuilder {
 public:
  ir::Value param(std::vector<int64_t> sizes, ir::DType t = ir::DType::kFloat32) {
    keep_.push_back(ir::make_data_node({t, std::move(sizes)}, std::make_shared<ir::Payload>()));
    return {keep_.back(), 0};
  }
  // op(inputs..., attrs...) with one output of `sizes`.
  ir::Value op(const char* name, std::vector<ir::Value> inputs, std::vector<int64_t> sizes,
               std::vector<ir::Attr> attrs = {}, std::vector<ir::Attr> runtime = {}) {
    auto n = std::make_shared<ir::Node>();
    n->op = ir::intern_op(name);
    for (auto& v : inputs) {
      n->operands.push_back({ir::Operand::Kind::kTensor, static_cast<uint32_t>(n->inputs.size()), 1});
      n->inputs.push_back(v);
    }
    for (auto& a : attrs) {
      n->operands.push_back({ir::Operand::Kind::kAttr, static_cast<uint32_t>(n->attrs.size()), 1});
      n->attrs.push_back(a);
    }
    for (auto& a : runtime) {
      n->operands.push_back({ir::Operand::Kind::kRuntime, static_cast<uint32_t>(n->runtime.size()), 1});
      n->runtime.push_back(a);
    }
    n->outputs.push_back({ir::DType::kFloat32, std::move(sizes)});
    n->num_returns = 1;
    n->finalize();
    keep_.push_back(n);
    return {n, 0};
  }
  // An op with several outputs.
  ir::NodePtr multi(const char* name, std::vector<ir::Value> inputs,
                    std::vector<std::vector<int64_t>> outs, std::vector<ir::Attr> attrs = {}) {
    ir::Value v = op(name, std::move(inputs), outs[0], std::move(attrs));
    for (size_t k = 1; k < outs.size(); ++k) v.node->outputs.push_back({ir::DType::kFloat32, outs[k]});
    v.node->num_returns = static_cast<uint32_t>(outs.size());
    v.node->finalize();
    return v.node;
  }
  // An op that writes inputs[mutated] (an out= buffer) and returns nothing
  // else: its only output is that input's new value, of `sizes`.
  ir::Value op_mutating(const char* name, std::vector<ir::Value> inputs, uint32_t mutated,
                        std::vector<int64_t> sizes, std::vector<ir::Attr> attrs = {}) {
    ir::Value v = op(name, std::move(inputs), std::move(sizes), std::move(attrs));
    v.node->num_returns = 0;
    v.node->mutated = {mutated};
    v.node->finalize();
    return v;
  }
  static ir::Attr ints(std::vector<int64_t> v) {
    ir::Attr a;
    a.kind = ir::Attr::Kind::kIntList;
    a.ints = std::move(v);
    return a;
  }
  static ir::Attr integer(int64_t v) { return ir::Attr::of_int(ir::Attr::Kind::kInt, v); }
  static ir::Attr boolean(bool v) { return ir::Attr::of_int(ir::Attr::Kind::kBool, v); }
  static ir::Attr scalar(double v) { return ir::Attr::of_double(ir::Attr::Kind::kScalarDouble, v); }

 private:
  std::vector<ir::NodePtr> keep_;
};

// The program of `roots` after the whole pipeline, plan passes included.
inline lowering::Program compiled(std::vector<ir::Value> roots) {
  return lowering::compile(ir::build_graph(roots)).program;
}

// Convolution attributes after (input, weight, bias): stride, padding,
// dilation, transposed, output_padding, groups.
inline std::vector<ir::Attr> conv2d_attrs(bool transposed = false) {
  return {GraphBuilder::ints({1, 1}), GraphBuilder::ints({1, 1}), GraphBuilder::ints({1, 1}),
          GraphBuilder::boolean(transposed), GraphBuilder::ints({0, 0}), GraphBuilder::integer(1)};
}

// The index of the program op that computes `v` (a test failure if none).
inline uint32_t index_of(const lowering::Program& p, const ir::Value& v) {
  for (uint32_t i = 0; i < p.ops.size(); ++i)
    if (p.ops[i].node == v.node.get()) return i;
  ADD_FAILURE() << "value not in the program";
  return 0;
}

}  // namespace disc::testing
