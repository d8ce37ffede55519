// Library calls of the compiled executor: float32 aten::mm / aten::addmm /
// aten::bmm run on oneDNN (runtime/onednn_gemm.h), with the relu or gelu
// epilogue the library_epilogue pass planned applied as a post-op; every
// other library op (other dtypes, scaled addmm) runs its ATen kernel,
// counted. Convolutions: conv_calls.h.
//
// Metrics: library.onednn, library.aten, library.aten.<op> and
// library.aten_reason.<dtype|scale|bias|op>,
// library.epilogues, library.operand_copies (a view oneDNN cannot read),
// onednn.primitives_created, onednn.primitive_reuses.
#pragma once
#include <ATen/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <vector>

#include "lazy_backend/prepack.h"
#include "lowering/program.h"

namespace disc {

struct LibraryCall {
  enum class Kind : uint8_t {
    kGemm,      // mm / addmm / bmm: oneDNN where it can, else ATen
    kAten,      // another library op: its ATen kernel
    kConv,      // convolution / convolution_backward: conv_calls.h
    kEpilogue,  // an activation its GEMM or convolution already applied: passes its input on
  };
  Kind kind = Kind::kAten;
  // kGemm: the activation epilogue to apply (relu or gelu); kConv: relu only.
  runtime::Activation act = runtime::Activation::kNone;
  bool nhwc_out = false;  // kConv: may leave its output NHWC (ConvLayoutPlan)
  // kGemm mm / addmm whose B is a graph parameter seen through layout ops
  // (W, W^T): that parameter's op, else -1; a pre-packing candidate
  // (prepack.h). weight_reused: several GEMMs of the graph read this B.
  int32_t weight_param = -1;
  bool weight_reused = false;
};

// How each op of `p` runs if it is a library call or an epilogue; nullopt
// for every other op.
std::vector<std::optional<LibraryCall>> plan_library_calls(const lowering::Program& p);

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
// library.onednn and library.gemm_calls.
at::Tensor onednn_matmul(at::Tensor a, at::Tensor b, const at::Tensor& bias, runtime::Activation act,
                         bool batched,
                         const std::vector<WeightView>* weights = nullptr,
                         const std::function<at::Tensor()>& make_b = {});

// The parameter buffer `call` reads B from, if pre-packing it pays in `g`:
// the parameter is unchanged by this graph, or several GEMMs read it.
std::optional<at::Tensor> weight_base(const LibraryCall& call, const ir::Graph& g);

}  // namespace disc
