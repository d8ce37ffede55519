#include "runtime/cpu/attention.h"
#pragma GCC diagnostic ignored "-Wpsabi"  // 64-byte vectors stay inside this file

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/cpu/onednn_gemm.h"
#include "runtime/cpu/philox.h"
#include "runtime/cpu/register_gemm.h"
#include "runtime/cpu/vector_level.h"

namespace disc::runtime {

namespace {

// The row functions are inlined into attention_forward's and
// attention_backward's bodies, which are compiled once per vector level
// (vector_level.h), N float lanes at a time: as many as the level's
// registers hold.
#define DISC_VECTOR_ROWS __attribute__((always_inline)) inline

template <int N>
using F32 = typename Vec<N>::F32;
template <int N>
using I32 = typename Vec<N>::I32;
template <int N>
using U8 = typename Vec<N>::U8;
constexpr float kInf = std::numeric_limits<float>::infinity();

template <int N>
DISC_VECTOR_ROWS F32<N> splat(float v) { return F32<N>{} + v; }

// e^x within ~1 ulp, and exactly 0 below -87 (-inf included): 2^k e^r with
// k = round(x / ln 2), r = x - k ln 2 in two parts (Cody-Waite), e^r by its
// Taylor polynomial of degree 7 (|r| <= ln 2 / 2: remainder below 6e-9).
// x is clamped to [-87, 88], where 2^k stays a normal float. Below -87 the
// result would be subnormal (< 1.7e-38): 0 instead, because subnormal
// operands make every later multiply and the GEMM with v take the CPU's
// slow path (a mask of finfo.min, as transformers writes padding and causal
// masks, made a [2, 12, 512, 64] forward 35x slower).
template <int N>
DISC_VECTOR_ROWS F32<N> exp_lanes(F32<N> x) {
  F32<N> c = x < splat<N>(-87.f) ? splat<N>(-87.f) : x;
  c = c > splat<N>(88.f) ? splat<N>(88.f) : c;
  F32<N> kf = c * 1.44269504f;
  kf += kf < splat<N>(0.f) ? splat<N>(-0.5f) : splat<N>(0.5f);
  const I32<N> ki = __builtin_convertvector(kf, I32<N>);  // truncates: rounds half away
  const F32<N> kr = __builtin_convertvector(ki, F32<N>);
  const F32<N> r = c - kr * 0.693359375f - kr * -2.12194440e-4f;
  F32<N> p = r * (1.f / 5040) + 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const I32<N> bits = (ki + 127) << 23;
  F32<N> two_k;
  std::memcpy(&two_k, &bits, sizeof two_k);
  return x < splat<N>(-87.f) ? splat<N>(0.f) : p * two_k;
}

// The build's -O2 vectorizes only loops that need no remainder, so the row
// loops below are written in N-lane vectors, with scalar tails.

// Row i's raw q . k products with keys 0 .. n - 1 -> its scores: scaled,
// masked, causal.
template <int N>
DISC_VECTOR_ROWS void scores_row(const AttentionHead& h, int64_t i, float* s, int64_t n) {
  const AttentionMask m = h.mask;
  const float scale = h.scale;
  if (!m.data) {
    int64_t j = 0;
    for (; j + N <= n; j += N) store_lanes<N>(s + j, load_lanes<N>(s + j) * scale);
    for (; j < n; ++j) s[j] *= scale;
  } else if (m.is_bool && m.col_stride == 1) {
    const bool* b = static_cast<const bool*>(m.data) + i * m.row_stride;
    int64_t j = 0;
    for (; j + N <= n; j += N) {
      U8<N> bytes;
      std::memcpy(&bytes, b + j, sizeof bytes);
      const I32<N> on = __builtin_convertvector(bytes, I32<N>);
      store_lanes<N>(s + j, on != 0 ? load_lanes<N>(s + j) * scale : splat<N>(-kInf));
    }
    for (; j < n; ++j) s[j] = b[j] ? s[j] * scale : -kInf;
  } else if (m.is_bool || m.col_stride != 1) {
    const float* a = static_cast<const float*>(m.data) + i * m.row_stride;
    const bool* b = static_cast<const bool*>(m.data) + i * m.row_stride;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = j * m.col_stride;
      s[j] = m.is_bool ? (b[at] ? s[j] * scale : -kInf) : s[j] * scale + a[at];
    }
  } else {
    const float* a = static_cast<const float*>(m.data) + i * m.row_stride;
    int64_t j = 0;
    for (; j + N <= n; j += N) store_lanes<N>(s + j, load_lanes<N>(s + j) * scale + load_lanes<N>(a + j));
    for (; j < n; ++j) s[j] = s[j] * scale + a[j];
  }
  if (h.causal)
    for (int64_t j = std::max<int64_t>(i + 1, 0); j < n; ++j) s[j] = -kInf;
}

template <int N>
DISC_VECTOR_ROWS float max_of(const float* s, int64_t n) {
  F32<N> mv = splat<N>(-kInf);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const F32<N> v = load_lanes<N>(s + j);
    mv = v > mv ? v : mv;
  }
  float mx = -kInf;
  for (int64_t l = 0; l < N; ++l) mx = std::max(mx, mv[l]);
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  return mx;
}

