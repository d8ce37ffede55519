// plan_fusion and verify_plan: pinned kernel counts for the shapes that
// matter (element-wise chains, reductions, softmax, layer norm, an MLP step).
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/pipeline.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::GraphBuilder;

namespace {
Program planned(std::vector<ir::Value> roots) {
  return compile(ir::build_graph(roots)).program;
}
}  // namespace

TEST(FusionPlan, ElementwiseChainIsOneLoopKernel) {
  GraphBuilder b;
  auto x = b.param({64, 128});
  auto y = b.param({64, 128});
  auto m = b.op("aten::mul.Tensor", {x, y}, {64, 128});
  auto a = b.op("aten::add.Tensor", {m, x}, {64, 128}, {GraphBuilder::scalar(1)});
  auto r = b.op("aten::relu", {a}, {64, 128});
  Program p = planned({r});
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].kind, FusionKind::kLoop);
  EXPECT_EQ(p.groups[0].ops.size(), 3u);
}

TEST(FusionPlan, ReductionTakesItsElementwiseProducers) {
  GraphBuilder b;
  auto x = b.param({64, 128});
  auto e = b.op("aten::exp", {x}, {64, 128});
  auto s = b.op("aten::sum.dim_IntList", {e}, {64}, {GraphBuilder::ints({1}), GraphBuilder::boolean(false)});
  Program p = planned({s});
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].kind, FusionKind::kInput);
  EXPECT_EQ(p.groups[0].ops.size(), 2u);
}

TEST(FusionPlan, SoftmaxAndLayerNormForwardAndBackwardAreOneKernelEach) {
  GraphBuilder b;
  auto x = b.param({4096, 1024});
  auto sm = b.op("aten::_softmax", {x}, {4096, 1024}, {GraphBuilder::integer(1), GraphBuilder::boolean(false)});
  auto w = b.param({1024});
  auto ln = b.multi("aten::native_layer_norm", {x, w, w}, {{4096, 1024}, {4096, 1}, {4096, 1}},
                    {GraphBuilder::ints({1024})});
  EXPECT_EQ(planned({sm}).groups.size(), 1u);
  Program p = planned({{ln, 0}});
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].kind, FusionKind::kStitch);
  auto g = b.param({4096, 1024});
  auto smb = b.op("aten::_softmax_backward_data", {g, sm}, {4096, 1024},
                  {GraphBuilder::integer(1), GraphBuilder::integer(6)});
  EXPECT_EQ(planned({smb}).groups.size(), 2u);  // forward and backward: one each
}

// A bf16 layer norm over [64, 128] whose weights and saved statistics have
// the given dtypes, planned for `target`; the index of its op.
Program bf16_layer_norm(ir::DType weights, ir::DType statistics, Target target, uint32_t* op) {
  GraphBuilder b;
  auto x = b.param({64, 128}, ir::DType::kBFloat16);
  auto w = b.param({128}, weights);
  ir::NodePtr ln = b.multi("aten::native_layer_norm", {x, w, w}, {{64, 128}, {64, 1}, {64, 1}},
                           {GraphBuilder::ints({128}), GraphBuilder::scalar(1e-5)});
  using K = ir::Operand::Kind;  // the schema's order: x, [n], w, b, eps
  ln->operands = {{K::kTensor, 0, 1}, {K::kAttr, 0, 1}, {K::kTensor, 1, 1}, {K::kTensor, 2, 1},
                  {K::kAttr, 1, 1}};
  ln->outputs[0].dtype = ir::DType::kBFloat16;
  ln->outputs[1].dtype = ln->outputs[2].dtype = statistics;
  ln->finalize();
  Program p = make_program(ir::build_graph({{ln, 0}, {ln, 1}, {ln, 2}}));
  p.target = target;
  run_passes(p, pass_names());
  *op = disc::testing::index_of(p, {ln, 0});
  return p;
}

TEST(FusionPlan, ABf16LayerNormIsAKernelWithF32WeightsOrWithItsOwnDtypeThroughout) {
  // Autocast's mix (f32 weights, f32 statistics) and a bf16 model (bf16
  // weights and statistics, which ATen's CPU kernel keeps in bf16) are
  // generated on the CPU; the bf16 model's on CUDA, and a mix ATen never
  // makes, stay on ATen.
  using ir::DType;
  uint32_t op = 0;
  for (DType w : {DType::kFloat32, DType::kBFloat16}) {
    Program p = bf16_layer_norm(w, w, Target::kCpu, &op);
    EXPECT_GE(p.ops[op].group, 0) << ir::dtype_name(w);
    EXPECT_EQ(p.plan.kernels.size(), 1u) << ir::dtype_name(w);
    EXPECT_TRUE(p.plan.declined.empty()) << ir::dtype_name(w);
  }
  EXPECT_EQ(bf16_layer_norm(DType::kBFloat16, DType::kBFloat16, Target::kCuda, &op).ops[op].group, -1);
  EXPECT_EQ(bf16_layer_norm(DType::kBFloat16, DType::kFloat32, Target::kCpu, &op).ops[op].group, -1);
  EXPECT_EQ(bf16_layer_norm(DType::kFloat32, DType::kBFloat16, Target::kCpu, &op).ops[op].group, -1);
}

