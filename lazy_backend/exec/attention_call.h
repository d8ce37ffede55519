// The compiled executor's fused call for hand-written attention (lowering's
// attention-pattern pass, lowering/plan.h AttentionCall): the bmm that ends
// it runs disc::attention's CPU forward on q, k and v, never writing the
// scores.
//
// Metrics: library.attention.
#pragma once
#include <ATen/Tensor.h>

#include <vector>

#include "lowering/plan.h"
#include "lowering/ir/graph.h"

namespace disc {

// `ins`: q [B*H, Lq, D], k^T [B*H, D, Lk], v [B*H, Lk, Dv], then the scale
// (a 0-dim tensor) if the call has one, then the mask if it has one. B and H
// are the sizes of the call's softmax in `g`, the graph being run. Returns
// the bmm's value, [B*H, Lq, Dv].
at::Tensor run_attention_call(const lowering::AttentionCall& call, std::vector<at::Tensor> ins,
                              const ir::Graph& g);

}  // namespace disc
