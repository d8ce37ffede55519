// Whether bf16 GEMMs and convolutions run oneDNN's bf16 kernels or are
// widened to f32 (the caller converts the operands, runs the f32 primitive
// and rounds the result once). A bf16 product is exact in f32 and both
// kernels accumulate in f32, so the two differ in summation order only.
//
// Having bf16 instructions does not make them fast: on an Intel Xeon VM
// with AVX512-BF16 and no AMX, oneDNN 2.6's bf16 brgemm ran [1024 x 384] @
// [384 x 1536] in 6.9-7.2 ms and its f32 one in 3.5 (2 threads; widened,
// conversions included, 4.1), and its bf16 convolutions ran at half the f32
// rate too ([8, 64, 56, 56] 3x3 to 64 channels: 10.4 against 5.3 ms); on an
// AMD EPYC with the same flags the bf16 GEMM took 1.4 ms and a widened one
// 4.4. So unless DISC_ONEDNN_BF16 says, the process times both once, at a
// size where each runs at its steady rate, and widens only when f32 is
// clearly faster: a near tie keeps the bf16 kernels, so timing noise is
// unlikely to flip the choice between runs on one machine.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/cpu/onednn_gemm.h"
#include "runtime/options.h"

namespace disc::runtime {

namespace {

// f32 must take at most this share of bf16's time to be chosen.
constexpr double kWidenBelow = 0.7;

// One GEMM of kSize^3 in `type`, on ones (bf16 1.0 is 0x3f80: no
// denormals, no overflow).
struct Trial {
  static constexpr int64_t kSize = 512;
  std::vector<uint16_t> ones16 = std::vector<uint16_t>(kSize * kSize, 0x3f80);
  std::vector<float> ones32 = std::vector<float>(kSize * kSize, 1.f);
  std::vector<float> c = std::vector<float>(kSize * kSize);
  Gemm g;

  Trial(GemmType type, int threads) {
    const void* ones = type == GemmType::kFloat32 ? static_cast<const void*>(ones32.data())
                                                  : ones16.data();
    g.type = type;
    g.m = g.n = g.k = kSize;
    g.a = {ones, 0, kSize, 1};
    g.b = {ones, 0, kSize, 1};
    g.c = c.data();
    g.threads = threads;
    onednn_gemm(g);  // makes the primitive
  }

  double ms() const {
    const auto start = std::chrono::steady_clock::now();
    onednn_gemm(g);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
};

// The best of several runs each, taken in turns, so that a burst of other
// work on the machine slows both rather than one.
bool measured_slower(int threads) {
  const Trial f32(GemmType::kFloat32, threads), bf16(GemmType::kBFloat16, threads);
  double best_f32 = 1e30, best_bf16 = 1e30;
  for (int turn = 0; turn < 8; ++turn) {
    best_f32 = std::min(best_f32, f32.ms());
    best_bf16 = std::min(best_bf16, bf16.ms());
  }
  return best_f32 < kWidenBelow * best_bf16;
}

}  // namespace

bool onednn_bf16_widened(int threads) {
  if (!onednn_bf16_native()) return true;
  switch (options::choice(options::Id::kOnednnBf16)) {
    case 1: return false;  // native
    case 2: return true;   // widened
    default: break;        // auto
  }
  static const bool slower = measured_slower(threads);
  return slower;
}

}  // namespace disc::runtime
