#include "lowering/program.h"

#include <functional>
#include <sstream>

#include "lowering/ir/hash.h"

namespace disc::lowering {

const char* gemm_merge_kind_name(GemmMergeKind k) {
  switch (k) {
    case GemmMergeKind::kSharedLhs: return "shared_lhs";
    case GemmMergeKind::kSharedRhs: return "shared_rhs";
    case GemmMergeKind::kBatched: return "batched";
    case GemmMergeKind::kAttentionBackward: return "attention_backward";
  }
  return "?";
}

Program make_program(const ir::Graph& graph) {
  Program p;
  p.ops.reserve(graph.nodes.size());
  for (const ir::GraphNode& gn : graph.nodes) {
    ProgramOp op;
    op.node = gn.node;
    op.inputs = gn.inputs;
    op.cls = classify(gn.node->op);
    p.ops.push_back(std::move(op));
  }
  p.outputs = graph.outputs;
  return p;
}

std::vector<std::vector<uint32_t>> users_of(const Program& p) {
  std::vector<std::vector<uint32_t>> users(p.ops.size());
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].erased) continue;
    for (const ir::GraphRef& r : p.ops[i].inputs)
      if (users[r.node].empty() || users[r.node].back() != i) users[r.node].push_back(i);
  }
  return users;
}

void drop_gemm_groups(Program& p, bool attention) {
  std::vector<GemmGroup> kept;
  for (ProgramOp& op : p.ops) op.gemm_group = -1;
  for (GemmGroup& g : p.gemm_groups) {
    if ((g.kind == GemmMergeKind::kAttentionBackward) == attention) continue;
    for (uint32_t m : g.ops) p.ops[m].gemm_group = static_cast<int32_t>(kept.size());
    kept.push_back(std::move(g));
  }
  p.gemm_groups = std::move(kept);
}

std::vector<bool> used_outside_groups(const Program& p) {
  std::vector<bool> used(p.ops.size(), false);
  for (const ir::GraphRef& r : p.outputs) used[r.node] = true;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].erased) continue;
    for (const ir::GraphRef& r : p.ops[i].inputs)
      if (p.ops[r.node].group < 0 || p.ops[r.node].group != p.ops[i].group) used[r.node] = true;
  }
  return used;
}

size_t Program::live_ops() const {
  size_t n = 0;
  for (const ProgramOp& op : ops) n += !op.erased && op.cls != OpClass::kData;
  return n;
}

size_t Program::library_calls() const {
  size_t n = 0;
  for (const ProgramOp& op : ops) n += !op.erased && op.cls == OpClass::kLibrary;
  return n;
}

size_t Program::epilogues() const {
  size_t n = 0;
  for (const ProgramOp& op : ops) n += !op.erased && op.epilogue_of >= 0;
  return n;
}

size_t Program::library_launches() const {
  size_t merged = 0;
  for (const GemmGroup& g : gemm_groups) merged += g.ops.size() - 1;
  return library_calls() - merged;
}

size_t Program::unfused_ops() const {
  size_t n = 0;
  for (const ProgramOp& op : ops)
    n += !op.erased && op.group < 0 && op.epilogue_of < 0 && op.cls != OpClass::kData &&
         op.cls != OpClass::kLibrary;
  return n;
}

