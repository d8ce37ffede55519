// The x86 instruction set disc's CPU code may use: the CPU's own, or a
// lower one chosen with DISC_CPU_ISA, so that one machine can check the code
// paths of every kind of CPU users run (an AVX-512 host runs what an
// AVX2-only one would). Everything ISA-dependent asks here, never the CPU:
// the MLIR JIT's target (mlir_jit.cpp), oneDNN's maximum ISA
// (onednn_engine.cpp), the exp variant of generated kernels
// (math_functions.cpp), whether bf16 is native, and the persistent kernel
// cache's key, so a kernel compiled under one ISA is never loaded under a
// lower one.
#pragma once
#include <cstdint>
#include <string>

namespace disc::runtime {

// Ordered: each level includes the ones below it. x86-64-v2 / v3 / v4 are
// the psABI's microarchitecture levels.
enum class CpuIsa : uint8_t {
  kGeneric,     // not x86, or x86-64 without SSE4.2
  kSse42,       // x86-64-v2
  kAvx2,        // x86-64-v3: AVX2, FMA, BMI2, F16C
  kAvx512,      // x86-64-v4: AVX-512 F/BW/CD/DQ/VL
  kAvx512Bf16,  // + AVX512-BF16 (native bf16 dot products)
  kAmx,         // + AMX tiles (bf16 / int8)
};

// What this CPU (and its OS, which must save the wider registers) supports.
CpuIsa native_cpu_isa();

// The ISA disc uses: the native one, or DISC_CPU_ISA's cap when that is
// lower. Read once (the option is kProcess). A cap on a non-x86 CPU throws
// std::invalid_argument naming the option.
CpuIsa cpu_isa();

// True when DISC_CPU_ISA lowered the ISA below the native one.
bool cpu_isa_capped();

// "generic", "sse4.2", "avx2", "avx512", "avx512_bf16", "amx".
const char* cpu_isa_name(CpuIsa isa);

}  // namespace disc::runtime