TEST(FusionPlan, ProducerUsedOutsideJoinsAReductionButNotALoop) {
  // exp(x) feeds a reduction and a library call: the reduction's kernel
  // takes it and stores it for the GEMM. An element-wise consumer does not
  // (it would only move the store), so exp stays apart from the add.
  GraphBuilder b;
  auto x = b.param({16, 16});
  auto e = b.op("aten::exp", {x}, {16, 16});
  auto s = b.op("aten::sum.dim_IntList", {e}, {16}, {GraphBuilder::ints({1}), GraphBuilder::boolean(false)});
  auto m = b.op("aten::mm", {e, x}, {16, 16});
  Program p = planned({s, m});
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].kind, FusionKind::kInput);
  EXPECT_EQ(p.groups[0].ops.size(), 2u);
  EXPECT_EQ(p.library_calls(), 1u);
  auto a = b.op("aten::add.Tensor", {e, x}, {16, 16}, {GraphBuilder::scalar(1)});
  auto m2 = b.op("aten::mm", {e, x}, {16, 16});
  EXPECT_EQ(planned({a, m2}).groups.size(), 2u);
}

TEST(FusionPlan, BroadcastOfADifferentShapeIsNotFusedIntoTheLoop) {
  GraphBuilder b;
  auto bias = b.param({128});
  auto x = b.param({64, 128});
  auto nb = b.op("aten::neg", {bias}, {128});
  auto a = b.op("aten::add.Tensor", {x, nb}, {64, 128}, {GraphBuilder::scalar(1)});
  Program p = planned({a});
  EXPECT_EQ(p.groups.size(), 2u);  // neg over [128], add over [64, 128]
}

TEST(FusionPlan, MlpForwardKernelCountIsPinned) {
  // x -> addmm -> relu -> addmm -> log_softmax: 2 library calls (the relu
  // is the first one's epilogue), log_softmax one kStitch kernel.
  GraphBuilder b;
  auto x = b.param({32, 784});
  auto w1 = b.param({784, 256});
  auto b1 = b.param({256});
  auto w2 = b.param({256, 10});
  auto b2 = b.param({10});
  auto h = b.op("aten::addmm", {b1, x, w1}, {32, 256});
  auto r = b.op("aten::relu", {h}, {32, 256});
  auto o = b.op("aten::addmm", {b2, r, w2}, {32, 10});
  auto ls = b.op("aten::_log_softmax", {o}, {32, 10}, {GraphBuilder::integer(1), GraphBuilder::boolean(false)});
  Program p = planned({ls});
  EXPECT_EQ(p.library_calls(), 2u);
  EXPECT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.epilogues(), 1u);
  EXPECT_EQ(p.unfused_ops(), 0u);
}

TEST(FusionPlan, AnOpWithoutCodegenJoinsNoGroupAndSplitsTheChainAroundIt) {
  // mul -> silu -> add -> relu: silu has no emitter (ops.def), so it runs
  // on ATen between a lone mul and an {add, relu} kernel, instead of the
  // whole chain being planned as one group and then declined.
  GraphBuilder b;
  auto x = b.param({64, 128});
  auto m = b.op("aten::mul.Tensor", {x, x}, {64, 128});
  auto g = b.op("aten::silu", {m}, {64, 128});
  auto a = b.op("aten::add.Tensor", {g, x}, {64, 128}, {GraphBuilder::scalar(1)});
  auto r = b.op("aten::relu", {a}, {64, 128});
  Program p = planned({r});
  EXPECT_EQ(p.ops[disc::testing::index_of(p, g)].group, -1);
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[1].ops.size(), 2u);
  EXPECT_EQ(p.plan.kernels.size(), 1u);
  EXPECT_TRUE(p.plan.declined.empty());
}

// x ** e -> add: pow joins the chain where the kernel computes it as
// ATen does (e = 3, x * x * x), else it runs on ATen and the add alone is
// the kernel.
Program pow_then_add(double exponent, Target target, uint32_t* pow_op) {
  GraphBuilder b;
  auto x = b.param({64, 128});
  auto p = b.op("aten::pow.Tensor_Scalar", {x}, {64, 128}, {GraphBuilder::scalar(exponent)});
  auto a = b.op("aten::add.Tensor", {p, x}, {64, 128}, {GraphBuilder::scalar(1)});
  Program prog = make_program(ir::build_graph({a}));
  prog.target = target;
  run_passes(prog, pass_names());
  *pow_op = disc::testing::index_of(prog, p);
  return prog;
}

