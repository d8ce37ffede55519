// verify_plan: the fusion plan is executable.
//
// Every kernel (group or single op) must be schedulable after its inputs: the
// graph of kernels is acyclic. A kInput kernel holds exactly one reduction, a
// kStitch kernel exactly one stitch op, and no erased op or library
// epilogue is in a group. A merged GEMM group (gemm_merge) is one unit: its
// members are live library ops, and the units stay acyclic.
#include <queue>

#include "lowering/passes/passes.h"

namespace disc::lowering {

void verify_plan(Program& p) {
  auto fail = [&](uint32_t i, const std::string& what) {
    throw CompileError("verify-plan", i, ir::op_name(p.ops[i].node->op), what);
  };
  // Kernel id: the group for grouped ops, a unique id for the others.
  const uint32_t n_groups = static_cast<uint32_t>(p.groups.size());
  std::vector<uint32_t> kernel(p.ops.size());
  for (uint32_t i = 0; i < p.ops.size(); ++i)
    kernel[i] = p.ops[i].group >= 0 ? static_cast<uint32_t>(p.ops[i].group) : n_groups + i;
  for (size_t g = 0; g < p.gemm_groups.size(); ++g) {
    const std::vector<uint32_t>& members = p.gemm_groups[g].ops;
    for (uint32_t op : members) {
      const ProgramOp& m = p.ops[op];
      if (m.erased || m.cls != OpClass::kLibrary || m.group >= 0 || m.gemm_group != static_cast<int32_t>(g))
        fail(op, "not a live library op of gemm group " + std::to_string(g));
      kernel[op] = n_groups + members.front();
    }
  }

  for (uint32_t g = 0; g < n_groups; ++g) {
    size_t reductions = 0, stitches = 0;
    for (uint32_t op : p.groups[g].ops) {
      if (p.ops[op].erased) fail(op, "erased op in group " + std::to_string(g));
      if (p.ops[op].epilogue_of >= 0) fail(op, "library epilogue in group " + std::to_string(g));
      reductions += p.ops[op].cls == OpClass::kReduction;
      stitches += p.ops[op].cls == OpClass::kStitch;
    }
    FusionKind k = p.groups[g].kind;
    if ((k == FusionKind::kInput && reductions != 1) || (k == FusionKind::kStitch && stitches != 1) ||
        (k == FusionKind::kLoop && reductions + stitches != 0))
      fail(p.groups[g].ops.front(), std::string("group ") + std::to_string(g) + " is not a valid " +
                                        fusion_kind_name(k));
  }

  // Kahn's algorithm over kernels.
  const size_t n = n_groups + p.ops.size();
  std::vector<std::vector<uint32_t>> next(n);
  std::vector<uint32_t> indegree(n, 0);
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].erased) continue;
    for (const ir::GraphRef& r : p.ops[i].inputs) {
      if (kernel[r.node] == kernel[i]) continue;
      next[kernel[r.node]].push_back(kernel[i]);
      ++indegree[kernel[i]];
    }
  }
  std::queue<uint32_t> ready;
  for (uint32_t k = 0; k < n; ++k)
    if (indegree[k] == 0) ready.push(k);
  size_t visited = 0;
  while (!ready.empty()) {
    uint32_t k = ready.front();
    ready.pop();
    ++visited;
    for (uint32_t m : next[k])
      if (--indegree[m] == 0) ready.push(m);
  }
  if (visited != n) fail(p.groups.empty() ? 0 : p.groups.front().ops.front(), "fusion created a cycle");
}

}  // namespace disc::lowering
