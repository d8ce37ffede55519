// The MLIR JIT: a kernel in text compiles for the host and runs.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "lowering/codegen/cpu/math_functions.h"
#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/mlir_jit.h"

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
  // Polynomial tanh and exp (see approximate_math): a few float ulp.
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(b[k], std::exp(std::tanh(a[k])), 2e-6 * std::exp(1.f));
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
  EXPECT_EQ(t.rfind("jit-", 0), 0u) << t;  // the pipeline version comes first
  EXPECT_NE(t.find("/llvm-15"), std::string::npos) << t;
#if defined(__aarch64__)
  EXPECT_NE(t.find("aarch64"), std::string::npos) << t;  // kernels of one architecture never load on another
#else
  EXPECT_NE(t.find("x86_64"), std::string::npos) << t;
#endif
}

// Under DISC_CPU_ISA (test.sh runs this binary capped too) kernels are made
// for the cap's level (x86: its psABI CPU; AArch64: the generic CPU), and
// the persistent cache's key says so: a kernel made for a wider ISA is never
// loaded.
TEST(MlirJit, CappedTargetNamesItsLevelAndNothingAboveIt) {
  using disc::runtime::CpuIsa;
  using disc::runtime::cpu_isa_at_least;
  if (!disc::runtime::cpu_isa_capped()) GTEST_SKIP() << "DISC_CPU_ISA does not cap this CPU";
  const std::string t = disc::runtime::host_target();
  const CpuIsa isa = disc::runtime::cpu_isa();
#if defined(__aarch64__)
  EXPECT_NE(t.find("/generic"), std::string::npos) << t;
  if (!cpu_isa_at_least(isa, CpuIsa::kSve)) EXPECT_EQ(t.find(",sve"), std::string::npos) << t;
#else
  EXPECT_NE(t.find("/x86-64"), std::string::npos) << t;
  if (!cpu_isa_at_least(isa, CpuIsa::kAvx512)) EXPECT_EQ(t.find("avx512"), std::string::npos) << t;
  if (!cpu_isa_at_least(isa, CpuIsa::kAvx2)) EXPECT_EQ(t.find("avx"), std::string::npos) << t;
#endif
}

TEST(MlirJit, ParseErrorsCarryTheDiagnostic) {
  try {
    JitModule::compile("func.func @k( {");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("mlir parse failed"), std::string::npos);
  }
}

// Runs `call` (one f32 -> f32 MLIR expression of %x, with disc_expf in
// scope) over every element of `a`, JIT-compiled as a scalar loop. With
// `pow2`, `call` maps vector<16xf32> instead, with that disc_expf16 in scope,
// and the loop loads 16 elements at a time (`a` padded with zeros).
static std::vector<float> run_elementwise(const std::string& call, const std::vector<float>& a,
                                          std::optional<disc::lowering::Pow2> pow2 = std::nullopt) {
  const std::string type = pow2 ? "vector<16xf32>" : "f32";
  const std::string load = pow2 ? "vector.load %a[%i] : memref<?xf32>, vector<16xf32>"
                                : "memref.load %a[%i] : memref<?xf32>";
  const std::string store = pow2 ? "vector.store %y, %b[%i] : memref<?xf32>, vector<16xf32>"
                                 : "memref.store %y, %b[%i] : memref<?xf32>";
  const std::string text = R"mlir(
func.func @k(%a: memref<?xf32>, %b: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant )mlir" + std::string(pow2 ? "16" : "1") + R"mlir( : index
  scf.for %i = %c0 to %n step %c1 {
    %x = )mlir" + load + R"mlir(
    %y = )mlir" + call + R"mlir(
    )mlir" + store + R"mlir(
  }
  return
}
)mlir" + (pow2 ? disc::lowering::expf_function(16, *pow2) : disc::lowering::expf_function());
  std::vector<float> in = a;
  if (pow2) in.resize((a.size() + 15) / 16 * 16, 0.f);
  std::vector<float> b(in.size());
  auto jit = JitModule::compile(text);
  MemRef1D<float> ma{in.data(), in.data(), 0, static_cast<int64_t>(in.size()), 1};
  MemRef1D<float> mb{b.data(), b.data(), 0, static_cast<int64_t>(b.size()), 1};
  int64_t n = static_cast<int64_t>(in.size());
  std::vector<void*> args;
  ma.pack(args);
  mb.pack(args);
  args.push_back(&n);
  jit->invoke_packed("k", args);
  b.resize(a.size());
  return b;
}

