// Runs the merged GEMM groups of lowering/passes/gemm_merge.cpp as one
// oneDNN GEMM each, and gives every member its part of the result.
//
//   shared_lhs  A @ [B_1 | B_2 ...] + [b_1 | b_2 ...] -> member i: columns
//               (weights concatenated per step, or once when pre-packed)
//   shared_rhs  [A_1; A_2 ...] @ B                     -> member i: rows
//   batched     bmm(stack(A_i), stack(B_i))            -> member i: batch i
//
// A member's part is a view of the one result where its readers take any
// strides (fused kernels, ATen element-wise and layout ops, GEMMs); a
// member that is a graph output or read by an op that indexes storage
// (as_strided, view, opaque ops) gets a dense copy (gemm_merge.slice_copies).
// The pass merges only GEMMs oneDNN takes (float32, unscaled, bias [n]);
// the runner asserts it.
//
// Metrics: gemm_merge.launches, gemm_merge.members, gemm_merge.slice_copies,
// gemm_merge.weight_concats (B concatenated this step: not pre-packed);
// planned groups are counted at compile time
// (gemm_merge.groups, compile_cache.cpp).
#pragma once
#include <ATen/Tensor.h>

#include <optional>
#include <vector>

#include "lazy_backend/exec/library_calls.h"
#include "lowering/program.h"

namespace disc {

// Runs gemm group `group` of `p` in graph `g` as p.plan.library says
// (LibraryCall::own_buffer: a member's part must be a dense copy); writes
// every member's value.
void run_gemm_group(const lowering::Program& p, uint32_t group, const ir::Graph& g,
                    std::vector<std::vector<at::Tensor>>& values);

}  // namespace disc
