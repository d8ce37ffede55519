// A sweep of element-wise fusion groups for the CUDA codegen's tests: every
// op the codegen emits, broadcast inputs, runtime scalars, bf16 and bool
// tensors, each case a few ops over [4, 6] (some inputs broadcast from [6]).
#pragma once
#include <functional>
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
  cases.push_back({"bf16 chain", [=](B& b) {
    auto x = b.param({4, 6}, ir::DType::kBFloat16), y = b.param({4, 6}, ir::DType::kBFloat16);
    auto a = b.op("aten::add.Tensor", {x, y}, {4, 6}, {B::scalar(1)});
    a.node->outputs[0].dtype = ir::DType::kBFloat16;
    auto e = b.op("aten::exp", {a}, {4, 6});
    e.node->outputs[0].dtype = ir::DType::kBFloat16;
    return e;
  }});
  return cases;
}

}  // namespace disc::testing
