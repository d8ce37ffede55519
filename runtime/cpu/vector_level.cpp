#include "runtime/cpu/vector_level.h"

#include "runtime/cpu/cpu_isa.h"

namespace disc::runtime {

namespace {

VectorLevel level_of(CpuIsa isa) {
#if defined(__x86_64__)
  if (cpu_isa_at_least(isa, CpuIsa::kAvx512)) return VectorLevel::kAvx512;
  if (cpu_isa_at_least(isa, CpuIsa::kAvx2)) return VectorLevel::kAvx2;
#else
  (void)isa;
#endif
  return VectorLevel::kBaseline;
}

}  // namespace

VectorLevel vector_level() {
  static const VectorLevel level = level_of(cpu_isa());
  return level;
}

bool vector_level_runs(VectorLevel level) {
  return static_cast<uint8_t>(level) <= static_cast<uint8_t>(level_of(native_cpu_isa()));
}

const char* vector_level_name(VectorLevel level) {
  switch (level) {
    case VectorLevel::kAvx512: return "avx512";
    case VectorLevel::kAvx2: return "avx2";
    case VectorLevel::kBaseline: break;
  }
  return "baseline";
}

}  // namespace disc::runtime
