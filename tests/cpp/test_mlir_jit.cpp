// The MLIR JIT: a kernel in text compiles for the host and runs.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/mlir_jit.h"

using disc::runtime::JitModule;
using disc::runtime::MemRef1D;

TEST(MlirJit, CompilesAndRunsAnElementwiseLoop) {
  const char* text = R"mlir(
func.func @k(%a: memref<?xf32>, %b: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %a[%i] : memref<?xf32>
    %t = math.tanh %x : f32
    %e = math.exp %t : f32
    memref.store %e, %b[%i] : memref<?xf32>
  }
  return
}
)mlir";
  std::string llvm_ir;
  auto jit = JitModule::compile(text, &llvm_ir);
  EXPECT_NE(llvm_ir.find("define"), std::string::npos);
  std::vector<float> a = {0.f, 0.5f, -1.f, 3.f}, b(4);
  MemRef1D<float> ma{a.data(), a.data(), 0, 4, 1}, mb{b.data(), b.data(), 0, 4, 1};
  int64_t n = 4;
  std::vector<void*> args;
  ma.pack(args);
  mb.pack(args);
  args.push_back(&n);
  jit->invoke_packed("k", args);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(b[k], std::exp(std::tanh(a[k])), 1e-6);
}

TEST(MlirJit, ParseErrorsCarryTheDiagnostic) {
  try {
    JitModule::compile("func.func @k( {");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("mlir parse failed"), std::string::npos);
  }
}
