// The compiled executor's fused calls for hand-written attention (lowering's
// attention-pattern pass, lowering/plan.h AttentionCall): the bmm that ends
// it runs disc::attention's CPU forward on q, k and v, never writing the
// scores; in training the backward's three bmm's (a kAttentionBackward GEMM
// group) run its backward once, recomputing the probabilities and the
// dropout mask.
//
// Metrics: library.attention, library.attention_backward.
#pragma once
#include <ATen/Tensor.h>

#include <vector>

#include "lowering/ir/graph.h"
#include "lowering/plan.h"
#include "lowering/program.h"

namespace disc {

// `ins`: q [B*H, Lq, D], k^T [B*H, D, Lk], v [B*H, Lk, Dv], then the scale
// (a 0-dim tensor) if the call has one, then the mask if it has one. B and H
// are the sizes of the call's softmax in `g`, the graph being run; the
// dropout's stream is its native_dropout node's there. Returns the bmm's
// value, [B*H, Lq, Dv].
at::Tensor run_attention_call(const lowering::AttentionCall& call, std::vector<at::Tensor> ins,
                              const ir::Graph& g);

// Runs GEMM group `group` of `p` (kAttentionBackward): reads its members'
// inputs (q, k^T, v, out, grad out, [scale, grad scale], [mask]) and writes
// grad q [B*H, Lq, D], grad k^T [B*H, D, Lk] and grad v [B*H, Lk, Dv].
void run_attention_backward(const lowering::Program& p, uint32_t group, const ir::Graph& g,
                            std::vector<std::vector<at::Tensor>>& values);

}  // namespace disc
