// schedule: every unit (param, kernel, merged GEMMs, library call, op) runs
// once, after the units that make its inputs, in program order among those
// ready.
#include <gtest/gtest.h>

#include <set>

#include "graph_builder.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::compiled;
using disc::testing::GraphBuilder;
using disc::testing::index_of;

namespace {

// Per op, the step that computes it; a failure when an op is computed twice.
std::vector<int> step_of_ops(const Program& p) {
  std::vector<int> step(p.ops.size(), -1);
  auto mark = [&](uint32_t op, int s) {
    EXPECT_EQ(step[op], -1) << "%" << op << " computed twice";
    step[op] = s;
  };
  for (size_t s = 0; s < p.plan.steps.size(); ++s) {
    const Step& st = p.plan.steps[s];
    if (st.kind == Step::Kind::kKernel) {
      for (uint32_t op : p.groups[p.plan.kernels[st.kernel].group].ops) mark(op, static_cast<int>(s));
    } else if (st.kind == Step::Kind::kGemmGroup) {
      for (uint32_t op : p.gemm_groups[p.ops[st.op].gemm_group].ops) mark(op, static_cast<int>(s));
    } else {
      mark(st.op, static_cast<int>(s));
    }
  }
  return step;
}

// Every live op runs once, after its inputs (or in the same kernel).
void expect_valid_schedule(const Program& p) {
  const std::vector<int> step = step_of_ops(p);
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].erased) continue;
    ASSERT_GE(step[i], 0) << "%" << i << " never runs";
    for (const ir::GraphRef& r : p.ops[i].inputs) EXPECT_LE(step[r.node], step[i]) << "%" << i;
  }
}

}  // namespace

TEST(Schedule, AKernelRunsOnceAfterItsInputsAndEachKindHasItsStep) {
  GraphBuilder b;
  auto x = b.param({8, 16}), w = b.param({16, 16});
  auto mm = b.op("aten::mm", {x, w}, {8, 16});
  auto e = b.op("aten::exp", {mm}, {8, 16});
  auto a = b.op("aten::add.Tensor", {e, x}, {8, 16}, {GraphBuilder::scalar(1)});
  Program p = compiled({a});
  expect_valid_schedule(p);
  ASSERT_EQ(p.plan.steps.size(), 4u);  // x, w, the GEMM, one kernel for exp + add
  EXPECT_EQ(p.plan.steps[0].kind, Step::Kind::kParam);
  EXPECT_EQ(p.plan.steps[2].kind, Step::Kind::kLibrary);
  EXPECT_EQ(p.plan.steps[2].op, index_of(p, mm));
  EXPECT_EQ(p.plan.steps[3].kind, Step::Kind::kKernel);
  EXPECT_EQ(p.plan.steps[3].op, index_of(p, e));  // its first op
}

TEST(Schedule, AKernelWaitsForAnInputMadeAfterItsFirstOp) {
  // exp(x) + x @ w: the kernel {exp, add} starts before the GEMM in program
  // order but reads it, so the GEMM runs first.
  GraphBuilder b;
  auto x = b.param({8, 8}), w = b.param({8, 8});
  auto e = b.op("aten::exp", {x}, {8, 8});
  auto mm = b.op("aten::mm", {x, w}, {8, 8});
  auto a = b.op("aten::add.Tensor", {e, mm}, {8, 8}, {GraphBuilder::scalar(1)});
  Program p = compiled({a});
  expect_valid_schedule(p);
  ASSERT_LT(index_of(p, e), index_of(p, mm));
  std::vector<uint32_t> ops;
  for (const Step& s : p.plan.steps) ops.push_back(s.op);
  EXPECT_EQ(ops, (std::vector<uint32_t>{index_of(p, x), index_of(p, w), index_of(p, mm), index_of(p, e)}));
}

TEST(Schedule, MergedGemmsAreOneStep) {
  GraphBuilder b;
  auto x = b.param({8, 32});
  auto q = b.op("aten::mm", {x, b.param({32, 32})}, {8, 32});
  auto k = b.op("aten::mm", {x, b.param({32, 32})}, {8, 32});
  Program p = compiled({b.op("aten::mul.Tensor", {q, k}, {8, 32})});
  expect_valid_schedule(p);
  ASSERT_EQ(p.gemm_groups.size(), 1u);
  size_t gemm_steps = 0;
  for (const Step& s : p.plan.steps) gemm_steps += s.kind == Step::Kind::kGemmGroup;
  EXPECT_EQ(gemm_steps, 1u);
}
