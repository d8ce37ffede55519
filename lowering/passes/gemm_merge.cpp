// gemm_merge: float32 GEMMs that share an operand become one library call.
// Q/K/V projections read the same hidden states; in backward, the weight
// gradients of those projections read the same input. One wider GEMM fills
// the machine better than three narrow ones and launches once.
//
//   %5 = addmm(%2, %0, %3)   %6 = addmm(%4, %0, %7)   (shared A = %0)
//     ->  gemm group 0 shared_lhs: %5 %6
//         (executor: A @ [B_5 | B_6] + [b_5 | b_6], each member its columns)
//   %8 = mm(%9, %1)   %10 = mm(%11, %1)                (shared B = %1)
//     ->  gemm group 1 shared_rhs: %8 %10               ([A_8; A_10] @ B, rows)
//   %12 = mm(%13, %14)   %15 = mm(%16, %17)  equal symbolic m, k, n, nothing shared
//     ->  gemm group 2 batched: %12 %15   (only with gemm_merge_batched: one bmm)
//
// Decided on symbols, not sizes, so one plan serves every binding. Members
// stay ops (their values keep their identities). A member may not depend on
// another, also not through earlier groups, which run as one unit: the
// group would wait for its own output.
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "lowering/passes/passes.h"
#include "runtime/options.h"

namespace disc::lowering {

namespace {

struct Operands {
  ir::GraphRef a{}, b{}, bias{};
  bool addmm = false;
};

bool is_one(const ir::Node& n, size_t pos) {
  const ir::Attr* a = n.attr_operand(pos);
  return a && a->is_one();
}

class Merger {
 public:
  explicit Merger(Program& p) : p_(p), users_(users_of(p)), has_epilogue_(p.ops.size(), false) {
    for (const ProgramOp& op : p.ops)
      if (!op.erased && op.epilogue_of >= 0) has_epilogue_[op.epilogue_of] = true;
  }

  void run(bool batched) {
    std::map<std::tuple<uint32_t, uint32_t, bool>, std::vector<uint32_t>> by_lhs, by_rhs;
    std::map<std::vector<uint32_t>, std::vector<uint32_t>> by_shape;
    for (uint32_t i = 0; i < p_.ops.size(); ++i) {
      std::optional<Operands> o = gemm(i);
      if (!o) continue;
      by_lhs[{o->a.node, o->a.index, o->addmm}].push_back(i);
    }
    for (auto& [key, ops] : by_lhs) form(ops, GemmMergeKind::kSharedLhs);
    // Sharing B, each member's rows get the same bias: only equal biases.
    std::map<std::tuple<uint32_t, uint32_t, bool, uint32_t, uint32_t>, std::vector<uint32_t>> rhs;
    for (uint32_t i = 0; i < p_.ops.size(); ++i) {
      std::optional<Operands> o = gemm(i);
      if (!o || p_.ops[i].gemm_group >= 0) continue;
      rhs[{o->b.node, o->b.index, o->addmm, o->bias.node, o->bias.index}].push_back(i);
    }
    for (auto& [key, ops] : rhs) form(ops, GemmMergeKind::kSharedRhs);
    if (!batched) return;
    // bmm takes no bias in oneDNN 2.6: mm only.
    for (uint32_t i = 0; i < p_.ops.size(); ++i) {
      std::optional<Operands> o = gemm(i);
      if (!o || o->addmm || p_.ops[i].gemm_group >= 0) continue;
      const auto& a = dims(o->a);
      by_shape[{a[0], a[1], dims(o->b)[1]}].push_back(i);
    }
    for (auto& [key, ops] : by_shape) form(ops, GemmMergeKind::kBatched);
  }

 private:
  const std::vector<uint32_t>& dims(const ir::GraphRef& r) const { return p_.ops[r.node].dims[r.index]; }
  ir::DType dtype(const ir::GraphRef& r) const { return p_.ops[r.node].node->outputs[r.index].dtype; }

