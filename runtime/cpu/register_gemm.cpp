#include "runtime/cpu/register_gemm.h"

namespace disc::runtime {

namespace {

DISC_AT_AVX512 void gemm_avx512(const RegisterGemm& g) { register_gemm<lanes(VectorLevel::kAvx512)>(g); }
DISC_AT_AVX2 void gemm_avx2(const RegisterGemm& g) { register_gemm<lanes(VectorLevel::kAvx2)>(g); }
void gemm_baseline(const RegisterGemm& g) { register_gemm<lanes(VectorLevel::kBaseline)>(g); }

}  // namespace

void register_gemm_at(VectorLevel level, const RegisterGemm& g) {
  by_level<void (*)(const RegisterGemm&)>(level, gemm_avx512, gemm_avx2, gemm_baseline)(g);
}

}  // namespace disc::runtime
