// schedule: the order an executor runs the graph in. Units are generated
// kernels (a fusion group with a kernel), merged GEMM groups and single ops;
// a unit runs once all its inputs exist, the one whose first op comes first
// in the program among those ready (Kahn's algorithm), so that the ops of
// the forward run before the backward's as the user traced them.
//
//   %0 param, %1 param, group 0 kLoop: %2 %3, %4 = addmm(%3, ...)
//   -> step 0: %0 param / step 1: %1 param / step 2: kernel 0 / step 3: %4 library
#include <queue>

#include "lowering/passes/passes.h"

namespace disc::lowering {

namespace {

Step::Kind kind_of(const Program& p, uint32_t op) {
  if (p.ops[op].cls == OpClass::kData) return Step::Kind::kParam;
  if (p.ops[op].gemm_group >= 0) return Step::Kind::kGemmGroup;
  if (p.plan.library.size() == p.ops.size() && p.plan.library[op]) return Step::Kind::kLibrary;
  return Step::Kind::kOp;
}

}  // namespace

void schedule(Program& p) {
  const ExecutionPlan& plan = p.plan;
  const size_t n_ops = p.ops.size();
  // Units: ops are numbered 0..n_ops, kernels after them; a merged GEMM
  // group is its first member's unit.
  auto unit = [&](uint32_t i) -> size_t {
    if (int32_t mg = p.ops[i].gemm_group; mg >= 0) return p.gemm_groups[mg].ops.front();
    const int32_t g = p.ops[i].group;
    const int32_t k = g >= 0 && static_cast<size_t>(g) < plan.kernel_of_group.size() ? plan.kernel_of_group[g] : -1;
    return k >= 0 ? n_ops + static_cast<size_t>(k) : i;
  };
  const size_t n_units = n_ops + plan.kernels.size();
  std::vector<std::vector<size_t>> next(n_units);
  std::vector<size_t> indegree(n_units, 0), first_op(n_units, SIZE_MAX);
  std::vector<bool> present(n_units, false);
  for (uint32_t i = 0; i < n_ops; ++i) {
    if (p.ops[i].erased) continue;
    const size_t u = unit(i);
    present[u] = true;
    first_op[u] = std::min<size_t>(first_op[u], i);
    for (const ir::GraphRef& r : p.ops[i].inputs) {
      const size_t v = unit(r.node);
      if (v == u) continue;
      next[v].push_back(u);
      ++indegree[u];
    }
  }
  using Item = std::pair<size_t, size_t>;  // (first op, unit)
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (size_t u = 0; u < n_units; ++u)
    if (present[u] && indegree[u] == 0) ready.push({first_op[u], u});
  std::vector<Step>& steps = p.plan.steps;
  steps.clear();
  while (!ready.empty()) {
    const auto [first, u] = ready.top();
    ready.pop();
    Step s;
    s.op = static_cast<uint32_t>(first);
    if (u >= n_ops) {
      s.kind = Step::Kind::kKernel;
      s.kernel = static_cast<int32_t>(u - n_ops);
    } else {
      s.kind = kind_of(p, static_cast<uint32_t>(u));
    }
    steps.push_back(std::move(s));
    for (size_t v : next[u])
      if (--indegree[v] == 0) ready.push({first_op[v], v});
  }
}

}  // namespace disc::lowering
