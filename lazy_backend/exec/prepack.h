// Pre-packed GEMM weights (runtime::pack_b) cached by the weight's identity:
// the TensorImpl of the parameter's CPU buffer, held by a weak reference,
// plus its version counter and the view of it the GEMM reads (W or W^T,
// one slice of it). Never by data address alone: a freed buffer's address
// comes back. An entry is dropped when its weight dies or its version moves
// on (load_state_dict, w.add_(1), an optimizer step: the executor bumps the
// version when it writes a buffer in place, see replay.cpp).
//
// When to pack (library_calls.cpp, weight_base): in no-grad mode a weight
// this graph does not change (inference: the same value next step), or one
// that several GEMMs of this graph read (training: packed once per step). A
// weight read once per step and changed every step is not worth a reorder:
// measured, a packed GEMM at m = 64 is no faster than oneDNN's own per-call
// packing, so the reorder would be pure cost.
//
// Metrics: prepack.hits, prepack.misses, onednn.reorders.
#pragma once
#include <ATen/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "runtime/cpu/onednn_gemm.h"

namespace disc {

// The operand B a GEMM reads, and the parameter buffer it is a view of.
struct WeightView {
  at::Tensor base;  // the parameter's CPU buffer (a data leaf's tensor)
  at::Tensor view;  // what the GEMM reads: base, base.t(), ...
};

// On by default; DISC_PREPACK=0 (or set_prepack(false)) turns it off.
bool prepack_enabled();
void set_prepack(bool on);

// The packed B for `g`: cached when every view's base keeps its identity
// and version, else packed from make_b() (one B for all views: a merged
// group concatenates them) and cached.
std::shared_ptr<const runtime::PackedB> packed_weights(const std::vector<WeightView>& views,
                                                       const runtime::Gemm& g,
                                                       const std::function<at::Tensor()>& make_b);

// Drops every packed weight (tests).
void clear_packed_weights();
size_t packed_weights_size();

}  // namespace disc
