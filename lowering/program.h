// The compiler's working form of one graph: the ops of an ir::Graph plus what
// the passes learn about them (erased ops, symbolic dims, fusion groups).
// Op i of a Program is node i of the Graph it was made from.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "lowering/ir/graph.h"
#include "lowering/op_class.h"

namespace disc::lowering {

// A compile error that names the node and op it is about.
class CompileError : public std::runtime_error {
 public:
  CompileError(const std::string& pass, uint32_t node, const std::string& op,
               const std::string& what)
      : std::runtime_error(pass + ": node %" + std::to_string(node) + " (" + op + "): " + what) {}
};

enum class FusionKind : uint8_t {
  kLoop,     // element-wise + broadcast
  kInput,    // a reduction with its element-wise producers
  kStitch,   // reduction -> element-wise -> reduction (softmax, layer norm)
};
const char* fusion_kind_name(FusionKind k);

struct ProgramOp {
  const ir::Node* node = nullptr;
  std::vector<ir::GraphRef> inputs;  // may be rewritten by passes (CSE)
  OpClass cls = OpClass::kOpaque;
  bool erased = false;
  int32_t group = -1;  // fusion group, or -1
  // The library call (GEMM) this op runs inside as a oneDNN post-op, or -1:
  // such an op is no kernel of its own and joins no fusion group.
  int32_t epilogue_of = -1;
  // Symbol of each output dim (shape constraints); symbol 0 means "size 1".
  std::vector<std::vector<uint32_t>> dims;
};

struct FusionGroup {
  FusionKind kind = FusionKind::kLoop;
  std::vector<uint32_t> ops;  // in program order
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

  // Counts after fusion planning.
  size_t live_ops() const;
  size_t library_calls() const;
  size_t epilogues() const;    // ops that run inside a library call
  size_t unfused_ops() const;  // live ops outside groups that are not data or library
  std::string to_string() const;
  // Hash of every decision the passes made: erased ops, rewired inputs,
  // symbols, products and groups. Two graphs of one structure whose plans
  // have equal signatures run the same code (sizes are kernel arguments).
  uint64_t signature() const;
};

Program make_program(const ir::Graph& graph);

// Users of each op's outputs, by op index (live ops only).
std::vector<std::vector<uint32_t>> users_of(const Program& p);

}  // namespace disc::lowering
