#include "lowering/ir/node.h"

#include <mutex>
#include <sstream>
#include <unordered_map>

#include "lowering/ir/hash.h"

namespace disc::ir {

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::string TensorType::to_string() const {
  if (undefined) return "undefined";
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (size_t k = 0; k < sizes.size(); ++k) os << (k ? "," : "") << sizes[k];
  os << "]";
  return os.str();
}

namespace {
struct OpTable {
  std::mutex mu;
  std::unordered_map<std::string, uint32_t> ids;
  std::vector<std::unique_ptr<std::string>> names;  // stable addresses
};
OpTable& op_table() {
  static OpTable* t = new OpTable();  // leaked on purpose: used during exit
  return *t;
}
}  // namespace

uint32_t intern_op(std::string_view name) {
  OpTable& t = op_table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.ids.find(std::string(name));
  if (it != t.ids.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(t.names.size());
  t.names.push_back(std::make_unique<std::string>(name));
  t.ids.emplace(std::string(name), id);
  return id;
}

const std::string& op_name(uint32_t id) {
  OpTable& t = op_table();
  std::lock_guard<std::mutex> lock(t.mu);
  return *t.names.at(id);
}

uint32_t data_op() {
  static const uint32_t id = intern_op("disc::data");
  return id;
}

Node::~Node() {
  // Take over the inputs this node alone keeps alive and free them from a
  // worklist; each freed node then dies with no inputs of its own.
  std::vector<NodePtr> work;
  for (Value& v : inputs) work.push_back(std::move(v.node));
  inputs.clear();
  while (!work.empty()) {
    NodePtr n = std::move(work.back());
    work.pop_back();
    if (n && n.use_count() == 1) {
      for (Value& v : n->inputs) work.push_back(std::move(v.node));
      n->inputs.clear();
    }
  }
}

void Node::finalize() {
  uint64_t h = hash_mix(0x5eed, hash_string(op_name(op)));
  for (const Operand& o : operands) {
    h = hash_mix(h, static_cast<uint64_t>(o.kind));
    h = hash_mix(h, o.count);
    if (o.kind == Operand::Kind::kAttr) h = hash_mix(h, attrs[o.first].hash());
    if (o.kind == Operand::Kind::kOptionalTensorList) h = hash_mix(h, attrs[o.mask].hash());
    if (o.kind == Operand::Kind::kRuntime || o.kind == Operand::Kind::kRuntimeList) {
      for (uint32_t k = 0; k < o.count; ++k)
        h = hash_mix(h, static_cast<uint64_t>(runtime[o.first + k].kind));
    }
  }
  for (const TensorType& t : outputs) {
    h = hash_mix(h, static_cast<uint64_t>(t.dtype) + (t.undefined ? 0x100 : 0));
    h = hash_mix(h, t.sizes.size());  // the rank; sizes go to the graph's size pattern
  }
  h = hash_mix(h, num_returns);
  for (uint32_t m : mutated) h = hash_mix(h, m);
  h = hash_mix(h, static_cast<uint64_t>(rng_runtime + 1));
  local_hash = h;
}

std::string Node::to_string() const {
  std::ostringstream os;
  os << op_name(op) << "(";
  bool first = true;
  for (const Operand& o : operands) {
    if (!first) os << ", ";
    first = false;
    switch (o.kind) {
      case Operand::Kind::kTensor: os << "%in" << o.first; break;
      case Operand::Kind::kTensorList:
        os << "[%in" << o.first << "..+" << o.count << "]";
        break;
      case Operand::Kind::kAttr: os << attrs[o.first].to_string(); break;
      case Operand::Kind::kRuntime: os << "$" << runtime[o.first].to_string(); break;
      case Operand::Kind::kRuntimeList:
        os << "$[";
        for (uint32_t k = 0; k < o.count; ++k) os << (k ? ", " : "") << runtime[o.first + k].to_string();
        os << "]";
        break;
      case Operand::Kind::kOptionalTensorList:
        os << "[%in" << o.first << "..+" << o.count << " of " << attrs[o.mask].to_string() << "]";
        break;
    }
  }
  // Returns, then the new value of each input written in place ("%in0 := ...").
  os << ") -> (";
  for (size_t k = 0; k < outputs.size(); ++k) {
    os << (k ? ", " : "");
    if (k >= num_returns && k - num_returns < mutated.size())
      os << "%in" << mutated[k - num_returns] << " := ";
    os << outputs[k].to_string();
  }
  os << ")";
  if (rng_runtime >= 0 && static_cast<size_t>(rng_runtime) + 1 < runtime.size())
    os << " rng(" << runtime[rng_runtime].i << ", " << runtime[rng_runtime + 1].i << ")";
  return os.str();
}

NodePtr make_data_node(TensorType type, std::shared_ptr<Payload> payload) {
  auto n = std::make_shared<Node>();
  n->op = data_op();
  n->outputs.push_back(std::move(type));
  n->num_returns = 1;
  n->payload = std::move(payload);
  n->finalize();
  return n;
}

}  // namespace disc::ir
