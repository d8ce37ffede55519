// Convolutions of the compiled executor: float32 2-D aten::convolution (not
// transposed) and aten::convolution_backward (honouring output_mask) run on
// oneDNN (runtime/onednn_conv.h), a relu the library_epilogue pass planned
// as the forward's post-op; every other convolution (1-D / 3-D, transposed,
// other dtypes) runs its ATen kernel, counted with its reason.
//
// Layout: activations between oneDNN convolutions stay NHWC (torch's
// channels_last strides, a valid at::Tensor of the same logical sizes), the
// layout oneDNN's f32 convolutions run without reordering activations. ATen's
// element-wise ops and max pooling keep channels_last, so a CNN's
// conv -> relu -> pool -> conv chain and its backward move no activation
// between layouts. A value read by an op not known to be layout-agnostic (a
// reshape, a GEMM, a reduction, an opaque op) or returned from the graph is
// made NCHW where it is produced, counted: such a reader would re-lay it out
// inside its ATen kernel anyway (or run a slow strided loop), and here every
// layout change shows in onednn.reorders. DISC_CONV_LAYOUT=nchw keeps every
// activation NCHW and lets oneDNN reorder to its blocked layout inside each
// call instead (the layout-unaware baseline).
//
// Metrics: library.onednn (one per call), onednn.conv.<forward|backward_data|
// backward_weights> (primitives run), onednn.reorders (+ .weights,
// .activations), library.aten, library.aten.convolution[_backward],
// library.aten_reason.<dtype|rank|transposed|disabled>, library.operand_copies.
// DISC_ONEDNN_CONV=0 runs every convolution on ATen (reason "disabled").
#pragma once
#include <ATen/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

#include "lowering/program.h"

namespace disc {

// aten::convolution or aten::convolution_backward.
bool is_conv_op(uint32_t op);

// Which values may be NHWC: decided once per compiled graph.
struct ConvLayoutPlan {
  // Per op: a convolution that may leave its (first) output NHWC.
  std::vector<bool> nhwc_out;
  // Per op, per output: an output of an ATen op that may be NHWC (an input
  // was) but has a reader that needs NCHW: made contiguous after the op
  // runs. Empty for most ops.
  std::vector<std::vector<bool>> to_nchw;
  // Per op: an ATen op that may read NHWC and NCHW 4-D inputs at once (the
  // max-pool backward of a flattened gradient): ATen's kernels fall back to
  // slow strided loops there, so the NCHW ones are made NHWC first.
  std::vector<bool> match_inputs;
};
ConvLayoutPlan plan_conv_layouts(const lowering::Program& p);

// Runs convolution node `n` on `ins` (relu: the planned epilogue; nhwc_out:
// from the plan); `aten` is n's ATen operator, for what oneDNN does not take.
std::vector<at::Tensor> run_conv_call(const ir::Node& n, std::vector<at::Tensor> ins,
                                      const c10::OperatorHandle& aten, bool relu, bool nhwc_out);

// The executor's fix-up for ConvLayoutPlan::to_nchw: the outputs `which`
// selects become NCHW when they are not (counted as activation reorders).
void make_nchw(std::vector<at::Tensor>& outs, const std::vector<bool>& which);

// The executor's fix-up for ConvLayoutPlan::match_inputs: when an input is
// NHWC, the other 4-D inputs become NHWC too (counted as activation reorders).
void match_nhwc(std::vector<at::Tensor>& ins);

}  // namespace disc
