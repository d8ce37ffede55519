// Library calls of the compiled executor: float32 aten::mm / aten::addmm /
// aten::bmm run on oneDNN (runtime/onednn_gemm.h), with the relu epilogue the
// library_epilogue pass planned applied as a post-op; every other library op
// (other dtypes, scaled addmm) runs its ATen kernel, counted. Convolutions:
// conv_calls.h.
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

#include "lowering/program.h"

namespace disc {

struct LibraryCall {
  enum class Kind : uint8_t {
    kGemm,      // mm / addmm / bmm: oneDNN where it can, else ATen
    kAten,      // another library op: its ATen kernel
    kConv,      // convolution / convolution_backward: conv_calls.h
    kEpilogue,  // a relu its GEMM or convolution already applied: passes its input on
  };
  Kind kind = Kind::kAten;
  bool relu = false;  // kGemm, kConv: apply the relu epilogue
  bool nhwc_out = false;  // kConv: may leave its output NHWC (ConvLayoutPlan)
};

// How each op of `p` runs if it is a library call or an epilogue; nullopt
// for every other op.
std::vector<std::optional<LibraryCall>> plan_library_calls(const lowering::Program& p);

// Runs `call` for this graph's node `n` on `ins`; `aten` is n's ATen operator.
std::vector<at::Tensor> run_library_call(const LibraryCall& call, const ir::Node& n,
                                         std::vector<at::Tensor> ins,
                                         const c10::OperatorHandle& aten);

}  // namespace disc
