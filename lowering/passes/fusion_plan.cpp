// plan_fusion: groups ops into kernels, after BladeDISC's fusion kinds.
//
//   %3 = mul(%1, %2)   %4 = add(%3, %0)   %5 = relu(%4)      -> kLoop  {%3 %4 %5}
//   %6 = exp(%5)       %7 = sum.dim_IntList(%6, [1])         -> kInput {%6 %7}
//   %8 = _softmax(%5, 1)                                     -> kStitch {%8}
//
// A producer group joins its consumer when every user of the producer is in
// the consumer (so no cycle can form and no value is computed twice), both
// iterate the same symbolic shape, and the kernel stays under the argument
// cap. A reduction consumer (kInput, kStitch) also takes a producer read
// elsewhere, unless that makes a cycle: the kernel stores it for the
// others. Once every group is formed, a kLoop group whose readers all ended
// up in one group joins that one too. GEMMs and convolutions stay library
// calls (with the epilogues library_epilogue gave them); layout and opaque
// ops stay alone.
#include <algorithm>
#include <optional>
#include <set>

#include "lowering/codegen/common/group_analysis.h"
#include "lowering/passes/passes.h"

namespace disc::lowering {

namespace {

constexpr size_t kMaxKernelArgs = 32;

// Only what generated kernels compute (codegen_takes: ops.def's row for the
// target, dtypes, attributes): a group the codegen would decline runs every
// one of its ops on ATen, so an op it cannot take stays out and the ops
// around it still fuse.
bool is_fusible(const Program& p, uint32_t op) { return codegen_takes(p, op); }

class Planner {
 public:
  explicit Planner(Program& p) : p_(p), users_(users_of(p)) {}

  void run() {
    for (uint32_t i = 0; i < p_.ops.size(); ++i) {
      ProgramOp& op = p_.ops[i];
      if (op.erased || !is_fusible(p_, i) || op.epilogue_of >= 0) continue;
      FusionKind kind = op.cls == OpClass::kReduction ? FusionKind::kInput
                        : op.cls == OpClass::kStitch  ? FusionKind::kStitch
                                                      : FusionKind::kLoop;
      op.group = static_cast<int32_t>(groups_.size());
      groups_.push_back({kind, {i}});
      for (const ir::GraphRef& r : op.inputs) try_merge(r.node, i);
    }
    join_producers_of_one_group();
    // Renumber the surviving groups densely, in program order.
    std::vector<int32_t> renumber(groups_.size(), -1);
    for (uint32_t i = 0; i < p_.ops.size(); ++i) {
      ProgramOp& op = p_.ops[i];
      if (op.group < 0) continue;
      if (renumber[op.group] < 0) {
        renumber[op.group] = static_cast<int32_t>(p_.groups.size());
        p_.groups.push_back({groups_[op.group].kind, {}});
      }
      op.group = renumber[op.group];
      p_.groups[op.group].ops.push_back(i);
    }
  }

 private:
  // The shape a group iterates: its consumer-most op's first output.
  const std::vector<uint32_t>& loop_shape(int32_t g) const {
    return p_.ops[groups_[g].ops.back()].dims[0];
  }

  void try_merge(uint32_t producer, uint32_t consumer) {
    int32_t gp = p_.ops[producer].group, gc = p_.ops[consumer].group;
    if (gp < 0 || gp == gc || groups_[gp].kind != FusionKind::kLoop) return;
    std::set<uint32_t> outside;  // users of the producer in neither group
    for (uint32_t op : groups_[gp].ops)
      for (uint32_t u : users_[op])
        if (p_.ops[u].group != gp && p_.ops[u].group != gc) outside.insert(u);
    // A reduction may take a producer that is also read elsewhere: the
    // kernel stores it in its first pass, and the reduction reads it from
    // registers instead of memory written just before (a bias gradient's
    // sum over threshold_backward, whose result the weight-gradient GEMM
    // reads too). Unless the reduction's group depends on one of those other
    // readers: the merged kernel would then wait on itself.
    if (!outside.empty() &&
        (groups_[gc].kind == FusionKind::kLoop || depends_on_any(gc, outside)))
      return;
    // The consumer reads the producer's values over the producer's space.
    const auto& consumer_space = groups_[gc].kind == FusionKind::kLoop
                                     ? loop_shape(gc)
                                     : p_.ops[p_.ops[consumer].inputs[0].node].dims.at(0);
    if (loop_shape(gp) != consumer_space) return;
    if (external_args(gp, gc) > kMaxKernelArgs) return;
    for (uint32_t op : groups_[gp].ops) p_.ops[op].group = gc;
    auto& ops = groups_[gc].ops;
    ops.insert(ops.end(), groups_[gp].ops.begin(), groups_[gp].ops.end());
    std::sort(ops.begin(), ops.end());
    groups_[gp].ops.clear();
  }

