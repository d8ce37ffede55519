// Convolutions of the compiled executor: float32 2-D aten::convolution (not
// transposed) and aten::convolution_backward (honouring output_mask) run on
// oneDNN (runtime/cpu/onednn_conv.h), a relu the library_epilogue pass planned
// as the forward's post-op; every other convolution (1-D / 3-D, transposed,
// other dtypes) runs its ATen kernel, counted with its reason.
//
// Layout (planned by lowering/passes/layout_plan.cpp): activations between
// oneDNN convolutions stay NHWC (torch's channels_last strides, a valid
// at::Tensor of the same logical sizes), the layout oneDNN's f32
// convolutions run without reordering activations. A value read by an op
// not known to be layout-agnostic is made NCHW where it is produced,
// counted: such a reader would re-lay it out inside its ATen kernel anyway
// (or run a slow strided loop), and here every layout change shows in
// onednn.reorders. DISC_CONV=nchw keeps every activation NCHW and lets
// oneDNN reorder to its blocked layout inside each call instead (the
// layout-unaware baseline).
//
// Metrics: library.onednn (one per call), onednn.conv.<forward|backward_data|
// backward_weights> (primitives run), onednn.reorders (+ .weights,
// .activations), library.aten, library.aten.convolution[_backward],
// library.aten_reason.<dtype|rank|transposed|disabled>, library.operand_copies.
// DISC_CONV=aten runs every convolution on ATen (reason "disabled").
#pragma once
#include <ATen/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

#include "lowering/program.h"

namespace disc {

// Runs convolution node `n` on `ins` as `call` says (the relu epilogue, an
// NHWC output, or ATen's kernel with the reason it declined); `aten` is n's
// ATen operator.
std::vector<at::Tensor> run_conv_call(const lowering::LibraryCall& call, const ir::Node& n,
                                      std::vector<at::Tensor> ins, const c10::OperatorHandle& aten);

// The executor's fix-up for LayoutPlan::to_nchw (lowering/plan.h): the outputs `which`
// selects become NCHW when they are not (counted as activation reorders).
void make_nchw(std::vector<at::Tensor>& outs, const std::vector<bool>& which);

// The executor's fix-up for LayoutPlan::match_inputs: when an input is
// NHWC, the other 4-D inputs become NHWC too (counted as activation reorders).
void match_nhwc(std::vector<at::Tensor>& ins);

}  // namespace disc
