// The instruction set disc's CPU code may use: the CPU's own, or a lower one
// chosen with DISC_CPU_ISA, so that one machine can check the code paths of
// every kind of CPU users run (an AVX-512 host runs what an AVX2-only one
// would; an SVE host what a NEON-only one would). Everything ISA-dependent
// asks here, never the CPU: the MLIR JIT's target (mlir_jit.cpp), oneDNN's
// maximum ISA (onednn_engine.cpp), the exp variant of generated kernels
// (math_functions.cpp), whether bf16 is native, and the persistent kernel
// cache's key, so a kernel compiled under one ISA is never loaded under a
// lower one.
#pragma once
#include <cstdint>
#include <string>

namespace disc::runtime {

// Two families, each ordered: a level includes the ones below it in its
// family. x86-64-v2 / v3 / v4 are the psABI's microarchitecture levels.
enum class CpuIsa : uint8_t {
  kGeneric,     // no vector extension disc chooses: x86-64 (SSE2), or AArch64 scalar code
  // x86-64
  kSse42,       // x86-64-v2
  kAvx2,        // x86-64-v3: AVX2, FMA, BMI2, F16C
  kAvx512,      // x86-64-v4: AVX-512 F/BW/CD/DQ/VL
  kAvx512Bf16,  // + AVX512-BF16 (native bf16 dot products)
  kAmx,         // + AMX tiles (bf16 / int8)
  // AArch64
  kNeon,        // Advanced SIMD, 128-bit: every AArch64 CPU
  kSve,         // + SVE at the CPU's vector length (sve_vector_bits())
  kSveBf16,     // + the BF16 extension (BFCVT, BFDOT, BFMMLA)
};

// What this CPU (and its OS, which must save the wider registers) supports.
CpuIsa native_cpu_isa();

// The ISA disc uses: the native one, or DISC_CPU_ISA's cap when that is
// lower. Read once (the option is kProcess). A cap from the other family
// (avx2 on Arm, neon on x86) throws std::invalid_argument naming the option.
CpuIsa cpu_isa();

// True when DISC_CPU_ISA lowered the ISA below the native one.
bool cpu_isa_capped();

// True when `isa` is in `level`'s family and at least `level`.
bool cpu_isa_at_least(CpuIsa isa, CpuIsa level);

// The SVE vector length in bits this process runs with (128..2048, a
// multiple of 128), read from the kernel; 0 without SVE.
int sve_vector_bits();

// "generic", "sse4.2", "avx2", "avx512", "avx512_bf16", "amx", "neon",
// "sve", "sve_bf16".
const char* cpu_isa_name(CpuIsa isa);

}  // namespace disc::runtime
