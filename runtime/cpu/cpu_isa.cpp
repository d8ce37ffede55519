#include "runtime/cpu/cpu_isa.h"

#include <stdexcept>
#include <string>

#if defined(__aarch64__)
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

#include "runtime/options.h"

namespace disc::runtime {

namespace {

bool is_arm(CpuIsa isa) { return isa >= CpuIsa::kNeon; }

// x86: __builtin_cpu_supports checks the OS too: AVX and AVX-512 count only
// when the kernel saves their registers (XCR0). AArch64: the kernel's
// hardware capabilities, which are what it enables for user space (qemu's
// user mode reports its emulated CPU's the same way; /proc/cpuinfo there is
// the host's).
CpuIsa detect() {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("x86-64-v2")) return CpuIsa::kGeneric;
  if (!__builtin_cpu_supports("x86-64-v3")) return CpuIsa::kSse42;
  if (!__builtin_cpu_supports("x86-64-v4")) return CpuIsa::kAvx2;
  if (!__builtin_cpu_supports("avx512bf16")) return CpuIsa::kAvx512;
  if (!__builtin_cpu_supports("amx-bf16")) return CpuIsa::kAvx512Bf16;
  return CpuIsa::kAmx;
#elif defined(__aarch64__)
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  if (!(hwcap & HWCAP_ASIMD)) return CpuIsa::kGeneric;
  if (!(hwcap & HWCAP_SVE)) return CpuIsa::kNeon;
  // A CPU with BF16 but no SVE (some NEON-only cores) counts as kNeon: its
  // bf16 conversions are then done in software, correct and slower.
  if (!(hwcap2 & HWCAP2_BF16)) return CpuIsa::kSve;
  return CpuIsa::kSveBf16;
#else
  return CpuIsa::kGeneric;
#endif
}

// DISC_CPU_ISA's choices after "native", in options.def's order.
constexpr CpuIsa kCaps[] = {CpuIsa::kAvx512Bf16, CpuIsa::kAvx512, CpuIsa::kAvx2,
                            CpuIsa::kSse42,      CpuIsa::kSveBf16, CpuIsa::kSve,
                            CpuIsa::kNeon,       CpuIsa::kGeneric};

CpuIsa effective() {
  const int64_t choice = options::choice(options::Id::kCpuIsa);
  const CpuIsa native = native_cpu_isa();
  if (choice == 0) return native;
  const CpuIsa cap = kCaps[choice - 1];
  if (cap == CpuIsa::kGeneric) return cap;
  if (is_arm(cap) != is_arm(native))
    throw std::invalid_argument("DISC_CPU_ISA=" + options::text(options::Id::kCpuIsa) + ": an " +
                                (is_arm(cap) ? "AArch64" : "x86") + " level, and this CPU is " +
                                cpu_isa_name(native));
  return cap < native ? cap : native;
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

bool cpu_isa_at_least(CpuIsa isa, CpuIsa level) {
  return is_arm(isa) == is_arm(level) && isa >= level;
}

int sve_vector_bits() {
#if defined(__aarch64__)
  if (!(getauxval(AT_HWCAP) & HWCAP_SVE)) return 0;
  const int vl = prctl(PR_SVE_GET_VL);
  return vl < 0 ? 0 : (vl & PR_SVE_VL_LEN_MASK) * 8;
#else
  return 0;
#endif
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric: return "generic";
    case CpuIsa::kSse42: return "sse4.2";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512_bf16";
    case CpuIsa::kAmx: return "amx";
    case CpuIsa::kNeon: return "neon";
    case CpuIsa::kSve: return "sve";
    case CpuIsa::kSveBf16: return "sve_bf16";
  }
  return "?";
}

}  // namespace disc::runtime
