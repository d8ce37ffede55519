// codegen: the last pass writes each planned kernel's code for the
// program's target, the text the target's emitter gives that group.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "lowering/codegen/cpu/fused_kernel.h"
#include "lowering/codegen/cuda/kernels.h"
#include "lowering/passes/pipeline.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::compiled;
using disc::testing::GraphBuilder;

namespace {

// exp(x) * y, and a softmax of its own: a kLoop and a kStitch kernel.
std::vector<ir::Value> two_kernels(GraphBuilder& b) {
  auto x = b.param({8, 32}), y = b.param({8, 32});
  auto m = b.op("aten::mul.Tensor", {b.op("aten::exp", {x}, {8, 32}), y}, {8, 32});
  auto s = b.op("aten::_softmax", {y}, {8, 32}, {GraphBuilder::integer(-1), GraphBuilder::boolean(false)});
  return {m, s};
}

Program for_target(const std::vector<ir::Value>& roots, Target target) {
  Program p = make_program(ir::build_graph(roots));
  p.target = target;
  run_passes(p, pass_names());
  return p;
}

}  // namespace

TEST(Codegen, IsThePipelinesLastPass) {
  EXPECT_EQ(pass_names().back(), "codegen");
}

TEST(Codegen, CpuCodeIsTheCpuEmittersMlirForEachKernel) {
  GraphBuilder b;
  Program p = compiled(two_kernels(b));
  ASSERT_EQ(p.plan.kernels.size(), 2u);
  ASSERT_EQ(p.plan.code.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    std::string why;
    std::optional<FusedKernel> emitted = emit_fused_kernel(p, p.plan.kernels[k].group, &why);
    ASSERT_TRUE(emitted) << why;
    EXPECT_EQ(p.plan.code[k].name, emitted->name);
    EXPECT_EQ(p.plan.code[k].text, emitted->mlir);
    EXPECT_NE(p.plan.code[k].text.find("func.func @" + emitted->name), std::string::npos);
  }
  EXPECT_EQ(p.plan.code[0].name, "loop_kernel");
  EXPECT_EQ(p.plan.code[1].name, "row_kernel");
}

TEST(Codegen, CudaTargetWritesCudaSourceForTheSamePlan) {
  GraphBuilder b;
  auto roots = two_kernels(b);
  Program cpu = for_target(roots, Target::kCpu);
  Program cuda = for_target(roots, Target::kCuda);
  ASSERT_EQ(cuda.plan.code.size(), cpu.plan.code.size());
  EXPECT_EQ(cuda.plan.to_string().substr(0, cuda.plan.to_string().find("  code ")),
            cpu.plan.to_string().substr(0, cpu.plan.to_string().find("  code ")));
  for (size_t k = 0; k < cuda.plan.code.size(); ++k) {
    std::string why;
    std::optional<CudaKernel> emitted = emit_cuda_kernel(cuda, cuda.plan.kernels[k].group, &why);
    ASSERT_TRUE(emitted) << why;
    EXPECT_EQ(cuda.plan.code[k].name, emitted->name);
    EXPECT_EQ(cuda.plan.code[k].text, emitted->source);
    EXPECT_NE(cuda.plan.code[k].text.find("extern \"C\" __global__ void " + emitted->name),
              std::string::npos);
  }
}

TEST(Codegen, F16KernelsAreTheCpusOnly) {
  // exp(x * x) in f16, then widened: one kernel on the CPU, which loads and
  // stores the 16 bits; the CUDA emitter has no f16 conversions, so there
  // the ops stay out of every group (ATen's), and nothing is declined.
  GraphBuilder b;
  auto x = b.param({8, 32}, ir::DType::kFloat16);
  auto m = b.op("aten::mul.Tensor", {x, x}, {8, 32});
  auto e = b.op("aten::exp", {m}, {8, 32});
  for (const ir::Value& v : {m, e}) v.node->outputs[0].dtype = ir::DType::kFloat16;
  auto wide = b.op("aten::_to_copy", {e}, {8, 32});
  Program cpu = for_target({e, wide}, Target::kCpu);
  ASSERT_EQ(cpu.plan.kernels.size(), 1u);
  EXPECT_NE(cpu.plan.code[0].text.find("memref<?xi16>"), std::string::npos);
  Program cuda = for_target({e, wide}, Target::kCuda);
  EXPECT_TRUE(cuda.plan.kernels.empty());
  EXPECT_TRUE(cuda.plan.declined.empty());
}

TEST(Codegen, PrintsEachKernelsCodeAfterThePlan) {
  GraphBuilder b;
  Program p = compiled(two_kernels(b));
  const std::string text = p.to_string();
  EXPECT_NE(text.find("  code 0 @loop_kernel\n"), std::string::npos);
  EXPECT_NE(text.find("  code 1 @row_kernel\n"), std::string::npos);
}

TEST(Codegen, PlanLeavesItOutAndWriteCodeAddsIt) {
  GraphBuilder b;
  const ir::Graph g = ir::build_graph(two_kernels(b));
  CompileResult r = plan(g);
  EXPECT_EQ(r.program.plan.kernels.size(), 2u);
  EXPECT_TRUE(r.program.plan.code.empty());
  EXPECT_EQ(std::string(r.timings.back().pass), "publish-plan");
  const uint64_t signature = r.program.signature();
  write_code(r, g);
  EXPECT_EQ(std::string(r.timings.back().pass), "codegen");
  EXPECT_EQ(r.program.signature(), signature);  // the code is no decision of its own
  EXPECT_EQ(r.program.to_string(), compile(g).program.to_string());
}
