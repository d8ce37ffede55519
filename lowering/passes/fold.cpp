// fold: ops that cancel, or that compose into one, by rewiring reads.
//
//   %2 = transpose(%1, 0, 1)  with %1 = transpose(%0, 1, 0)   ->  %2 is %0
//   %1 = transpose(%0, 1, 1)                                    ->  %1 is %0
//   %2 = squeeze.dim(%1, 2)   with %1 = unsqueeze(%0, 2)        ->  %2 is %0
//   %2 = neg(%1)              with %1 = neg(%0)                 ->  %2 is %0
//   %1 = alias(%0)                                              ->  %1 is %0
//   %2 = reshape(%1, s2)      with %1 = reshape(%0, s1)         ->  %2 = reshape(%0, s2)
//   %2 = expand(%1, s2)       with %1 = expand(%0, s1)          ->  %2 = expand(%0, s2)
//
// Traces have such chains wherever autograd or a model's code takes a view
// of a view (MiniLM's attention: 6-12 transpose pairs and 24-48 reshape
// chains a step). Every rewrite holds for all sizes the graph's structure
// admits (dims are compared after wrapping by the rank, which the structure
// fixes) and for all values (negation is exact), and each is a rewiring of
// reads only: the executor replays an op from the node of the run at hand
// (its sizes, its scalars), so no op may change, only what it reads. Inner
// ops left without readers are erased by canonicalize's DCE, which runs
// next. There is no constant folding: a trace has no constants to fold
// (Python scalars are runtime data, so that a new learning rate does not
// recompile, and a zeros / full is made per run from its node).
#include <algorithm>
#include <optional>
#include <utility>

#include "lowering/passes/passes.h"

namespace disc::lowering {

namespace {

std::optional<int64_t> int_operand(const ir::Node& n, size_t k) {
  const ir::Attr* a = n.attr_operand(k);
  if (!a || a->kind != ir::Attr::Kind::kInt) return std::nullopt;
  return a->i;
}

// Dim `d` of a rank-`rank` tensor as an index in [0, rank), or nullopt.
std::optional<int64_t> wrapped(std::optional<int64_t> d, size_t rank) {
  if (!d) return std::nullopt;
  const int64_t w = wrap_dim(*d, rank);
  return w >= 0 && w < static_cast<int64_t>(rank) ? std::optional(w) : std::nullopt;
}

size_t rank_of(const Program& p, const ir::GraphRef& r) {
  return p.ops[r.node].node->outputs[r.index].sizes.size();
}

// The (smaller, larger) dims transpose op `i` swaps, or nullopt.
std::optional<std::pair<int64_t, int64_t>> swapped_dims(const Program& p, uint32_t i) {
  const ProgramOp& op = p.ops[i];
  if (op.inputs.size() != 1) return std::nullopt;
  const size_t rank = rank_of(p, op.inputs[0]);
  auto a = wrapped(int_operand(*op.node, 1), rank), b = wrapped(int_operand(*op.node, 2), rank);
  if (!a || !b) return std::nullopt;
  return std::minmax(*a, *b);
}

// The value op `i` is equal to, when it undoes its input's op; else nullopt.
std::optional<ir::GraphRef> undone(const Program& p, uint32_t i) {
  const ProgramOp& op = p.ops[i];
  if (op.node->outputs.size() != 1 || op.inputs.size() != 1) return std::nullopt;
  const ProgramOp& in = p.ops[op.inputs[0].node];
  const Op o = op_of(op.node->op), before = op_of(in.node->op);
  if (o == Op::kAlias) return op.inputs[0];
  if (o == Op::kNeg && before == Op::kNeg && in.inputs.size() == 1) return in.inputs[0];
  if (o == Op::kTranspose) {
    auto dims = swapped_dims(p, i);
    if (!dims) return std::nullopt;
    if (dims->first == dims->second) return op.inputs[0];  // swaps a dim with itself
    if (before == Op::kTranspose && swapped_dims(p, op.inputs[0].node) == dims)
      return in.inputs[0];
    return std::nullopt;
  }
  if (o == Op::kSqueezeDim && before == Op::kUnsqueeze && in.inputs.size() == 1) {
    // Both dims index the unsqueezed tensor, whose rank is the squeeze's input's.
    const size_t rank = rank_of(p, op.inputs[0]);
    auto added = wrapped(int_operand(*in.node, 1), rank);
    auto removed = wrapped(int_operand(*op.node, 1), rank);
    if (added && added == removed) return in.inputs[0];
  }
  return std::nullopt;
}

}  // namespace

void fold(Program& p) {
  // One forward sweep: an op's inputs are resolved before it is looked at,
  // so chains of any length fold (transpose(transpose(transpose(x)))).
  std::vector<std::optional<ir::GraphRef>> same_as(p.ops.size());
  auto resolve = [&](ir::GraphRef& r) {
    while (r.index == 0 && same_as[r.node]) r = *same_as[r.node];
  };
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    ProgramOp& op = p.ops[i];
    if (op.erased) continue;
    for (ir::GraphRef& r : op.inputs) resolve(r);
    if (op.node->is_data()) continue;
    if (std::optional<ir::GraphRef> v = undone(p, i)) {
      same_as[i] = *v;
    } else if ((op_of(op.node->op) == Op::kReshape || op_of(op.node->op) == Op::kExpand) && op.inputs.size() == 1) {
      // A reshape depends only on its input's elements in row-major order,
      // which a reshape before it does not change; an expand's input
      // broadcasts to the outer sizes whenever it did to the inner ones
      // (each of its dims is 1 or the inner size, which is 1 or the outer).
      const ProgramOp& in = p.ops[op.inputs[0].node];
      if (in.node->op == op.node->op && in.inputs.size() == 1) op.inputs[0] = in.inputs[0];
    }
  }
  for (ir::GraphRef& r : p.outputs) resolve(r);
}

}  // namespace disc::lowering
