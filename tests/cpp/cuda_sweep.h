// A sweep of fusion groups for the CUDA codegen's tests: every element-wise
// op the codegen emits, broadcast inputs, runtime scalars, bf16 and bool
// tensors, each case a few ops over [4, 6] (some inputs broadcast from
// [6]); and row groups: sums, means and maxima over the last dim, softmax,
// log_softmax, _safe_softmax and their backward, layer norm and its
// backward, with element-wise producers (one read outside the group) and a
// 3-D space; and column reductions (a bias gradient, amax, a mean per batch
// entry).
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "graph_builder.h"

namespace disc::testing {

inline ir::Attr text(const char* s) {
  ir::Attr a;
  a.kind = ir::Attr::Kind::kString;
  a.s = s;
  return a;
}

inline ir::Attr runtime_scalar(double v) { return GraphBuilder::scalar(v); }

// native_layer_norm(x, [6], weight?, bias?, 1e-5) over [4, 6], its operands
// in the schema's order (GraphBuilder puts tensors first).
inline ir::NodePtr layer_norm(GraphBuilder& b, ir::Value x, std::optional<ir::Value> w,
                              std::optional<ir::Value> bias) {
  std::vector<ir::Value> ins{x};
  if (w) ins.push_back(*w);
  if (bias) ins.push_back(*bias);
  ir::NodePtr n = b.multi("aten::native_layer_norm", ins, {{4, 6}, {4, 1}, {4, 1}},
                          {GraphBuilder::ints({6}), GraphBuilder::scalar(1e-5)});
  using K = ir::Operand::Kind;
  std::vector<ir::Attr> attrs = n->attrs;  // [6], eps
  n->attrs = {attrs[0]};
  n->operands = {{K::kTensor, 0, 1}, {K::kAttr, 0, 1}};
  uint32_t next = 1;
  for (bool present : {w.has_value(), bias.has_value()}) {
    if (present) {
      n->operands.push_back({K::kTensor, next++, 1});
    } else {
      n->operands.push_back({K::kAttr, static_cast<uint32_t>(n->attrs.size()), 1});
      n->attrs.push_back(ir::Attr::none());
    }
  }
  n->operands.push_back({K::kAttr, static_cast<uint32_t>(n->attrs.size()), 1});
  n->attrs.push_back(attrs[1]);
  n->finalize();
  return n;
}

// native_layer_norm_backward(dy, x, [6], mean, rstd, weight?, bias,
// [True, weight?, True]) over [4, 6]: dx, and dw (with a weight) and db
// summed per column. x in `rows`' dtype (dy's is the caller's).
inline ir::NodePtr layer_norm_backward(GraphBuilder& b, ir::Value dy, bool weight,
                                       ir::DType rows = ir::DType::kFloat32) {
  ir::Value x = b.param({4, 6}, rows), mean = b.param({4, 1}), rstd = b.param({4, 1}), bias = b.param({6});
  std::vector<ir::Value> ins{dy, x, mean, rstd};
  if (weight) ins.push_back(b.param({6}));
  ins.push_back(bias);
  ir::Attr mask;
  mask.kind = ir::Attr::Kind::kBoolList;
  mask.ints = {1, weight, 1};
  ir::NodePtr n = b.multi("aten::native_layer_norm_backward", ins, {{4, 6}, {6}, {6}},
                          {GraphBuilder::ints({6}), mask});
  using K = ir::Operand::Kind;
  n->operands = {{K::kTensor, 0, 1}, {K::kTensor, 1, 1}, {K::kAttr, 0, 1}, {K::kTensor, 2, 1},
                 {K::kTensor, 3, 1}};
  if (weight) {
    n->operands.push_back({K::kTensor, 4, 1});
  } else {
    n->operands.push_back({K::kAttr, 2, 1});
    n->attrs.push_back(ir::Attr::none());
    n->outputs[1].undefined = true;
  }
  n->operands.push_back({K::kTensor, weight ? 5u : 4u, 1});
  n->operands.push_back({K::kAttr, 1, 1});
  n->finalize();
  return n;
}

struct Case {
  const char* name;
  std::function<ir::Value(GraphBuilder&)> build;
};

inline std::vector<Case> sweep() {
  using B = GraphBuilder;
  auto f = [](B& b) { return b.param({4, 6}); };
  auto unary = [f](const char* op) {
    return Case{op, [=](B& b) { return b.op(op, {f(b)}, {4, 6}); }};
  };
  std::vector<Case> cases;
  for (const char* op : {"aten::neg", "aten::exp", "aten::log", "aten::sqrt", "aten::rsqrt",
                         "aten::tanh", "aten::sigmoid", "aten::relu", "aten::abs"})
    cases.push_back(unary(op));
  cases.push_back({"add, sub with alpha, mul, div, broadcast row", [=](B& b) {
    auto x = f(b), row = b.param({6});
    auto a = b.op("aten::add.Tensor", {x, row}, {4, 6}, {B::scalar(1)});
    auto s = b.op("aten::sub.Tensor", {a, x}, {4, 6}, {B::scalar(0.5)});
    auto m = b.op("aten::mul.Tensor", {s, row}, {4, 6});
    return b.op("aten::div.Tensor", {m, x}, {4, 6});
  }});
  cases.push_back({"scalar ops with a runtime scalar", [=](B& b) {
    auto x = f(b);
    auto m = b.op("aten::mul.Scalar", {x}, {4, 6}, {}, {runtime_scalar(0.1)});
    return b.op("aten::add.Scalar", {m}, {4, 6}, {B::scalar(2), B::scalar(3)});
  }});
  cases.push_back({"gelu and its backward, exact and tanh", [=](B& b) {
    auto x = f(b), g = f(b);
    auto y = b.op("aten::gelu", {x}, {4, 6}, {text("none")});
    auto d = b.op("aten::gelu_backward", {g, x}, {4, 6}, {text("tanh")});
    auto y2 = b.op("aten::gelu", {d}, {4, 6}, {text("tanh")});
    auto d2 = b.op("aten::gelu_backward", {y, y2}, {4, 6}, {text("none")});
    return d2;
  }});
  cases.push_back({"where and dropout backward on bool masks", [=](B& b) {
    auto cond = b.param({4, 6}, ir::DType::kBool), x = f(b), y = f(b);
    auto w = b.op("aten::where.self", {cond, x, y}, {4, 6});
    auto d = b.op("aten::native_dropout_backward", {w, cond}, {4, 6}, {B::scalar(1.0 / 0.9)});
    return b.op("aten::threshold_backward", {d, x}, {4, 6}, {B::scalar(0)});
  }});
  cases.push_back({"optimizer updates: lerp_, addcmul_, addcdiv_", [=](B& b) {
    auto p = f(b), g = f(b), m = f(b), v = f(b);
    auto m2 = b.op("aten::lerp_.Scalar", {m, g}, {4, 6}, {B::scalar(0.1)});
    auto v2 = b.op("aten::addcmul_", {v, g, g}, {4, 6}, {B::scalar(0.001)});
    auto den = b.op("aten::sqrt", {v2}, {4, 6});
    return b.op("aten::addcdiv_", {p, m2, den}, {4, 6}, {}, {runtime_scalar(-1e-3)});
  }});
  cases.push_back({"in-place variants", [=](B& b) {
    auto x = f(b), y = f(b);
    auto a = b.op("aten::add_.Tensor", {x, y}, {4, 6}, {B::scalar(1)});
    auto s = b.op("aten::sub_.Tensor", {a, y}, {4, 6}, {B::scalar(0.5)});
    auto m = b.op("aten::mul_.Tensor", {s, y}, {4, 6});
    auto d = b.op("aten::div_.Tensor", {m, y}, {4, 6});
    auto q = b.op("aten::sqrt_", {d}, {4, 6});
    return b.op("aten::mul_.Scalar", {q}, {4, 6}, {}, {runtime_scalar(0.5)});
  }});
  cases.push_back({"out variants", [=](B& b) {
    auto x = f(b), y = f(b);
    auto a = b.op("aten::add.out", {x, y}, {4, 6}, {B::scalar(2)});
    return b.op("aten::mul.out", {a, y}, {4, 6});
  }});
  cases.push_back({"fills, copies, casts and an expand", [=](B& b) {
    auto x = f(b), y = f(b), row = b.param({6});
    auto z = b.op("aten::zero_", {x}, {4, 6});
    auto filled = b.op("aten::fill_.Scalar", {y}, {4, 6}, {B::scalar(2)});
    auto c = b.op("aten::copy", {f(b), row}, {4, 6}, {B::boolean(false)});
    auto cast = b.op("aten::_to_copy", {f(b)}, {4, 6});
    auto e = b.op("aten::expand", {row}, {4, 6}, {B::ints({4, 6}), B::boolean(false)});
    auto zeros = b.op("aten::zeros", {}, {4, 6});
    auto s1 = b.op("aten::add.Tensor", {z, filled}, {4, 6}, {B::scalar(1)});
    auto s2 = b.op("aten::mul.Tensor", {s1, c}, {4, 6});
    auto s3 = b.op("aten::add.Tensor", {s2, cast}, {4, 6}, {B::scalar(1)});
    auto s4 = b.op("aten::add.Tensor", {s3, e}, {4, 6}, {B::scalar(1)});
    return b.op("aten::add.Tensor", {s4, zeros}, {4, 6}, {B::scalar(1)});
  }});
  cases.push_back({"bf16 chain", [=](B& b) {
    auto x = b.param({4, 6}, ir::DType::kBFloat16), y = b.param({4, 6}, ir::DType::kBFloat16);
    auto a = b.op("aten::add.Tensor", {x, y}, {4, 6}, {B::scalar(1)});
    a.node->outputs[0].dtype = ir::DType::kBFloat16;
    auto e = b.op("aten::exp", {a}, {4, 6});
    e.node->outputs[0].dtype = ir::DType::kBFloat16;
    return e;
  }});
  const ir::Attr none = ir::Attr::none();
  auto last = [](int64_t d) { return GraphBuilder::ints({d}); };
  for (const char* op : {"aten::sum.dim_IntList", "aten::mean.dim"})
    cases.push_back({op, [=](B& b) {
      auto x = f(b), row = b.param({6});
      auto e = b.op("aten::mul.Tensor", {x, row}, {4, 6});
      return b.op(op, {e}, {4}, {last(1), B::boolean(false), none});
    }});
  cases.push_back({"amax of exp, the exp read outside", [=](B& b) {
    auto e = b.op("aten::exp", {f(b)}, {4, 6});
    auto m = b.op("aten::amax", {e}, {4, 1}, {last(1), B::boolean(true)});
    return b.op("aten::sub.Tensor", {e, m}, {4, 6}, {B::scalar(1)});
  }});
  for (const char* op : {"aten::_softmax", "aten::_log_softmax"})
    cases.push_back({op, [=](B& b) {
      auto x = b.param({2, 3, 6}), mask = b.param({6});
      auto s = b.op("aten::add.Tensor", {x, mask}, {2, 3, 6}, {B::scalar(1)});
      return b.op(op, {s}, {2, 3, 6}, {B::integer(2), B::boolean(false)});
    }});
  cases.push_back({"_softmax of bf16 rows", [=](B& b) {
    auto s = b.op("aten::_softmax", {b.param({4, 6}, ir::DType::kBFloat16)}, {4, 6},
                  {B::integer(1), B::boolean(false)});
    s.node->outputs[0].dtype = ir::DType::kBFloat16;
    return s;
  }});
  cases.push_back({"_softmax_backward_data of bf16 rows", [=](B& b) {
    auto g = b.param({4, 6}, ir::DType::kBFloat16), y = b.param({4, 6}, ir::DType::kBFloat16);
    ir::Attr dtype = ir::Attr::of_int(ir::Attr::Kind::kDType, static_cast<int64_t>(ir::DType::kBFloat16));
    auto d = b.op("aten::_softmax_backward_data", {g, y}, {4, 6}, {B::integer(1), dtype});
    d.node->outputs[0].dtype = ir::DType::kBFloat16;
    return d;
  }});
  cases.push_back({"_safe_softmax", [=](B& b) {
    return b.op("aten::_safe_softmax", {f(b)}, {4, 6}, {B::integer(1), none});
  }});
  for (const char* op : {"aten::_softmax_backward_data", "aten::_log_softmax_backward_data"})
    cases.push_back({op, [=](B& b) {
      auto g = f(b), y = f(b);
      ir::Attr dtype = ir::Attr::of_int(ir::Attr::Kind::kDType, static_cast<int64_t>(ir::DType::kFloat32));
      return b.op(op, {g, y}, {4, 6}, {B::integer(1), dtype});
    }});
  cases.push_back({"layer norm, with and without an affine", [=](B& b) {
    auto x = f(b), w = b.param({6}), bias = b.param({6}), res = f(b);
    auto sum = b.op("aten::add.Tensor", {x, res}, {4, 6}, {B::scalar(1)});
    auto ln = layer_norm(b, sum, w, bias);
    auto plain = layer_norm(b, {ln, 0}, std::nullopt, std::nullopt);
    return ir::Value{plain, 0};
  }});
  cases.push_back({"layer norm of bf16 rows with f32 weights", [=](B& b) {
    ir::NodePtr ln = layer_norm(b, b.param({4, 6}, ir::DType::kBFloat16), b.param({6}), b.param({6}));
    ln->outputs[0].dtype = ir::DType::kBFloat16;
    return ir::Value{ln, 0};
  }});
  cases.push_back({"layer norm backward of bf16 rows with f32 weights", [=](B& b) {
    ir::NodePtr n = layer_norm_backward(b, b.param({4, 6}, ir::DType::kBFloat16), true,
                                        ir::DType::kBFloat16);
    n->outputs[0].dtype = ir::DType::kBFloat16;
    return ir::Value{n, 0};
  }});
  for (bool weight : {true, false})
    cases.push_back({weight ? "layer norm backward" : "layer norm backward without a weight", [=](B& b) {
      auto dy = b.op("aten::mul.Tensor", {f(b), b.param({6})}, {4, 6});
      ir::NodePtr n = layer_norm_backward(b, dy, weight);
      return ir::Value{n, 0};
    }});
  cases.push_back({"bias gradient: a sum over the leading dims", [=](B& b) {
    auto g = b.op("aten::mul.Tensor", {b.param({2, 3, 6}), b.param({6})}, {2, 3, 6});
    return b.op("aten::sum.dim_IntList", {g}, {6}, {GraphBuilder::ints({0, 1}), B::boolean(false), none});
  }});
  cases.push_back({"amax over the leading dims", [=](B& b) {
    return b.op("aten::amax", {b.op("aten::exp", {f(b)}, {4, 6})}, {6}, {last(0), B::boolean(false)});
  }});
  cases.push_back({"mean over the middle dim (per batch entry)", [=](B& b) {
    auto x = b.param({2, 3, 4, 6});
    return b.op("aten::mean.dim", {x}, {2, 6}, {GraphBuilder::ints({1, 2}), B::boolean(false), none});
  }});
  return cases;
}

}  // namespace disc::testing
