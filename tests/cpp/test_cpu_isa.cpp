// The ISA levels (runtime/cpu/cpu_isa.h): two ordered families, the
// detected level consistent with what the kernel says of the CPU, and the
// JIT's target built from the level, not from LLVM's reading of
// /proc/cpuinfo (which qemu's user mode does not emulate).
#include <gtest/gtest.h>

#include <string>

#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/mlir_jit.h"
#include "runtime/cpu/vector_level.h"

using disc::runtime::CpuIsa;
using disc::runtime::cpu_isa_at_least;

TEST(CpuIsa, LevelsCompareWithinTheirFamilyOnly) {
  EXPECT_TRUE(cpu_isa_at_least(CpuIsa::kAmx, CpuIsa::kAvx512));
  EXPECT_FALSE(cpu_isa_at_least(CpuIsa::kAvx2, CpuIsa::kAvx512));
  EXPECT_TRUE(cpu_isa_at_least(CpuIsa::kSveBf16, CpuIsa::kSve));
  EXPECT_FALSE(cpu_isa_at_least(CpuIsa::kNeon, CpuIsa::kSve));
  // An Arm level is not "at least AVX-512" because the enum puts it later.
  EXPECT_FALSE(cpu_isa_at_least(CpuIsa::kSve, CpuIsa::kAvx512));
  EXPECT_FALSE(cpu_isa_at_least(CpuIsa::kAvx512, CpuIsa::kNeon));
  EXPECT_STREQ(disc::runtime::cpu_isa_name(CpuIsa::kSveBf16), "sve_bf16");
}

TEST(CpuIsa, NativeLevelIsThisArchitecturesFamily) {
  const CpuIsa native = disc::runtime::native_cpu_isa();
#if defined(__aarch64__)
  EXPECT_TRUE(cpu_isa_at_least(native, CpuIsa::kNeon)) << disc::runtime::cpu_isa_name(native);
  // SVE's vector length is read from the kernel: a multiple of 128 bits.
  const int bits = disc::runtime::sve_vector_bits();
  if (cpu_isa_at_least(native, CpuIsa::kSve)) {
    EXPECT_GE(bits, 128);
    EXPECT_EQ(bits % 128, 0);
  } else {
    EXPECT_EQ(bits, 0);
  }
#elif defined(__x86_64__)
  EXPECT_FALSE(cpu_isa_at_least(native, CpuIsa::kNeon));
  EXPECT_EQ(disc::runtime::sve_vector_bits(), 0);
#endif
}

#if defined(__aarch64__)
// The target names every extension, on or off, so a CPU name cannot bring
// one above the level back; SVE code is for this vector length only.
TEST(CpuIsa, Aarch64TargetTurnsOnExactlyTheLevelsExtensions) {
  const std::string t = disc::runtime::host_target();
  const CpuIsa isa = disc::runtime::cpu_isa();
  const bool neon = cpu_isa_at_least(isa, CpuIsa::kNeon), sve = cpu_isa_at_least(isa, CpuIsa::kSve);
  EXPECT_EQ(t.find(",neon") != std::string::npos, neon) << t;
  EXPECT_EQ(t.find(",sve") != std::string::npos, sve) << t;
  EXPECT_EQ(t.find(",bf16") != std::string::npos, cpu_isa_at_least(isa, CpuIsa::kSveBf16)) << t;
  const std::string vl = ",vl" + std::to_string(disc::runtime::sve_vector_bits());
  EXPECT_EQ(t.find(vl) != std::string::npos, sve) << t;
}
#endif

// Hand-vectorized code runs at the level the ISA allows, capped like the
// rest by DISC_CPU_ISA (the capped test run checks the AVX2 level).
TEST(VectorLevel, FollowsTheIsaCap) {
  using disc::runtime::VectorLevel;
  const CpuIsa isa = disc::runtime::cpu_isa();
  const VectorLevel want = cpu_isa_at_least(isa, CpuIsa::kAvx512) ? VectorLevel::kAvx512
                           : cpu_isa_at_least(isa, CpuIsa::kAvx2) ? VectorLevel::kAvx2
                                                                  : VectorLevel::kBaseline;
  EXPECT_EQ(disc::runtime::vector_level(), want) << disc::runtime::cpu_isa_name(isa);
  EXPECT_TRUE(disc::runtime::vector_level_runs(disc::runtime::vector_level()));
  EXPECT_TRUE(disc::runtime::vector_level_runs(VectorLevel::kBaseline));
}
