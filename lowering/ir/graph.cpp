#include "lowering/ir/graph.h"

#include <sstream>
#include <unordered_map>

#include "lowering/ir/hash.h"

namespace disc::ir {

Graph build_graph(const std::vector<Value>& roots) {
  Graph g;
  std::unordered_map<const Node*, uint32_t> index;
  // Iterative post-order DFS: training graphs are deep enough (thousands of
  // nodes in a chain) to overflow the stack with recursion.
  struct Frame { const Node* node; size_t next_input; };
  std::vector<Frame> stack;
  for (const Value& root : roots) {
    if (index.count(root.node.get())) continue;
    stack.push_back({root.node.get(), 0});
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.next_input < f.node->inputs.size()) {
        const Node* in = f.node->inputs[f.next_input++].node.get();
        if (!index.count(in)) stack.push_back({in, 0});
        continue;
      }
      const Node* n = f.node;
      stack.pop_back();
      if (index.count(n)) continue;  // reached twice through a diamond
      GraphNode gn{n, {}, -1};
      gn.inputs.reserve(n->inputs.size());
      for (const Value& v : n->inputs) gn.inputs.push_back({index.at(v.node.get()), v.index});
      if (n->is_data()) {
        gn.param = static_cast<int32_t>(g.params.size());
        g.params.push_back(static_cast<uint32_t>(g.nodes.size()));
      }
      index.emplace(n, static_cast<uint32_t>(g.nodes.size()));
      g.nodes.push_back(std::move(gn));
    }
  }
  uint64_t h = hash_mix(0xd15c, g.nodes.size());
  for (const GraphNode& gn : g.nodes) {
    h = hash_mix(h, gn.node->local_hash);
    for (const GraphRef& r : gn.inputs) h = hash_mix(hash_mix(h, r.node), r.index);
  }
  for (const Value& root : roots) {
    GraphRef r{index.at(root.node.get()), root.index};
    g.outputs.push_back(r);
    h = hash_mix(hash_mix(h, r.node), r.index);
  }
  g.hash = h;
  return g;
}

std::string Graph::to_string() const {
  std::ostringstream os;
  os << "graph(hash=" << std::hex << hash << std::dec << ", params=" << params.size() << ")\n";
  for (size_t k = 0; k < nodes.size(); ++k) {
    const GraphNode& gn = nodes[k];
    os << "  %" << k << " = ";
    if (gn.param >= 0) {
      os << "param " << gn.param << " : " << gn.node->outputs[0].to_string() << "\n";
      continue;
    }
    os << gn.node->to_string() << "  inputs(";
    for (size_t i = 0; i < gn.inputs.size(); ++i)
      os << (i ? ", " : "") << "%" << gn.inputs[i].node << "." << gn.inputs[i].index;
    os << ")\n";
  }
  os << "  return (";
  for (size_t k = 0; k < outputs.size(); ++k)
    os << (k ? ", " : "") << "%" << outputs[k].node << "." << outputs[k].index;
  os << ")\n";
  return os.str();
}

}  // namespace disc::ir
