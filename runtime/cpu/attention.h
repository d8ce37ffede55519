// Scaled dot-product attention of one head, float32, forward and backward,
// dropout included, without the [lq, lk] score matrix in memory: the scores
// of a block of query rows are computed into a per-thread scratch that stays
// in cache, used, and dropped. A block holds whole rows, so the softmax is
// exact in one pass (no running rescale); the backward recomputes the
// probabilities from the forward's log-sum-exp and the dropout mask from its
// Philox stream (philox.h) instead of reading them back.
//
// The score is (q . k) * scale + mask, j > i masked when causal; a row whose
// every score is masked gives 0, as _safe_softmax does. Dropout keeps score
// (i, j) as element stream_offset + i * lk + j of the stream `seed` says, so
// a head at stream_offset = its index * lq * lk draws the mask native_dropout
// draws for the [B, H, lq, lk] scores of SDPA's math path.
//
// The GEMMs run on one thread each (callers run heads in parallel): small
// ones in registers (register_gemm.h), the others on oneDNN.
#pragma once
#include <cstdint>

#include "runtime/cpu/vector_level.h"

namespace disc::runtime {

// One head's mask: element (i, j) at data[i * row_stride + j * col_stride];
// float32 (added to the score) or bool (false: masked). Null: no mask.
struct AttentionMask {
  const void* data = nullptr;
  bool is_bool = false;
  int64_t row_stride = 0, col_stride = 0;
};

struct AttentionHead {
  int64_t lq = 0, lk = 0, d = 0, dv = 0;  // query and key lengths, q/k and v widths
  float scale = 1.f;
  bool causal = false;
  float dropout_p = 0.f;
  uint64_t seed = 0;
  int64_t stream_offset = 0;
  AttentionMask mask;
  // A row whose every score is masked: 0 (as _safe_softmax and SDPA give),
  // or NaN (as _softmax gives, for hand-written attention); the backward
  // reads it only where it recomputes the probabilities (no lse).
  bool nan_when_all_masked = false;
};

// One head's [rows, cols] matrix: row i at data + i * stride, its elements
// contiguous. stride >= cols: a head of a [B, L, H, D] tensor viewed as
// [B, H, L, D] has stride H * D, and is read and written in place.
struct InRows {
  const float* data = nullptr;
  int64_t stride = 0;
};
struct OutRows {
  float* data = nullptr;
  int64_t stride = 0;
};

// q [lq, d], k [lk, d], v [lk, dv]. Writes o [lq, dv] and lse [lq] (dense),
// each row's log-sum-exp of its scores (+inf where all are masked).
void attention_forward(const AttentionHead& h, InRows q, InRows k, InRows v, OutRows o, float* lse);

// The gradients of attention_forward's o (grad_o [lq, dv]), given its o and
// lse: writes dq [lq, d], dk [lk, d] and dv [lk, dv]. With lse null, the
// probabilities are recomputed from each whole row of scores (its max and
// sum), as the forward computed them: no lse needs keeping.
void attention_backward(const AttentionHead& h, InRows q, InRows k, InRows v, InRows o,
                        const float* lse, InRows grad_o, OutRows dq, OutRows dk, OutRows dv);

// The same at a given vector level, which the CPU must run (the functions
// above run at vector_level(); tests compare the levels).
void attention_forward_at(VectorLevel level, const AttentionHead& h, InRows q, InRows k, InRows v,
                          OutRows o, float* lse);
void attention_backward_at(VectorLevel level, const AttentionHead& h, InRows q, InRows k, InRows v,
                           InRows o, const float* lse, InRows grad_o, OutRows dq, OutRows dk,
                           OutRows dv);

}  // namespace disc::runtime