  // The operands of op i if it is a GEMM the executor can merge: float32
  // mm, or addmm with beta = alpha = 1 and a bias of [n]; no epilogue.
  std::optional<Operands> gemm(uint32_t i) const {
    const ProgramOp& op = p_.ops[i];
    const Op kind = op_of(op.node->op);
    if (op.erased || (kind != Op::kMm && kind != Op::kAddmm) || has_epilogue_[i]) return std::nullopt;
    if (op.node->outputs.size() != 1 || op.node->outputs[0].dtype != ir::DType::kFloat32) return std::nullopt;
    for (const ir::GraphRef& r : op.inputs)
      if (dtype(r) != ir::DType::kFloat32) return std::nullopt;
    Operands o;
    o.addmm = kind == Op::kAddmm;
    if (o.addmm) {
      if (op.inputs.size() != 3 || !is_one(*op.node, 3) || !is_one(*op.node, 4)) return std::nullopt;
      o.bias = op.inputs[0];
      if (dims(o.bias) != std::vector<uint32_t>{op.dims[0][1]}) return std::nullopt;
    } else if (op.inputs.size() != 2) {
      return std::nullopt;
    }
    o.a = op.inputs[o.addmm ? 1 : 0];
    o.b = op.inputs[o.addmm ? 2 : 1];
    if (dims(o.a).size() != 2 || dims(o.b).size() != 2) return std::nullopt;
    return o;
  }

  // Ops reachable from `from` along uses; reaching a member of a formed
  // group reaches all of it (the group runs as one unit).
  std::vector<bool> reach(const std::vector<uint32_t>& from) const {
    std::vector<bool> seen(p_.ops.size(), false);
    std::vector<uint32_t> stack;
    auto push_users = [&](uint32_t op) {
      for (uint32_t u : users_[op])
        if (!seen[u]) seen[u] = true, stack.push_back(u);
    };
    for (uint32_t op : from) push_users(op);
    while (!stack.empty()) {
      const uint32_t op = stack.back();
      stack.pop_back();
      push_users(op);
      if (p_.ops[op].gemm_group >= 0)
        for (uint32_t m : p_.gemm_groups[p_.ops[op].gemm_group].ops)
          if (!seen[m]) seen[m] = true, stack.push_back(m);
    }
    return seen;
  }

  // Greedy, in program order: a candidate joins unless it reaches a member
  // or a member reaches it; those left out try again among themselves.
  void form(std::vector<uint32_t> candidates, GemmMergeKind kind) {
    while (candidates.size() >= 2) {
      std::vector<uint32_t> group{candidates[0]}, rest;
      std::vector<bool> from_group = reach(group);
      for (size_t c = 1; c < candidates.size(); ++c) {
        const uint32_t j = candidates[c];
        std::vector<bool> from_j = reach({j});
        const bool cycle = from_group[j] || std::any_of(group.begin(), group.end(),
                                                        [&](uint32_t m) { return from_j[m]; });
        if (cycle) {
          rest.push_back(j);
          continue;
        }
        group.push_back(j);
        for (size_t k = 0; k < from_j.size(); ++k) from_group[k] = from_group[k] || from_j[k];
      }
      if (group.size() >= 2) {
        for (uint32_t m : group) p_.ops[m].gemm_group = static_cast<int32_t>(p_.gemm_groups.size());
        p_.gemm_groups.push_back({kind, group});
      }
      candidates = std::move(rest);
    }
  }

  Program& p_;
  std::vector<std::vector<uint32_t>> users_;
  std::vector<bool> has_epilogue_;
};

}  // namespace

void gemm_merge(Program& p) {
  drop_gemm_groups(p, false);
  if (!options::flag(options::Id::kGemmMerge)) return;
  Merger(p).run(options::flag(options::Id::kGemmMergeBatched));
}

}  // namespace disc::lowering