uint64_t Program::signature() const {
  using ir::hash_mix;
  uint64_t h = hash_mix(0x51a, ops.size());
  for (const ProgramOp& op : ops) {
    h = hash_mix(h, (op.erased ? 1u : 0u) | (static_cast<uint64_t>(op.cls) << 1) |
                        (static_cast<uint64_t>(op.group + 1) << 8) |
                        (static_cast<uint64_t>(op.epilogue_of + 1) << 36));
    for (const ir::GraphRef& r : op.inputs) h = hash_mix(hash_mix(h, r.node), r.index);
    for (const auto& out : op.dims) {
      h = hash_mix(h, out.size());
      for (uint32_t s : out) h = hash_mix(h, s);
    }
  }
  for (const ir::GraphRef& r : outputs) h = hash_mix(hash_mix(h, r.node), r.index);
  h = hash_mix(h, num_symbols);
  for (const ProductConstraint& c : products) {
    h = hash_mix(h, c.lhs.size());
    for (uint32_t s : c.lhs) h = hash_mix(h, s);
    h = hash_mix(h, c.rhs.size());
    for (uint32_t s : c.rhs) h = hash_mix(h, s);
  }
  for (const AttentionCall& a : attentions) {
    h = hash_mix(hash_mix(h, 0xa77e + a.scores), static_cast<uint64_t>(a.scale));
    h = hash_mix(hash_mix(h, std::hash<double>{}(a.constant)), a.mask * 2 + a.nan_when_all_masked);
    h = hash_mix(hash_mix(h, static_cast<uint64_t>(a.dropout + 1)), std::hash<double>{}(a.dropout_p));
    for (int32_t g : {a.grad_q, a.grad_kt, a.grad_v}) h = hash_mix(h, static_cast<uint64_t>(g + 1));
  }
  for (const GemmGroup& g : gemm_groups) {
    h = hash_mix(h, 0x9e44 + static_cast<uint64_t>(g.kind));
    h = hash_mix(h, static_cast<uint64_t>(g.attention + 1));
    h = hash_mix(h, g.ops.size());
    for (uint32_t o : g.ops) h = hash_mix(h, o);
  }
  for (const FusionGroup& g : groups) {
    h = hash_mix(h, static_cast<uint64_t>(g.kind));
    h = hash_mix(h, g.ops.size());
    for (uint32_t o : g.ops) h = hash_mix(h, o);
  }
  // The rest of the plan follows from the above and the options, which
  // clear the compile cache when they change; which groups got a kernel
  // also depends on sizes the codegen specializes (broadcast rows).
  for (int32_t k : plan.kernel_of_group) h = hash_mix(h, static_cast<uint64_t>(k + 1));
  return h;
}

std::string Program::to_string() const {
  std::ostringstream os;
  os << "program(ops=" << live_ops() << ", symbols=" << num_symbols
     << ", groups=" << groups.size() << ")\n";
  for (uint32_t i = 0; i < ops.size(); ++i) {
    const ProgramOp& op = ops[i];
    if (op.erased) continue;
    os << "  %" << i << " = " << ir::op_name(op.node->op) << "(";
    for (size_t k = 0; k < op.inputs.size(); ++k)
      os << (k ? ", " : "") << "%" << op.inputs[k].node << "." << op.inputs[k].index;
    os << ") : " << op_class_name(op.cls);
    for (const auto& out : op.dims) {
      os << " [";
      for (size_t a = 0; a < out.size(); ++a) os << (a ? "," : "") << (out[a] ? "s" + std::to_string(out[a]) : "1");
      os << "]";
    }
    if (op.group >= 0) os << "  group " << op.group;
    if (op.epilogue_of >= 0) os << "  epilogue of %" << op.epilogue_of;
    if (op.gemm_group >= 0) os << "  gemm group " << op.gemm_group;
    if (op.attention >= 0) os << "  attention " << op.attention;
    os << "\n";
  }
  os << "  return (";
  for (size_t k = 0; k < outputs.size(); ++k)
    os << (k ? ", " : "") << "%" << outputs[k].node << "." << outputs[k].index;
  os << ")\n";
  for (size_t g = 0; g < groups.size(); ++g) {
    os << "  group " << g << " " << fusion_kind_name(groups[g].kind) << ":";
    for (uint32_t o : groups[g].ops) os << " %" << o;
    os << "\n";
  }
  for (size_t g = 0; g < gemm_groups.size(); ++g) {
    os << "  gemm group " << g << " " << gemm_merge_kind_name(gemm_groups[g].kind) << ":";
    for (uint32_t o : gemm_groups[g].ops) os << " %" << o;
    os << "\n";
  }
  for (size_t a = 0; a < attentions.size(); ++a) os << "  attention " << a << ": " << describe(attentions[a]) << "\n";
  for (const ProductConstraint& c : products) {
    os << "  product";
    for (uint32_t s : c.lhs) os << " s" << s;
    os << " ==";
    for (uint32_t s : c.rhs) os << " s" << s;
    os << "\n";
  }
  os << plan.to_string();
  return os.str();
}

}  // namespace disc::lowering
