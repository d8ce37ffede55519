// Library calls of the compiled executor, as the plan's library-calls pass
// planned them (lowering/plan.h): float32 aten::mm / aten::addmm /
// aten::bmm run on oneDNN (runtime/cpu/onednn_gemm.h), with the relu or gelu
// epilogue applied as a post-op; a GEMM oneDNN does not take (other
// dtypes, a scaled addmm: runtime data) runs its ATen kernel, counted.
// Convolutions: conv_calls.h.
//
// Metrics: library.onednn, library.aten, library.aten.<op> and
// library.aten_reason.<dtype|scale|bias>,
// library.epilogues, library.operand_copies (a view oneDNN cannot read),
// onednn.primitives_created, onednn.primitive_reuses.
#pragma once
#include <ATen/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <vector>

#include "lazy_backend/exec/prepack.h"
#include "lowering/program.h"
#include "runtime/cpu/onednn_gemm.h"

namespace disc {

using lowering::LibraryCall;

// The oneDNN post-op for the plan's activation.
runtime::Activation onednn_activation(lowering::Activation a);

// Runs `call` for this graph's node `n` on `ins`; `aten` is n's ATen
// operator; `g` (the graph being run) lets a GEMM pre-pack its weight.
std::vector<at::Tensor> run_library_call(const LibraryCall& call, const ir::Node& n,
                                         std::vector<at::Tensor> ins,
                                         const c10::OperatorHandle& aten,
                                         const ir::Graph* g = nullptr);

// Why float32 GEMM node `n` must run on ATen with `ins`, or nullptr.
const char* gemm_aten_reason(const ir::Node& n, const std::vector<at::Tensor>& ins);

// One float32 GEMM on oneDNN into a new dense tensor: a [m, k] @ b [k, n]
// (+ bias [n], contiguous, or undefined), activated by `act`, or bmm when
// `batched`.
// With `weights` (B's parameter buffers and views; make_b builds B from
// them on a miss; default: b itself), B comes pre-packed. Counts
// library.onednn and library.gemm_calls. In a build without oneDNN it runs
// on ATen, counted as library.aten_reason.no_onednn.
at::Tensor onednn_matmul(at::Tensor a, at::Tensor b, const at::Tensor& bias, runtime::Activation act,
                         bool batched,
                         const std::vector<WeightView>* weights = nullptr,
                         const std::function<at::Tensor()>& make_b = {});

// The parameter buffer `call` reads B from, if pre-packing it pays in `g`:
// the parameter is unchanged by this graph, or several GEMMs read it.
std::optional<at::Tensor> weight_base(const LibraryCall& call, const ir::Graph& g);

}  // namespace disc