TEST(FusionPlan, PowJoinsTheChainForExponentsTheKernelComputesAsAten) {
  for (double e : {0.0, 1.0, 2.0, 3.0, -1.0}) {
    uint32_t pow_op = 0;
    Program p = pow_then_add(e, Target::kCpu, &pow_op);
    EXPECT_GE(p.ops[pow_op].group, 0) << e;
    EXPECT_EQ(p.plan.kernels.size(), 1u) << e;
  }
  for (double e : {0.5, -0.5, -2.0, 1.7}) {  // ATen's sqrt and std::pow
    uint32_t pow_op = 0;
    Program p = pow_then_add(e, Target::kCpu, &pow_op);
    EXPECT_EQ(p.ops[pow_op].group, -1) << e;
    EXPECT_TRUE(p.plan.declined.empty()) << e;
  }
}

TEST(FusionPlan, PowWithARuntimeExponentRunsOnAten) {
  GraphBuilder b;
  auto x = b.param({64, 128});
  auto p = b.op("aten::pow.Tensor_Scalar", {x}, {64, 128}, {}, {GraphBuilder::scalar(3.0)});
  auto a = b.op("aten::add.Tensor", {p, x}, {64, 128}, {GraphBuilder::scalar(1)});
  Program prog = planned({a});
  EXPECT_EQ(prog.ops[disc::testing::index_of(prog, p)].group, -1);
}

TEST(FusionPlan, PowAndTanhBackwardAreTheCpusOnly) {
  uint32_t pow_op = 0;
  Program p = pow_then_add(3.0, Target::kCuda, &pow_op);
  EXPECT_EQ(p.ops[pow_op].group, -1);
  EXPECT_TRUE(p.plan.declined.empty());
  for (Target target : {Target::kCpu, Target::kCuda}) {
    GraphBuilder b;
    auto g = b.param({64, 128}), y = b.param({64, 128});
    auto d = b.op("aten::tanh_backward", {g, y}, {64, 128});
    auto r = b.op("aten::mul.Tensor", {d, y}, {64, 128});
    Program q = make_program(ir::build_graph({r}));
    q.target = target;
    run_passes(q, pass_names());
    EXPECT_EQ(q.ops[disc::testing::index_of(q, d)].group >= 0, target == Target::kCpu);
  }
}

// bf16: mul -> add(+ f32 0-dim) -> relu, on `target`.
Program bf16_chain_adding_a_number(GraphBuilder& b, Target target, ir::Value* add) {
  auto x = b.param({64, 128}, ir::DType::kBFloat16);
  auto s = b.param({}, ir::DType::kFloat32);
  auto m = b.op("aten::mul.Tensor", {x, x}, {64, 128});
  auto a = b.op("aten::add.Tensor", {m, s}, {64, 128}, {GraphBuilder::scalar(1)});
  auto r = b.op("aten::relu", {a}, {64, 128});
  for (const ir::Value& v : {m, a, r}) v.node->outputs[0].dtype = ir::DType::kBFloat16;
  *add = a;
  Program p = make_program(ir::build_graph({r}));
  p.target = target;
  run_passes(p, pass_names());
  return p;
}

TEST(FusionPlan, ABf16AddOfANumberJoinsTheChainOnTheCpu) {
  // ATen's CPU add rounds the f32 number to bf16 first; the kernel does
  // the same (value_emitter.cpp), so mul, add and relu are one kernel.
  GraphBuilder b;
  ir::Value a;
  Program p = bf16_chain_adding_a_number(b, Target::kCpu, &a);
  EXPECT_GE(p.ops[disc::testing::index_of(p, a)].group, 0);
  EXPECT_EQ(p.plan.kernels.size(), 1u);
  EXPECT_TRUE(p.plan.declined.empty());
}

TEST(FusionPlan, ABf16OpWithANumberItDoesNotTakeStaysOutOfTheChain) {
  // On the CUDA target no number is taken (its rounding is not ATen CPU's):
  // the add runs on ATen, and mul and relu each stay kernels of their own.
  GraphBuilder b;
  ir::Value a;
  Program p = bf16_chain_adding_a_number(b, Target::kCuda, &a);
  EXPECT_EQ(p.ops[disc::testing::index_of(p, a)].group, -1);
  EXPECT_EQ(p.groups.size(), 2u);
  EXPECT_TRUE(p.plan.declined.empty());
  // Nor, on the CPU, by an op other than add, sub, mul and div.
  GraphBuilder c;
  auto x = c.param({64, 128}, ir::DType::kBFloat16);
  auto s = c.param({}, ir::DType::kFloat32);
  auto m = c.op("aten::mul.Tensor", {x, x}, {64, 128});
  auto w = c.op("aten::addcmul_", {m, x, s}, {64, 128}, {GraphBuilder::scalar(1)});
  auto r = c.op("aten::relu", {w}, {64, 128});
  for (const ir::Value& v : {m, w, r}) v.node->outputs[0].dtype = ir::DType::kBFloat16;
  Program q = planned({r});
  EXPECT_EQ(q.ops[disc::testing::index_of(q, w)].group, -1);
  EXPECT_TRUE(q.plan.declined.empty());
}
