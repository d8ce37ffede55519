// The MLIR JIT: a kernel in text compiles for the host and runs.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/mlir_jit.h"

using disc::runtime::JitModule;
using disc::runtime::MemRef1D;

namespace {

const char* kTanhExp = R"mlir(
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

void expect_tanh_exp(const JitModule& jit) {
  std::vector<float> a = {0.f, 0.5f, -1.f, 3.f}, b(4);
  MemRef1D<float> ma{a.data(), a.data(), 0, 4, 1}, mb{b.data(), b.data(), 0, 4, 1};
  int64_t n = 4;
  std::vector<void*> args;
  ma.pack(args);
  mb.pack(args);
  args.push_back(&n);
  jit.invoke_packed("k", args);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(b[k], std::exp(std::tanh(a[k])), 1e-6);
}

}  // namespace

TEST(MlirJit, CompilesAndRunsAnElementwiseLoop) {
  std::string llvm_ir;
  auto jit = JitModule::compile(kTanhExp, &llvm_ir);
  EXPECT_NE(llvm_ir.find("define"), std::string::npos);
  expect_tanh_exp(*jit);
}

TEST(MlirJit, ObjectFromACompileLoadsAndRunsWithoutLlvmCodegen) {
  // What the persistent cache stores: the native object, linked back later
  // against libm of this process (tanhf, expf).
  std::string object;
  auto compiled = JitModule::compile(kTanhExp, nullptr, &object);
  ASSERT_GT(object.size(), 64u);
  EXPECT_EQ(object.compare(1, 3, "ELF"), 0);
  auto loaded = JitModule::load(object);
  expect_tanh_exp(*loaded);
  EXPECT_THROW(loaded->lookup("no_such_fn"), std::runtime_error);
}

TEST(MlirJit, GarbageObjectIsAnErrorNotACrash) {
  EXPECT_THROW(JitModule::load("not an object file"), std::runtime_error);
}

TEST(MlirJit, HostTargetNamesLlvmAndCpu) {
  const std::string t = disc::runtime::host_target();
  EXPECT_EQ(t.rfind("llvm-15", 0), 0u) << t;
  EXPECT_NE(t.find("x86_64"), std::string::npos) << t;
}

TEST(MlirJit, ParseErrorsCarryTheDiagnostic) {
  try {
    JitModule::compile("func.func @k( {");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("mlir parse failed"), std::string::npos);
  }
}