// s[j] = e^(s[j] - shift); returns their sum.
template <int N>
DISC_VECTOR_ROWS float exp_row(float* s, int64_t n, float shift) {
  F32<N> acc = splat<N>(0.f);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const F32<N> e = exp_lanes<N>(load_lanes<N>(s + j) - shift);
    store_lanes<N>(s + j, e);
    acc += e;
  }
  float sum = 0.f;
  for (int64_t l = 0; l < N; ++l) sum += acc[l];
  for (; j < n; ++j) {
    const float x = s[j] - shift;
    sum += (s[j] = x < -87.f ? 0.f : std::exp(x));  // as exp_lanes: no subnormals
  }
  return sum;
}

template <int N>
DISC_VECTOR_ROWS void scale_row(float* s, int64_t n, float by) {
  int64_t j = 0;
  for (; j + N <= n; j += N) store_lanes<N>(s + j, load_lanes<N>(s + j) * by);
  for (; j < n; ++j) s[j] *= by;
}

// A row's probabilities from its scores, made as forward_rows makes them:
// for a backward that kept no log-sum-exp (hand-written attention).
template <int N>
DISC_VECTOR_ROWS void probabilities_row(const AttentionHead& h, float* s, int64_t n) {
  const float mx = max_of<N>(s, n);
  if (mx == -kInf) {  // every score masked
    std::fill(s, s + n, h.nan_when_all_masked ? std::numeric_limits<float>::quiet_NaN() : 0.f);
    return;
  }
  scale_row<N>(s, n, 1.f / exp_row<N>(s, n, mx));
}

template <int N>
DISC_VECTOR_ROWS void add_into(float* dst, const float* src, int64_t n) {
  int64_t j = 0;
  for (; j + N <= n; j += N) store_lanes<N>(dst + j, load_lanes<N>(dst + j) + load_lanes<N>(src + j));
  for (; j < n; ++j) dst[j] += src[j];
}

// s: p, the probabilities; g: dO . v, already dropped out (g * mask / keep;
// `kept` null without dropout) -> s: p dropped out (for dV); g: dS * scale
// (for dQ and dK).
template <int N>
DISC_VECTOR_ROWS void gradient_row(float* s, float* g, const bool* kept, int64_t n, float delta,
                                   float inv_keep, float scale) {
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const F32<N> p = load_lanes<N>(s + j);
    store_lanes<N>(g + j, p * (load_lanes<N>(g + j) - delta) * scale);
    if (!kept) continue;
    U8<N> bytes;
    std::memcpy(&bytes, kept + j, sizeof bytes);
    const I32<N> keep = __builtin_convertvector(bytes, I32<N>);
    store_lanes<N>(s + j, keep != 0 ? p * inv_keep : splat<N>(0.f));
  }
  for (; j < n; ++j) {
    const float p = s[j];
    g[j] = p * (g[j] - delta) * scale;
    if (kept) s[j] = kept[j] ? p * inv_keep : 0.f;
  }
}

