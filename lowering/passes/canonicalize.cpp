// canonicalize: common-subexpression and dead-code elimination.
//
//   %2 = aten::exp(%0)  %3 = aten::exp(%0)  %4 = aten::add(%2, %3)
//     -> %2 = aten::exp(%0)  %4 = aten::add(%2, %2)
//
// Ops with runtime operands (a learning rate) or random draws are never
// merged: two such ops may see different values in the next run; nor are
// collectives, each of which the other ranks expect.
#include <unordered_map>

#include "lowering/ir/hash.h"
#include "lowering/ops.h"
#include "lowering/passes/passes.h"

namespace disc::lowering {

namespace {

bool mergeable(const ir::Node& n) {
  return !n.is_data() && n.runtime.empty() && n.rng_runtime < 0 && !is_collective(n.op);
}

bool same_op(const ProgramOp& a, const ProgramOp& b) {
  const ir::Node& x = *a.node;
  const ir::Node& y = *b.node;
  if (x.op != y.op || a.inputs != b.inputs || x.outputs != y.outputs || x.attrs != y.attrs ||
      x.mutated != y.mutated || x.operands.size() != y.operands.size())
    return false;
  for (size_t k = 0; k < x.operands.size(); ++k) {
    const ir::Operand& o = x.operands[k];
    const ir::Operand& q = y.operands[k];
    if (o.kind != q.kind || o.first != q.first || o.count != q.count || o.mask != q.mask)
      return false;
  }
  return true;
}

void eliminate_common_subexpressions(Program& p) {
  std::unordered_map<uint64_t, std::vector<uint32_t>> seen;
  std::vector<uint32_t> replacement(p.ops.size());
  for (uint32_t i = 0; i < p.ops.size(); ++i) replacement[i] = i;
  auto remap = [&](ir::GraphRef& r) { r.node = replacement[r.node]; };
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    ProgramOp& op = p.ops[i];
    if (op.erased) continue;
    for (ir::GraphRef& r : op.inputs) remap(r);
    if (!mergeable(*op.node)) continue;
    uint64_t h = op.node->local_hash;
    for (const ir::GraphRef& r : op.inputs) h = ir::hash_mix(ir::hash_mix(h, r.node), r.index);
    std::vector<uint32_t>& bucket = seen[h];
    bool merged = false;
    for (uint32_t j : bucket) {
      if (same_op(p.ops[j], op)) {
        replacement[i] = j;
        op.erased = true;
        merged = true;
        break;
      }
    }
    if (!merged) bucket.push_back(i);
  }
  for (ir::GraphRef& r : p.outputs) remap(r);
}

void eliminate_dead_ops(Program& p) {
  std::vector<bool> live(p.ops.size(), false);
  for (const ir::GraphRef& r : p.outputs) live[r.node] = true;
  for (uint32_t i = static_cast<uint32_t>(p.ops.size()); i-- > 0;) {
    if (!live[i] || p.ops[i].erased) continue;
    for (const ir::GraphRef& r : p.ops[i].inputs) live[r.node] = true;
  }
  for (uint32_t i = 0; i < p.ops.size(); ++i)
    if (!live[i] && p.ops[i].cls != OpClass::kData) p.ops[i].erased = true;
}

}  // namespace

void canonicalize(Program& p) {
  eliminate_common_subexpressions(p);
  eliminate_dead_ops(p);
}

}  // namespace disc::lowering