// log and tanh are MLIR's polynomials, not libm calls (so that they
// vectorize); their error over the float range training meets, in ulp of
// the libm result: the bound the op-parity tolerances rely on. (exp is
// codegen's own: ExpVariants below.)
TEST(MlirJit, MathApproximationsStayWithinAFewUlp) {
  for (const std::string fn : {"log", "tanh"}) {
    std::vector<float> a;
    for (int k = -20000; k <= 20000; ++k) a.push_back(fn == "log" ? std::exp(k * 0.004f) : k * 0.0005f);
    const std::vector<float> b = run_elementwise("math." + fn + " %x : f32", a);
    double worst = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      const float want = fn == "log" ? std::log(a[k]) : std::tanh(a[k]);
      const float ulp = std::nextafter(std::fabs(want), INFINITY) - std::fabs(want);
      worst = std::max(worst, std::fabs(static_cast<double>(b[k]) - want) / ulp);
    }
    std::printf("math.%s: worst %.1f ulp\n", fn.c_str(), worst);
    EXPECT_LE(worst, 4.0) << fn;
  }
}

// Each way of applying 2^k, in the vector exp that kernels call (vscalefps
// only where the CPU has AVX-512F) and in the scalar one.
class ExpVariants : public ::testing::TestWithParam<int> {
 protected:
  std::vector<float> exp_of(const std::vector<float>& a) {
    using disc::lowering::Pow2;
    if (GetParam() == 0) return run_elementwise("func.call @disc_expf(%x) : (f32) -> f32", a);
    const Pow2 pow2 = GetParam() == 1 ? Pow2::kExponentBits : Pow2::kScalef;
    if (pow2 == Pow2::kScalef &&
        !disc::runtime::cpu_isa_at_least(disc::runtime::cpu_isa(), disc::runtime::CpuIsa::kAvx512))
      return {};
    return run_elementwise("func.call @disc_expf16(%x) : (vector<16xf32>) -> vector<16xf32>", a, pow2);
  }
};

// The ends of exp's range, where the clamp bounds (not selects) make the
// result: overflow to +inf, underflow to 0 through the subnormals, NaN.
TEST_P(ExpVariants, EndsOfTheRangeMatchLibm) {
  std::vector<float> a = {-INFINITY, INFINITY, NAN, -1e30f, 1e30f, -200.f, 200.f, -104.5f, -104.f,
                          -103.98f, -103.972f, -103.9f, 88.7f, 88.72f, 88.7228f, 88.7229f,
                          88.75f, 88.8f, 88.81f, 89.f};
  for (float x = -104.5f; x < -85.f; x += 0.0007f) a.push_back(x);
  for (float x = 85.f; x < 89.f; x += 0.0003f) a.push_back(x);
  const std::vector<float> b = exp_of(a);
  if (b.empty()) GTEST_SKIP() << "no AVX-512F on this CPU";
  for (size_t k = 0; k < a.size(); ++k) {
    const float want = std::exp(a[k]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(b[k])) << "exp(" << a[k] << ")";
    } else if (std::isinf(want) || want == 0.f) {
      EXPECT_EQ(b[k], want) << "exp(" << a[k] << ")";
    } else {
      const float ulp = std::nextafter(want, INFINITY) - want;
      EXPECT_LE(std::fabs(b[k] - want), ulp) << "exp(" << a[k] << ") = " << b[k] << ", libm " << want;
    }
  }
}

TEST_P(ExpVariants, WithinTwoUlpOverTheTrainingRange) {
  std::vector<float> a;
  for (int k = -20000; k <= 20000; ++k) a.push_back(k * 0.0043f);
  const std::vector<float> b = exp_of(a);
  if (b.empty()) GTEST_SKIP() << "no AVX-512F on this CPU";
  double worst = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    const float want = std::exp(a[k]);
    const float ulp = std::nextafter(want, INFINITY) - want;
    worst = std::max(worst, std::fabs(static_cast<double>(b[k]) - want) / ulp);
  }
  EXPECT_LE(worst, 2.0);
}

INSTANTIATE_TEST_SUITE_P(MlirJit, ExpVariants, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string(p.param == 0 ? "Scalar" : p.param == 1 ? "ExponentBits" : "Scalef");
                         });
