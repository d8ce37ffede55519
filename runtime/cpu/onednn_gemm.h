// float32 or bfloat16 GEMM through oneDNN's matmul primitive, torch-free:
//   C[b][m,n] = act(A[b][m,k] @ B[b][k,n] + bias[n]),  act: none, relu or gelu
// In bf16 every operand is bf16; products accumulate in f32 and C is
// rounded once.
// Operands are raw pointers with explicit strides, so transposed views
// (x.t(), nn.Linear's weight) run without a copy. One generic primitive serves
// every size: m, n, k and the batch are runtime values, so it is cached only
// by what changes the generated code (rank, which operand is transposed,
// bias, post-op) and a new batch size compiles nothing in it. By default,
// though, a small unbatched GEMM (at most 2^24 multiply-adds), and every
// unbatched bf16 one, runs a primitive made for its exact sizes from their
// first call (per thread), which is faster for it (see onednn_gemm.cpp);
// DISC_GEMM_SIZED=0 or set_sized_gemms(false) runs the generic one.
#pragma once
#include <cstdint>
#include <memory>

namespace disc::runtime {

enum class GemmType : uint8_t { kFloat32, kBFloat16 };

// A strided matrix of the GEMM's type, or a batch of them (batch_stride
// unused for mm).
struct GemmOperand {
  const void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// An activation applied as a oneDNN eltwise post-op while the output tile
// is in cache, not as a second pass. kGelu is torch's exact (erf) GELU.
enum class Activation : uint8_t { kNone, kRelu, kGelu };

struct Gemm {
  GemmType type = GemmType::kFloat32;
  bool batched = false;  // bmm: 3-D descriptors, `batch` matrices
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;             // a: [m, k], b: [k, n]
  const void* bias = nullptr;  // [n] contiguous, or null; mm only
  void* c = nullptr;           // [m, n], dense row-major, written
  Activation act = Activation::kNone;
  // The caller's thread count (torch's): a primitive made for fixed sizes
  // fixes its parallelism when it is made, so the count is part of its key.
  int threads = 1;
};

enum class PrimitiveUse : uint8_t {
  kCreated,       // a new generic primitive was made (and cached)
  kReused,        // the cached generic one ran
  kSizedCreated,  // a primitive for exactly these sizes was made and ran
  kSized,         // the one for these sizes ran
  kNone,          // no primitive ran: the output is empty, or k == 0 (C = bias)
};

// Whether onednn_gemm takes `x` as it is: a dense row-major or column-major
// (transposed) matrix or batch of them; strides of size-1 dims are ignored.
// False for other views (a slice, a broadcast batch): the caller copies them.
bool gemm_operand_supported(const GemmOperand& x, int64_t rows, int64_t cols, int64_t batch);

// Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX, as oneDNN
// sees it): elsewhere oneDNN emulates bf16 GEMMs and convolutions, and the
// caller had better run them another way.
bool onednn_bf16_native();

// Whether bf16 GEMMs and convolutions had better be widened: converted to
// f32, multiplied and rounded once (the same products, summed in another
// order). oneDNN runs both on the same bf16 dot-product kernels (brgemm),
// so the GEMMs' timing speaks for the convolutions too. Always where
// onednn_bf16_native() is false; else as DISC_ONEDNN_BF16 says, and by default
// when this process measured oneDNN's f32 GEMM clearly faster than its bf16
// one on `threads` threads (once, ~20 ms; onednn_bf16_choice.cpp).
bool onednn_bf16_widened(int threads);

// Runs `g`; throws std::invalid_argument for an operand gemm_operand_supported
// rejects. Thread-safe. The result says whether a primitive was created, so
// the caller can count creations and reuses in its own metrics.
PrimitiveUse onednn_gemm(const Gemm& g);

// Pre-packing: B reordered once (one dnnl::reorder) into the blocked layout
// oneDNN's brgemm kernel picks for fixed m, n, k (`format_tag::any`), then
// reused by every GEMM of that shape on the same weight. Fixed sizes select
// brgemm; runtime sizes would keep the plain JIT sgemm, which packs B itself
// on every call. Measured (1 thread, k = n = 768): m = 8 0.09 vs 0.16 ms,
// m = 32 0.29 vs 0.37 ms; m = 256 about even.
struct PackedB;
// Packs g.b for g's shape (layouts of A and B, bias, activation); g.a is unused.
// float32 only (std::invalid_argument otherwise).
std::shared_ptr<const PackedB> pack_b(const Gemm& g);
// Whether `p` is laid out as the primitive for g's shape wants it (a new m
// may choose another blocking; then the caller packs again).
bool packed_b_fits(const PackedB& p, const Gemm& g);
// Runs `g` with B taken from `p` (g.b is not read). Not batched.
PrimitiveUse onednn_gemm_packed(const Gemm& g, const PackedB& p);

// Sized primitives (the default) or the generic one, for every later GEMM.
void set_sized_gemms(bool on);

// Drops every cached primitive (tests that pin creation counts).
void clear_gemm_primitives();

}  // namespace disc::runtime
