// verify: a graph is well formed before anything rewrites it.
//
//   %1 = aten::relu(%0.0)      ok: %0 comes first
//   %1 = aten::relu(%2.0)      error: "node %1 (aten::relu): input 0 refers to %2,
//                                      which does not precede it"
#include "lowering/passes/passes.h"

#include <algorithm>

namespace disc::lowering {

void verify(Program& p) {
  auto fail = [&](uint32_t i, const std::string& what) {
    throw CompileError("verify", i, ir::op_name(p.ops[i].node->op), what);
  };
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const ProgramOp& op = p.ops[i];
    if (op.erased) continue;
    const ir::Node& n = *op.node;
    if (n.outputs.empty()) fail(i, "has no outputs");
    if (n.num_returns + n.mutated.size() != n.outputs.size())
      fail(i, "returns + mutated inputs != outputs");
    if (op.cls == OpClass::kData && !op.inputs.empty()) fail(i, "data leaf with inputs");
    if (op.inputs.size() != n.inputs.size()) fail(i, "input count differs from its node");
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const ir::GraphRef& r = op.inputs[k];
      if (r.node >= i)
        fail(i, "input " + std::to_string(k) + " refers to %" + std::to_string(r.node) +
                    ", which does not precede it");
      const ProgramOp& src = p.ops[r.node];
      if (src.erased) fail(i, "input " + std::to_string(k) + " refers to an erased op");
      if (r.index >= src.node->outputs.size())
        fail(i, "input " + std::to_string(k) + " uses output " + std::to_string(r.index) +
                    " of a node with " + std::to_string(src.node->outputs.size()));
    }
    for (uint32_t m : n.mutated)
      if (m >= op.inputs.size()) fail(i, "mutates a missing input");
    if (op.cls == OpClass::kElementwise) {
      const ir::TensorType& out = n.outputs[0];
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        // An out= argument is overwritten, not read: any old shape will do
        // (an empty one resized to the result's).
        if (std::find(n.mutated.begin(), n.mutated.end(), k) != n.mutated.end()) continue;
        const ir::TensorType& in = p.ops[op.inputs[k].node].node->outputs[op.inputs[k].index];
        if (in.undefined || in.sizes.size() > out.sizes.size())
          fail(i, "input " + std::to_string(k) + " (" + in.to_string() +
                      ") does not broadcast to the output " + out.to_string());
      }
    }
  }
  for (const ir::GraphRef& r : p.outputs)
    if (r.node >= p.ops.size() || p.ops[r.node].erased)
      throw CompileError("verify", r.node, "output", "graph output refers to a missing op");
}

}  // namespace disc::lowering
