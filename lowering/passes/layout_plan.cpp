// layout-plan: where activations stay NHWC between convolutions.
//
// Convolutions the library takes run on NHWC activations (torch's
// channels_last strides: the same logical sizes), the layout a CPU
// convolution library runs without reordering. Element-wise ops and max
// pooling read NHWC as the same values, so a CNN's conv -> relu -> pool ->
// conv chain and its backward move no activation between layouts. A value
// read by an op that is not layout-agnostic (a reshape, a GEMM, a reduction)
// or returned from the graph is made NCHW where it is produced.
//
//   %4 = aten::convolution(%0.0, %1.0, %2.0)   nhwc out
//   %5 = aten::relu(%4.0)                        (epilogue: NHWC too)
//   %6 = aten::max_pool2d_with_indices(%5.0)     to nchw [1, 0]: a view reads it
//
// DISC_CONV=nchw keeps every activation NCHW (the library reorders inside
// each call, the layout-unaware baseline); DISC_CONV=aten runs convolutions
// on ATen, so nothing is NHWC.
#include <algorithm>

#include "lowering/passes/passes.h"
#include "runtime/options.h"

namespace disc::lowering {

namespace {

struct Readers {
  std::vector<std::vector<bool>> needs_nchw;  // per op, per output
  std::vector<std::vector<bool>> may_nhwc;    // per op, per output
};

// needs_nchw[op][k]: output k of op is a graph output or has a reader that
// is not layout-agnostic. A relu epilogue passes its library call's buffer
// on: that buffer's readers are the relu's.
Readers readers_of(const Program& p) {
  const size_t n = p.ops.size();
  Readers r;
  r.needs_nchw.resize(n);
  r.may_nhwc.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    r.needs_nchw[i].assign(p.ops[i].node->outputs.size(), false);
    r.may_nhwc[i].assign(p.ops[i].node->outputs.size(), false);
  }
  std::vector<int32_t> epilogue(n, -1);
  for (uint32_t i = 0; i < n; ++i) {
    const ProgramOp& op = p.ops[i];
    if (op.erased) continue;
    if (op.epilogue_of >= 0) epilogue[op.epilogue_of] = static_cast<int32_t>(i);
    if (!is_layout_agnostic(op.node->op))
      for (const ir::GraphRef& in : op.inputs) r.needs_nchw[in.node][in.index] = true;
  }
  for (const ir::GraphRef& out : p.outputs) r.needs_nchw[out.node][out.index] = true;
  for (uint32_t i = 0; i < n; ++i)
    if (epilogue[i] >= 0) r.needs_nchw[i][0] = r.needs_nchw[epilogue[i]][0];
  return r;
}

// An op that may see NHWC inputs: where its outputs may stay NHWC, and
// where they must turn back.
void plan_reader(const Program& p, uint32_t i, Readers& r, LayoutPlan& plan) {
  const ProgramOp& op = p.ops[i];
  bool any = false, nchw_4d = false;
  for (const ir::GraphRef& in : op.inputs) {
    any = any || r.may_nhwc[in.node][in.index];
    nchw_4d = nchw_4d || (!r.may_nhwc[in.node][in.index] &&
                          p.ops[in.node].node->outputs[in.index].sizes.size() == 4);
  }
  if (!any || !is_layout_agnostic(op.node->op)) return;
  plan.match_inputs[i] = nchw_4d && !is_convolution(op.node->op) && op.group < 0;
  for (size_t k = 0; k < r.may_nhwc[i].size(); ++k) r.may_nhwc[i][k] = !r.needs_nchw[i][k];
  if (std::find(r.needs_nchw[i].begin(), r.needs_nchw[i].end(), true) != r.needs_nchw[i].end())
    plan.to_nchw[i] = r.needs_nchw[i];
}

}  // namespace

const char* conv_library_declines(const Program& p, uint32_t i) {
  const ir::Node& n = *p.ops[i].node;
  if (options::text(options::Id::kConv) == "aten") return "disabled";
  // float32, bfloat16 or float16 throughout (autocast's convolutions): the
  // weight's.
  const ir::GraphRef weight = p.ops[i].inputs.at(op_of(n.op) == Op::kConvolution ? 1 : 2);
  const ir::DType type = p.ops[weight.node].node->outputs[weight.index].dtype;
  if (type != ir::DType::kFloat32 && type != ir::DType::kBFloat16 && type != ir::DType::kFloat16)
    return "dtype";
  for (const ir::GraphRef& in : p.ops[i].inputs)
    if (p.ops[in.node].node->outputs[in.index].dtype != type) return "dtype";
  for (const ir::TensorType& t : n.outputs)
    if (!t.undefined && t.dtype != type) return "dtype";
  // Geometry (stride, padding, dilation, transposed): operand 3 of
  // convolution, 4 of convolution_backward.
  const size_t g = op_of(n.op) == Op::kConvolution ? 3 : 4;
  const ir::Attr* stride = n.attr_operand(g);
  const ir::Attr* transposed = n.attr_operand(g + 3);
  if (!stride || !transposed) return "operands";
  if (stride->ints.size() != 2) return "rank";  // conv1d / conv3d
  if (transposed->i != 0) return "transposed";
  return nullptr;
}

void plan_layouts(Program& p) {
  const size_t n = p.ops.size();
  LayoutPlan& plan = p.plan.layouts;
  plan = LayoutPlan{std::vector<bool>(n, false), std::vector<std::vector<bool>>(n),
                    std::vector<bool>(n, false)};
  if (options::text(options::Id::kConv) != "nhwc") return;
  Readers r = readers_of(p);
  // In program order (inputs first).
  for (uint32_t i = 0; i < n; ++i) {
    const ProgramOp& op = p.ops[i];
    if (op.erased || op.cls == OpClass::kData) continue;
    if (is_convolution(op.node->op) && !conv_library_declines(p, i)) {
      // NHWC unless a reader (of the relu epilogue, if any) needs NCHW.
      plan.nhwc_out[i] = r.may_nhwc[i][0] = !r.needs_nchw[i][0];
      continue;
    }
    if (op.epilogue_of >= 0) {
      r.may_nhwc[i][0] = r.may_nhwc[op.epilogue_of][0];
      continue;
    }
    plan_reader(p, i, r, plan);
  }
}

}  // namespace disc::lowering
