#include "runtime/cpu/cpu_isa.h"

#include <stdexcept>
#include <string>

#include "runtime/options.h"

namespace disc::runtime {

namespace {

// __builtin_cpu_supports checks the OS too: AVX and AVX-512 count only when
// the kernel saves their registers (XCR0).
CpuIsa detect() {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("x86-64-v2")) return CpuIsa::kGeneric;
  if (!__builtin_cpu_supports("x86-64-v3")) return CpuIsa::kSse42;
  if (!__builtin_cpu_supports("x86-64-v4")) return CpuIsa::kAvx2;
  if (!__builtin_cpu_supports("avx512bf16")) return CpuIsa::kAvx512;
  if (!__builtin_cpu_supports("amx-bf16")) return CpuIsa::kAvx512Bf16;
  return CpuIsa::kAmx;
#else
  return CpuIsa::kGeneric;
#endif
}

// DISC_CPU_ISA's choices, in options.def's order ("native" first).
constexpr CpuIsa kCaps[] = {CpuIsa::kAmx, CpuIsa::kAvx512Bf16, CpuIsa::kAvx512, CpuIsa::kAvx2,
                            CpuIsa::kSse42};

CpuIsa effective() {
  const int64_t choice = options::choice(options::Id::kCpuIsa);
  if (choice == 0) return native_cpu_isa();
#if !defined(__x86_64__)
  throw std::invalid_argument("DISC_CPU_ISA=" + options::text(options::Id::kCpuIsa) +
                              ": the x86 levels apply to x86 CPUs only (use native)");
#endif
  const CpuIsa cap = kCaps[choice];
  return cap < native_cpu_isa() ? cap : native_cpu_isa();
}

}  // namespace

CpuIsa native_cpu_isa() {
  static const CpuIsa isa = detect();
  return isa;
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = effective();
  return isa;
}

bool cpu_isa_capped() { return cpu_isa() != native_cpu_isa(); }

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric: return "generic";
    case CpuIsa::kSse42: return "sse4.2";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512_bf16";
    case CpuIsa::kAmx: return "amx";
  }
  return "?";
}

}  // namespace disc::runtime
