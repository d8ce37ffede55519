// The trace IR: one Node per recorded op, linked into a DAG by shared_ptr.
//
// A node names its op (an interned string such as "aten::addmm"), its tensor
// inputs, and its non-tensor operands. Operands mirror the op's schema in
// order, so a node can be replayed exactly (reference executor) or lowered by
// the compiler. Values that change every step (Python float scalars such as
// the learning rate, RNG seed and offset) are *runtime* operands: their kind
// is part of the structural hash, their value is not.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lowering/ir/attr.h"
#include "lowering/ir/dtype.h"

namespace disc::ir {

struct Node;
using NodePtr = std::shared_ptr<Node>;

// One output of a node.
struct Value {
  NodePtr node;
  uint32_t index = 0;
  explicit operator bool() const { return node != nullptr; }
  bool operator==(const Value& o) const { return node == o.node && index == o.index; }
};

struct TensorType {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes;
  bool undefined = false;  // an output the op did not produce (masked grads)
  int64_t numel() const;
  bool operator==(const TensorType& o) const {
    return dtype == o.dtype && sizes == o.sizes && undefined == o.undefined;
  }
  std::string to_string() const;
};

// One schema argument of the op, in schema order.
struct Operand {
  enum class Kind : uint8_t {
    kTensor,             // inputs[first]
    kTensorList,         // inputs[first, first + count)
    kAttr,               // attrs[first]
    kRuntime,            // runtime[first]: a scalar whose value is data
    kRuntimeList,        // runtime[first, first + count): a list of them
    kOptionalTensorList, // Tensor?[]: attrs[mask] is a kBoolList of which
                         // entries are present; those are inputs[first, +count)
  };
  Kind kind;
  uint32_t first = 0;
  uint32_t count = 1;
  uint32_t mask = 0;
};

// Opaque device data held by a leaf ("disc::data") node. lazy_backend
// subclasses it to hold a tensor; the compiler only sees its type.
struct Payload {
  virtual ~Payload() = default;
};

struct Node {
  uint32_t op = 0;                 // interned op name, see op_name()
  std::vector<Value> inputs;
  std::vector<Operand> operands;
  std::vector<Attr> attrs;         // constants: hashed by value
  std::vector<Attr> runtime;       // data: hashed by kind only
  std::vector<TensorType> outputs; // [0, num_returns) returns, then mutated inputs
  uint32_t num_returns = 0;
  std::vector<uint32_t> mutated;   // indices into inputs the op writes in place
  int32_t rng_runtime = -1;        // index of (seed, offset) in runtime, or -1
  std::shared_ptr<Payload> payload;  // leaves only
  // Where the op was traced ("file:line (function)" of the user's code), for
  // the error of an op that may fail on its data; not hashed. Null else.
  std::shared_ptr<const std::string> origin;
  uint64_t local_hash = 0;         // op, operands, output dtypes and ranks; no
                                   // inputs, no sizes (see Graph::pattern)

  Node() = default;
  ~Node();  // iterative: a long trace chain must not recurse per node
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  bool is_data() const { return payload != nullptr; }
  // The constant passed as schema operand k, or nullptr when operand k is
  // not a constant (a tensor, a runtime scalar) or does not exist.
  const Attr* attr_operand(size_t k) const {
    if (k >= operands.size() || operands[k].kind != Operand::Kind::kAttr) return nullptr;
    return &attrs[operands[k].first];
  }
  // The input index of schema operand k, or -1 when operand k is not a
  // single tensor (absent, a constant, a list) or does not exist.
  int tensor_operand(size_t k) const {
    if (k >= operands.size() || operands[k].kind != Operand::Kind::kTensor) return -1;
    return static_cast<int>(operands[k].first);
  }
  // Computes local_hash; call once the node is fully built.
  void finalize();
  std::string to_string() const;
};

// Interned op names: ids are stable for the life of the process.
uint32_t intern_op(std::string_view name);
const std::string& op_name(uint32_t id);

// The op id of leaf nodes that hold device data.
uint32_t data_op();

// A leaf holding data of the given type.
NodePtr make_data_node(TensorType type, std::shared_ptr<Payload> payload);

}  // namespace disc::ir
