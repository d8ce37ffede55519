// library_epilogue: a relu (or an exact gelu, after a GEMM) whose input is a
// GEMM's or a convolution's output, and that op's only use, becomes its
// epilogue: the executor runs it as a oneDNN eltwise post-op while the output
// tile is still in cache, not as a kernel.
//
//   %3 = addmm(%0, %1, %2) : library            %3 = addmm(%0, %1, %2) : library
//   %4 = relu(%3)          : elementwise   ->   %4 = relu(%3) : elementwise  epilogue of %3
//   %5 = mm(%4, %6)        : library            %5 = mm(%4, %6) : library
//
// Only float32 aten::mm / aten::addmm / aten::convolution (what runs on
// oneDNN; a convolution the executor leaves to ATen applies the relu after
// it), and only when the un-activated value is read nowhere else (no other
// op, not a graph output): the library call's buffer then holds the
// activation's result. For a GEMM the activation may also read it through
// one reshape that nothing else reads (a Linear on a 3-D input). A gelu
// qualifies in inference only in practice: in training its backward reads
// the GEMM's output. Convolutions take relu only.
#include <algorithm>

#include "lowering/passes/passes.h"

namespace disc::lowering {

namespace {

bool takes_activation(uint32_t op) {
  const Op o = op_of(op);
  return o == Op::kMm || o == Op::kAddmm || o == Op::kConvolution;
}

bool is_f32(const ir::Node& n) {
  return n.outputs.size() == 1 && n.outputs[0].dtype == ir::DType::kFloat32;
}

// gelu(x, approximate="none"), the one oneDNN's eltwise_gelu_erf computes.
bool is_exact_gelu(const ir::Node& n) {
  const ir::Attr* approximate = n.attr_operand(1);
  return op_of(n.op) == Op::kGelu && approximate && approximate->kind == ir::Attr::Kind::kString &&
         approximate->s == "none";
}

}  // namespace

void library_epilogue(Program& p) {
  for (ProgramOp& op : p.ops) op.epilogue_of = -1;
  const std::vector<std::vector<uint32_t>> users = users_of(p);
  std::vector<bool> is_output(p.ops.size(), false);
  for (const ir::GraphRef& r : p.outputs) is_output[r.node] = true;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    ProgramOp& op = p.ops[i];
    if (op.erased || op.inputs.size() != 1 || !is_f32(*op.node)) continue;
    const bool gelu = is_exact_gelu(*op.node);
    if (op_of(op.node->op) != Op::kRelu && !gelu) continue;
    uint32_t reader = i, src = op.inputs[0].node;
    // nn.Linear on a [B, S, H] input is reshape -> addmm -> reshape: the
    // activation may sit behind that last reshape, a view of the GEMM's
    // buffer, which then holds the activated values.
    if (op_of(p.ops[src].node->op) == Op::kReshape && !p.ops[src].erased && !is_output[src] &&
        users[src] == std::vector<uint32_t>{i} && p.ops[src].inputs.size() == 1) {
      reader = src;
      src = p.ops[src].inputs[0].node;
    }
    const ProgramOp& lib = p.ops[src];
    if (lib.erased || !takes_activation(lib.node->op) || !is_f32(*lib.node)) continue;
    if (op_of(lib.node->op) == Op::kConvolution && (gelu || reader != i)) continue;
    if (is_output[src] || users[src] != std::vector<uint32_t>{reader}) continue;
    op.epilogue_of = static_cast<int32_t>(src);
  }
}

}  // namespace disc::lowering