  // Merging in program order decides each producer at its first reader: a
  // producer read by two ops that only later end up in one group (clipping's
  // `grad.mul_(coef)`, read by AdamW's lerp_ and addcmul_) was left alone.
  // Now that the groups are whole, a kLoop group whose every reader is in
  // one other group joins it, until nothing changes.
  void join_producers_of_one_group() {
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t gp = 0; gp < static_cast<int32_t>(groups_.size()); ++gp) {
        if (groups_[gp].kind != FusionKind::kLoop || groups_[gp].ops.empty()) continue;
        const std::optional<int32_t> gc = only_reader_group(gp);
        if (!gc) continue;
        // Its last op: for a reduction group, the row op whose input space
        // the producer must iterate.
        try_merge(groups_[gp].ops.back(), groups_[*gc].ops.back());
        changed |= groups_[gp].ops.empty();
      }
    }
  }

  // The one group that reads group `gp`, when every reader of `gp` outside
  // it is in that group (and there is one).
  std::optional<int32_t> only_reader_group(int32_t gp) const {
    std::optional<int32_t> reader;
    for (uint32_t op : groups_[gp].ops)
      for (uint32_t u : users_[op]) {
        const int32_t g = p_.ops[u].group;
        if (g == gp) continue;
        if (g < 0 || (reader && *reader != g)) return std::nullopt;
        reader = g;
      }
    return reader;
  }

  // Whether group `g` runs after one of `ops`: a walk back over inputs,
  // where reaching an op of a group reaches the whole group (it runs as one
  // kernel, after all its inputs). An op not in a group and before every op
  // in `ops` cannot lead to one of them.
  bool depends_on_any(int32_t g, const std::set<uint32_t>& ops) const {
    const uint32_t lowest = *ops.begin();
    std::vector<bool> seen(p_.ops.size(), false);
    std::vector<uint32_t> work(groups_[g].ops.begin(), groups_[g].ops.end());
    for (uint32_t op : work) seen[op] = true;
    while (!work.empty()) {
      const uint32_t op = work.back();
      work.pop_back();
      if (ops.count(op)) return true;
      auto visit = [&](uint32_t v) {
        if (seen[v]) return;
        seen[v] = true;
        if (p_.ops[v].group >= 0 || v >= lowest) work.push_back(v);
      };
      for (const ir::GraphRef& r : p_.ops[op].inputs) visit(r.node);
      if (int32_t h = p_.ops[op].group; h >= 0)
        for (uint32_t member : groups_[h].ops) visit(member);
    }
    return false;
  }

  size_t external_args(int32_t a, int32_t b) const {
    std::set<std::pair<uint32_t, uint32_t>> args;
    for (int32_t g : {a, b})
      for (uint32_t op : groups_[g].ops) {
        for (const ir::GraphRef& r : p_.ops[op].inputs) {
          int32_t rg = p_.ops[r.node].group;
          if (rg != a && rg != b) args.insert({r.node, r.index});
        }
        args.insert({op, ~0u});  // an upper bound: every op may be an output
      }
    return args.size();
  }

  Program& p_;
  std::vector<std::vector<uint32_t>> users_;
  std::vector<FusionGroup> groups_;
};

}  // namespace

void plan_fusion(Program& p) {
  p.groups.clear();
  for (ProgramOp& op : p.ops) op.group = -1;
  Planner(p).run();
}

}  // namespace disc::lowering