// Per-thread scratch: a block's scores (and, backward, their gradients) and
// one row's dropout mask; k^T or v^T as the register GEMMs read them (b);
// and dense copies of strided heads (a head's k and v, a block's rows of
// the others), which oneDNN's GEMMs take. Copied while the head is worked
// on, they are read again from cache.
struct Scratch {
  std::vector<float> s, g, partial, b;
  std::vector<char> kept;
  std::vector<float> q, k, v, o, go, out, dk, dv;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Query rows per block: 64K floats of scores (256 KiB, 512 with their
// gradients), which stay in a core's L2 between the GEMM that writes them
// and the GEMM that reads them. ([8, 12, 512, 64], 2 threads, AMD EPYC:
// the backward took 141 ms at 32K, 123-127 at 64K and 128K.)
int64_t block_rows(const AttentionHead& h) {
  return std::clamp<int64_t>((int64_t{1} << 16) / std::max<int64_t>(h.lk, 1), 1, h.lq);
}

// Whether every GEMM of the head runs in registers: each multiplies two of
// a block's rows, the keys and a head width.
bool in_registers(const AttentionHead& h) {
  return register_gemm_fits(block_rows(h), h.lk, std::max(h.d, h.dv));
}

GemmOperand rows_of(InRows x) { return {x.data, 0, x.stride, 1}; }
GemmOperand transposed(InRows x) { return {x.data, 0, 1, x.stride}; }

void gemm(int64_t m, int64_t n, int64_t k, GemmOperand a, GemmOperand b, float* c) {
  Gemm g;
  g.m = m, g.n = n, g.k = k, g.a = a, g.b = b, g.c = c;
  g.threads = 1;
  onednn_gemm(g);
}

// b's [k, n] elements as RegisterGemm reads them: b itself when its rows'
// elements are contiguous, else a copy in `buf` (k^T and v^T).
const float* dense_rows(GemmOperand b, int64_t k, int64_t n, std::vector<float>& buf) {
  const float* x = static_cast<const float*>(b.data);
  if (b.col_stride == 1) return x;
  buf.resize(k * n);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p) buf[p * n + j] = x[p * b.row_stride + j * b.col_stride];
  return buf.data();
}

// c = a @ b, or c += a @ b when `add`: small products in registers
// (register_gemm.h), which read and write rows wherever they lie; the
// others on oneDNN, whose operands and c must be dense (readable() and
// writable() make them so), and which writes, so it adds through
// sc.partial.
template <int N>
DISC_VECTOR_ROWS void product(bool add, int64_t m, int64_t n, int64_t k, GemmOperand a, GemmOperand b,
                              OutRows c, Scratch& sc) {
  if (register_gemm_fits(m, n, k)) {
    RegisterGemm g;
    g.m = m, g.n = n, g.k = k;
    g.a = static_cast<const float*>(a.data), g.a_row_stride = a.row_stride, g.a_col_stride = a.col_stride;
    g.b = dense_rows(b, k, n, sc.b), g.b_row_stride = b.col_stride == 1 ? b.row_stride : n;
    g.c = c.data, g.c_row_stride = c.stride, g.add = add;
    return register_gemm<N>(g);
  }
  if (!add) return gemm(m, n, k, a, b, c.data);
  sc.partial.resize(m * n);
  gemm(m, n, k, a, b, sc.partial.data());
  add_into<N>(c.data, sc.partial.data(), m * n);
}

// x's first `rows` rows ([rows, cols]) as the GEMMs read them: x itself
// when they run in registers or x is dense, else a dense copy in `buf`.
InRows readable(InRows x, int64_t rows, int64_t cols, bool in_registers, std::vector<float>& buf) {
  if (in_registers || x.stride == cols || rows <= 1) return x;
  buf.resize(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(buf.data() + i * cols, x.data + i * x.stride, cols * sizeof(float));
  return {buf.data(), cols};
}

InRows rows_from(InRows x, int64_t first) { return {x.data + first * x.stride, x.stride}; }
OutRows rows_from(OutRows x, int64_t first) { return {x.data + first * x.stride, x.stride}; }
InRows dense_in(const std::vector<float>& x, int64_t cols) { return {x.data(), cols}; }

// Where the GEMMs write x's [rows, cols] block: x itself when they run in
// registers or x is dense, else `buf`, which store_rows then copies into x.
OutRows writable(OutRows x, int64_t rows, int64_t cols, bool in_registers, std::vector<float>& buf) {
  if (in_registers || x.stride == cols || rows <= 1) return x;
  buf.resize(rows * cols);
  return {buf.data(), cols};
}

void store_rows(OutRows x, OutRows block, int64_t rows, int64_t cols) {
  if (block.data == x.data) return;
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(x.data + i * x.stride, block.data + i * block.stride, cols * sizeof(float));
}

void fill_rows(OutRows x, int64_t rows, int64_t cols, float value) {
  for (int64_t i = 0; i < rows; ++i) std::fill(x.data + i * x.stride, x.data + i * x.stride + cols, value);
}

int64_t stream_index(const AttentionHead& h, int64_t i) { return h.stream_offset + i * h.lk; }

// Row i's first n scores through dropout, as `scale` * the kept ones.
void drop(const AttentionHead& h, int64_t i, float* row, int64_t n, float scale, Scratch& sc) {
  const int64_t first = stream_index(h, i);
  dropout_f32(h.seed, 1.f - h.dropout_p, scale, first, first + n, row, row,
              reinterpret_cast<bool*>(sc.kept.data()));
}

// The keys rows i0 .. i0 + r - 1 may attend to: all, or when causal those up
// to the last row's own index (the rest of the block's scores are masked,
// so neither computed nor read).
int64_t keys_seen(const AttentionHead& h, int64_t i0, int64_t r) {
  return h.causal ? std::min(h.lk, i0 + r) : h.lk;
}

template <int N>
DISC_VECTOR_ROWS void forward_rows(const AttentionHead& h, InRows q_in, InRows k_in, InRows v_in,
                                  OutRows o, float* lse) {
  Scratch& sc = scratch();
  const int64_t rows = block_rows(h), lk = h.lk;
  sc.s.resize(rows * lk);
  sc.kept.resize(lk);
  const bool regs = in_registers(h);
  const InRows k = readable(k_in, lk, h.d, regs, sc.k), v = readable(v_in, lk, h.dv, regs, sc.v);
  const float inv_keep = h.dropout_p > 0 ? 1.f / (1.f - h.dropout_p) : 1.f;
  for (int64_t i0 = 0; i0 < h.lq; i0 += rows) {
    const int64_t r = std::min(rows, h.lq - i0), n = keys_seen(h, i0, r);
    const OutRows o_rows = rows_from(o, i0);
    if (n == 0) {  // a causal block before the first key: every score masked
      fill_rows(o_rows, r, h.dv, 0.f);
      std::fill(lse + i0, lse + i0 + r, kInf);
      continue;
    }
    const InRows q = readable(rows_from(q_in, i0), r, h.d, regs, sc.q);
    product<N>(false, r, n, h.d, rows_of(q), transposed(k), {sc.s.data(), n}, sc);
    for (int64_t i = i0; i < i0 + r; ++i) {
      float* s = sc.s.data() + (i - i0) * n;
      scores_row<N>(h, i, s, n);
      const float mx = max_of<N>(s, n);
      if (mx == -kInf) {  // every score masked
        std::fill(s, s + n, h.nan_when_all_masked ? std::numeric_limits<float>::quiet_NaN() : 0.f);
        lse[i] = kInf;
        continue;
      }
      const float sum = exp_row<N>(s, n, mx);
      lse[i] = mx + std::log(sum);
      if (h.dropout_p > 0) drop(h, i, s, n, inv_keep / sum, sc);
      else scale_row<N>(s, n, 1.f / sum);
    }
    const OutRows out = writable(o_rows, r, h.dv, regs, sc.out);
    product<N>(false, r, h.dv, n, rows_of(dense_in(sc.s, n)), rows_of(v), out, sc);
    store_rows(o_rows, out, r, h.dv);
  }
}

template <int N>
DISC_VECTOR_ROWS void backward_rows(const AttentionHead& h, InRows q_in, InRows k_in, InRows v_in,
                                   InRows o_in, const float* lse, InRows grad_o, OutRows dq_out,
                                   OutRows dk_out, OutRows dv_out) {
  Scratch& sc = scratch();
  const int64_t rows = block_rows(h), lk = h.lk;
  sc.s.resize(rows * lk);
  sc.g.resize(rows * lk);
  sc.kept.resize(lk);
  const bool regs = in_registers(h);
  const InRows k = readable(k_in, lk, h.d, regs, sc.k), v = readable(v_in, lk, h.dv, regs, sc.v);
  // dk and dv add up over the blocks.
  const OutRows dk = writable(dk_out, lk, h.d, regs, sc.dk), dv = writable(dv_out, lk, h.dv, regs, sc.dv);
  const float inv_keep = h.dropout_p > 0 ? 1.f / (1.f - h.dropout_p) : 1.f;
  // The first block writes dk and dv, the others add; causal blocks see
  // fewer keys than the next ones, so there every block adds.
  if (h.causal) {
    fill_rows(dk, lk, h.d, 0.f);
    fill_rows(dv, lk, h.dv, 0.f);
  }
  for (int64_t i0 = 0; i0 < h.lq; i0 += rows) {
    const int64_t r = std::min(rows, h.lq - i0), n = keys_seen(h, i0, r);
    const OutRows dq_rows = rows_from(dq_out, i0);
    if (n == 0) {
      fill_rows(dq_rows, r, h.d, 0.f);
      continue;
    }
    const InRows q = readable(rows_from(q_in, i0), r, h.d, regs, sc.q);
    const InRows o = readable(rows_from(o_in, i0), r, h.dv, regs, sc.o);
    const InRows go = readable(rows_from(grad_o, i0), r, h.dv, regs, sc.go);
    product<N>(false, r, n, h.d, rows_of(q), transposed(k), {sc.s.data(), n}, sc);
    product<N>(false, r, n, h.dv, rows_of(go), transposed(v), {sc.g.data(), n}, sc);
    for (int64_t i = i0; i < i0 + r; ++i) {
      float* s = sc.s.data() + (i - i0) * n;
      float* g = sc.g.data() + (i - i0) * n;
      // sum_j p_ij dP_ij = dO_i . O_i: the softmax backward's row term.
      float delta = 0.f;
      const float* go_i = go.data + (i - i0) * go.stride;
      const float* o_i = o.data + (i - i0) * o.stride;
      for (int64_t c = 0; c < h.dv; ++c) delta += go_i[c] * o_i[c];
      scores_row<N>(h, i, s, n);
      if (lse) exp_row<N>(s, n, lse[i]);
      else probabilities_row<N>(h, s, n);
      const bool* kept = nullptr;
      if (h.dropout_p > 0) {
        drop(h, i, g, n, inv_keep, sc);
        kept = reinterpret_cast<const bool*>(sc.kept.data());
      }
      gradient_row<N>(s, g, kept, n, delta, inv_keep, h.scale);
    }
    const bool add = h.causal || i0 > 0;
    product<N>(add, n, h.dv, r, transposed(dense_in(sc.s, n)), rows_of(go), dv, sc);
    const OutRows dq = writable(dq_rows, r, h.d, regs, sc.out);
    product<N>(false, r, h.d, n, rows_of(dense_in(sc.g, n)), rows_of(k), dq, sc);
    store_rows(dq_rows, dq, r, h.d);
    product<N>(add, n, h.d, r, transposed(dense_in(sc.g, n)), rows_of(q), dk, sc);
  }
  store_rows(dk_out, dk, lk, h.d);
  store_rows(dv_out, dv, lk, h.dv);
}

using ForwardFn = void (*)(const AttentionHead&, InRows, InRows, InRows, OutRows, float*);
using BackwardFn = void (*)(const AttentionHead&, InRows, InRows, InRows, InRows, const float*,
                            InRows, OutRows, OutRows, OutRows);

DISC_AT_AVX512 void forward_avx512(const AttentionHead& h, InRows q, InRows k, InRows v, OutRows o,
                                   float* lse) {
  forward_rows<lanes(VectorLevel::kAvx512)>(h, q, k, v, o, lse);
}
DISC_AT_AVX2 void forward_avx2(const AttentionHead& h, InRows q, InRows k, InRows v, OutRows o,
                               float* lse) {
  forward_rows<lanes(VectorLevel::kAvx2)>(h, q, k, v, o, lse);
}
void forward_baseline(const AttentionHead& h, InRows q, InRows k, InRows v, OutRows o, float* lse) {
  forward_rows<lanes(VectorLevel::kBaseline)>(h, q, k, v, o, lse);
}

DISC_AT_AVX512 void backward_avx512(const AttentionHead& h, InRows q, InRows k, InRows v, InRows o,
                                    const float* lse, InRows grad_o, OutRows dq, OutRows dk,
                                    OutRows dv) {
  backward_rows<lanes(VectorLevel::kAvx512)>(h, q, k, v, o, lse, grad_o, dq, dk, dv);
}
DISC_AT_AVX2 void backward_avx2(const AttentionHead& h, InRows q, InRows k, InRows v, InRows o,
                                const float* lse, InRows grad_o, OutRows dq, OutRows dk, OutRows dv) {
  backward_rows<lanes(VectorLevel::kAvx2)>(h, q, k, v, o, lse, grad_o, dq, dk, dv);
}
void backward_baseline(const AttentionHead& h, InRows q, InRows k, InRows v, InRows o,
                       const float* lse, InRows grad_o, OutRows dq, OutRows dk, OutRows dv) {
  backward_rows<lanes(VectorLevel::kBaseline)>(h, q, k, v, o, lse, grad_o, dq, dk, dv);
}

}  // namespace

void attention_forward_at(VectorLevel level, const AttentionHead& h, InRows q, InRows k, InRows v,
                          OutRows o, float* lse) {
  by_level<ForwardFn>(level, forward_avx512, forward_avx2, forward_baseline)(h, q, k, v, o, lse);
}

void attention_backward_at(VectorLevel level, const AttentionHead& h, InRows q, InRows k, InRows v,
                           InRows o, const float* lse, InRows grad_o, OutRows dq, OutRows dk,
                           OutRows dv) {
  by_level<BackwardFn>(level, backward_avx512, backward_avx2, backward_baseline)(h, q, k, v, o, lse,
                                                                                  grad_o, dq, dk, dv);
}

void attention_forward(const AttentionHead& h, InRows q, InRows k, InRows v, OutRows o, float* lse) {
  attention_forward_at(vector_level(), h, q, k, v, o, lse);
}

void attention_backward(const AttentionHead& h, InRows q, InRows k, InRows v, InRows o,
                        const float* lse, InRows grad_o, OutRows dq, OutRows dk, OutRows dv) {
  attention_backward_at(vector_level(), h, q, k, v, o, lse, grad_o, dq, dk, dv);
}

}  // namespace disc::runtime
