// library_epilogue: a relu whose input is a GEMM's output, and that GEMM's
// only use, becomes the GEMM's epilogue: the executor runs it as a oneDNN
// eltwise post-op while the output tile is still in cache, not as a kernel.
//
//   %3 = addmm(%0, %1, %2) : library            %3 = addmm(%0, %1, %2) : library
//   %4 = relu(%3)          : elementwise   ->   %4 = relu(%3) : elementwise  epilogue of %3
//   %5 = mm(%4, %6)        : library            %5 = mm(%4, %6) : library
//
// Only float32 aten::mm / aten::addmm (what runs on oneDNN), and only when
// the un-rectified value is read nowhere else (no other op, not a graph
// output): the GEMM's buffer then holds relu's result.
#include <algorithm>

#include "lowering/passes/passes.h"

namespace disc::lowering {

namespace {

bool is_gemm(uint32_t op) {
  static const uint32_t mm = ir::intern_op("aten::mm"), addmm = ir::intern_op("aten::addmm");
  return op == mm || op == addmm;
}

bool is_f32(const ir::Node& n) {
  return n.outputs.size() == 1 && n.outputs[0].dtype == ir::DType::kFloat32;
}

}  // namespace

void library_epilogue(Program& p) {
  static const uint32_t relu = ir::intern_op("aten::relu");
  for (ProgramOp& op : p.ops) op.epilogue_of = -1;
  const std::vector<std::vector<uint32_t>> users = users_of(p);
  std::vector<bool> is_output(p.ops.size(), false);
  for (const ir::GraphRef& r : p.outputs) is_output[r.node] = true;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    ProgramOp& op = p.ops[i];
    if (op.erased || op.node->op != relu || op.inputs.size() != 1 || !is_f32(*op.node)) continue;
    const uint32_t src = op.inputs[0].node;
    const ProgramOp& gemm = p.ops[src];
    if (gemm.erased || !is_gemm(gemm.node->op) || !is_f32(*gemm.node)) continue;
    if (is_output[src] || users[src] != std::vector<uint32_t>{i}) continue;
    op.epilogue_of = static_cast<int32_t>(src);
  }
}

}  // namespace disc::lowering
