// The compiler's working form of one graph: the ops of an ir::Graph plus what
// the passes learn about them (erased ops, symbolic dims, fusion groups) and,
// at the end, the execution plan (plan.h).
// Op i of a Program is node i of the Graph it was made from.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "lowering/ir/graph.h"
#include "lowering/ops.h"
#include "lowering/plan.h"

namespace disc::lowering {

// A compile error that names the node and op it is about.
class CompileError : public std::runtime_error {
 public:
  CompileError(const std::string& pass, uint32_t node, const std::string& op,
               const std::string& what)
      : std::runtime_error(pass + ": node %" + std::to_string(node) + " (" + op + "): " + what) {}
};

// A dim argument as torch takes it (-1 is the last) as an index into a
// tensor of rank `rank`.
inline int64_t wrap_dim(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

struct ProgramOp {
  const ir::Node* node = nullptr;
  std::vector<ir::GraphRef> inputs;  // may be rewritten by passes (CSE)
  OpClass cls = OpClass::kOpaque;
  bool erased = false;
  int32_t group = -1;  // fusion group, or -1
  // The library call (GEMM) this op runs inside as a oneDNN post-op, or -1:
  // such an op is no kernel of its own and joins no fusion group.
  int32_t epilogue_of = -1;
  // The merged GEMM (Program::gemm_groups) this op runs inside, or -1.
  int32_t gemm_group = -1;
  // The hand-written attention (Program::attentions) this bmm computes as
  // one fused call, or -1 (the attention-pattern pass).
  int32_t attention = -1;
  // Symbol of each output dim (shape constraints); symbol 0 means "size 1".
  std::vector<std::vector<uint32_t>> dims;
};

struct FusionGroup {
  FusionKind kind = FusionKind::kLoop;
  std::vector<uint32_t> ops;  // in program order
};

// GEMMs that run as one library call (gemm_merge). Members stay ops, so
// their values keep their identities; the executor runs the group when the
// inputs of all of them exist and hands each its part of the one result.
enum class GemmMergeKind : uint8_t {
  kSharedLhs,  // C_i = A @ B_i     -> A @ [B_1 | B_2 ...], column slices
  kSharedRhs,  // C_i = A_i @ B     -> [A_1; A_2 ...] @ B, row slices
  kBatched,    // C_i = A_i @ B_i   -> bmm(stack(A_i), stack(B_i)), one batch each
  // grad q, grad k^T, grad v of a hand-written attention (attention-pattern,
  // not gemm-merge): one fused attention backward.
  kAttentionBackward,
};
const char* gemm_merge_kind_name(GemmMergeKind k);

struct GemmGroup {
  GemmMergeKind kind = GemmMergeKind::kSharedLhs;
  std::vector<uint32_t> ops;  // members, in program order
  int32_t attention = -1;     // kAttentionBackward: its Program::attentions entry
};

// dims(lhs) multiply to dims(rhs): reshape / view / flatten.
struct ProductConstraint {
  std::vector<uint32_t> lhs, rhs;
};

struct Program {
  std::vector<ProgramOp> ops;
  std::vector<ir::GraphRef> outputs;
  uint32_t num_symbols = 1;  // symbol 0 is the constant 1
  std::vector<ProductConstraint> products;
  std::vector<FusionGroup> groups;
  std::vector<GemmGroup> gemm_groups;
  std::vector<AttentionCall> attentions;
  ExecutionPlan plan;  // the plan passes' result (plan.h)
  Target target = Target::kCpu;  // whose code codegen writes

  // Counts after fusion planning.
  size_t live_ops() const;
  size_t library_calls() const;
  size_t epilogues() const;    // ops that run inside a library call
  // Library calls once merged GEMMs count as one.
  size_t library_launches() const;
  size_t unfused_ops() const;  // live ops outside groups that are not data or library
  std::string to_string() const;
  // Hash of every decision the passes made: erased ops, rewired inputs,
  // symbols, products and groups. Two graphs of one structure whose plans
  // have equal signatures run the same code (sizes are kernel arguments).
  uint64_t signature() const;
};

Program make_program(const ir::Graph& graph);

// Removes the GEMM groups of kAttentionBackward (`attention` true) or of the
// other kinds, renumbering the rest: each pass clears its own groups.
void drop_gemm_groups(Program& p, bool attention);

// Users of each op's outputs, by op index (live ops only).
std::vector<std::vector<uint32_t>> users_of(const Program& p);

// Per op: whether a graph output or an op outside its fusion group reads it
// (a kernel must store it).
std::vector<bool> used_outside_groups(const Program& p);

}  // namespace disc::lowering
