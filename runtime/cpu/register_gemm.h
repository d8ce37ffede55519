// A float32 GEMM for the small products inside the fused attention (one
// head's q @ k^T at MiniLM's [128, 32] is 0.5M multiply-adds): C (+)= A @ B
// with C in register tiles, written once in N-lane vectors and compiled
// into each vector level's code (vector_level.h).
//
// oneDNN's calls cost ~2 us each before any arithmetic, most of a [32, 32]
// @ [32, 32] product, and its kernels gain little up to 2^20 multiply-adds
// (a whole head's attention at [128, 64] runs as fast either way). Above
// that oneDNN's blocking for the caches wins, so the attention calls this
// only up to register_gemm_fits(). Measured, one thread, Intel Xeon
// (AVX-512), us (oneDNN / this): [32, 32] @ [32, 32] 2.3 / 0.4; [128, 32] @
// [32, 128] 6.9-12.6 / 6.8; [128, 128] @ [128, 32] 6.9 / 6.1; [128, 64] @
// [64, 128] 10.6 / 12.9; [256, 64] @ [64, 256] 42-77 / 60. Capped at AVX2:
// 2.5 / 0.8, 16.5 / 13.3, 12-15 / 12.8, 21-27 / 25, 69-93 / 147.
//
// Each element of C sums its products in k order, one multiply-add at a
// time (fused where the level has FMA), the same at every tile position.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/cpu/vector_level.h"

namespace disc::runtime {

// A: element (i, p) at a[i * row_stride + p * col_stride] (any strides: A
// is read a scalar at a time). B: row p at b + p * row_stride, its n
// elements contiguous. C: row i at c + i * row_stride, written, or added to
// when `add`.
struct RegisterGemm {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t a_row_stride = 0, a_col_stride = 1;
  const float* b = nullptr;
  int64_t b_row_stride = 0;
  float* c = nullptr;
  int64_t c_row_stride = 0;
  bool add = false;
};

constexpr int64_t kRegisterGemmMaxProducts = int64_t{1} << 20;

inline bool register_gemm_fits(int64_t m, int64_t n, int64_t k) {
  return m * n * k <= kRegisterGemmMaxProducts;
}

// `g` at `level`, which the CPU must run (the attention inlines
// register_gemm<N>() into its own per-level code instead).
void register_gemm_at(VectorLevel level, const RegisterGemm& g);

// Vectors pass between these functions only after inlining.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace register_gemm_detail {

#define DISC_REGISTER_GEMM __attribute__((always_inline)) inline

template <int N>
using F32 = typename Vec<N>::F32;

// Rows of the tile: 8 x 2 vectors is 16 accumulators, half of AVX-512's
// registers; AVX2 and SSE2 have 16, so 4 x 2 there.
template <int N>
constexpr int kTileRows = N == 16 ? 8 : 4;

// C's [R, V * N] tile at (a, b, c): the accumulators stay in registers
// over the whole k loop.
template <int N, int R, int V>
DISC_REGISTER_GEMM void tile(int64_t k, const float* a, int64_t ars, int64_t acs, const float* b,
                             int64_t brs, float* c, int64_t crs, bool add) {
  F32<N> acc[R][V];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[i][v] = add ? load_lanes<N>(c + i * crs + v * N) : F32<N>{};
  for (int64_t p = 0; p < k; ++p) {
    F32<N> row[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) row[v] = load_lanes<N>(b + p * brs + v * N);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const float x = a[i * ars + p * acs];
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[i][v] += row[v] * x;
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) store_lanes<N>(c + i * crs + v * N, acc[i][v]);
}

// C's rows i .. i + R - 1, all n columns: two vectors at a time, then one,
// then the last n % N columns through a zero-padded copy of B's (`tail_b`,
// [k, N]) and a buffer for C's.
template <int N, int R>
DISC_REGISTER_GEMM void row_strip(const RegisterGemm& g, int64_t i, const float* tail_b) {
  const float* a = g.a + i * g.a_row_stride;
  float* c = g.c + i * g.c_row_stride;
  int64_t j = 0;
  for (; j + 2 * N <= g.n; j += 2 * N)
    tile<N, R, 2>(g.k, a, g.a_row_stride, g.a_col_stride, g.b + j, g.b_row_stride, c + j,
                  g.c_row_stride, g.add);
  for (; j + N <= g.n; j += N)
    tile<N, R, 1>(g.k, a, g.a_row_stride, g.a_col_stride, g.b + j, g.b_row_stride, c + j,
                  g.c_row_stride, g.add);
  const int64_t rest = g.n - j;
  if (rest == 0) return;
  float out[R * N] = {};
  for (int i = 0; i < R && g.add; ++i) std::memcpy(out + i * N, c + i * g.c_row_stride + j, rest * sizeof(float));
  tile<N, R, 1>(g.k, a, g.a_row_stride, g.a_col_stride, tail_b, N, out, N, g.add);
  for (int i = 0; i < R; ++i) std::memcpy(c + i * g.c_row_stride + j, out + i * N, rest * sizeof(float));
}

}  // namespace register_gemm_detail

template <int N>
DISC_REGISTER_GEMM void register_gemm(const RegisterGemm& g) {
  using namespace register_gemm_detail;
  if (g.m == 0 || g.n == 0) return;
  thread_local std::vector<float> tail_b;
  const int64_t first_tail = g.n - g.n % N;
  if (first_tail < g.n) {
    tail_b.assign(g.k * N, 0.f);
    for (int64_t p = 0; p < g.k; ++p)
      std::memcpy(tail_b.data() + p * N, g.b + p * g.b_row_stride + first_tail,
                  (g.n - first_tail) * sizeof(float));
  }
  constexpr int R = kTileRows<N>;
  int64_t i = 0;
  for (; i + R <= g.m; i += R) row_strip<N, R>(g, i, tail_b.data());
  if (R > 4 && i + 4 <= g.m) row_strip<N, 4>(g, i, tail_b.data()), i += 4;
  if (i + 2 <= g.m) row_strip<N, 2>(g, i, tail_b.data()), i += 2;
  if (i < g.m) row_strip<N, 1>(g, i, tail_b.data());
}

#pragma GCC diagnostic pop

}  // namespace disc::runtime
