#include "lowering/ir/graph.h"

#include <algorithm>
#include <climits>
#include <sstream>
#include <unordered_map>

#include "lowering/ir/hash.h"

namespace disc::ir {

namespace {

std::vector<int32_t> size_pattern(const std::vector<int64_t>& dims) {
  std::vector<int32_t> pattern;
  pattern.reserve(dims.size());
  // Graphs hold few distinct sizes: a linear scan beats hashing here.
  std::vector<int64_t> symbols;
  for (int64_t v : dims) {
    if (v < kFirstSymbol) {
      pattern.push_back(static_cast<int32_t>(std::max<int64_t>(v, INT32_MIN)));
      continue;
    }
    auto it = std::find(symbols.begin(), symbols.end(), v);
    if (it == symbols.end()) it = symbols.insert(symbols.end(), v);
    pattern.push_back(kFirstSymbol + static_cast<int32_t>(it - symbols.begin()));
  }
  return pattern;
}

}  // namespace

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
  for (const Value& root : roots) g.outputs.push_back({index.at(root.node.get()), root.index});
  hash_graph(g);
  return g;
}

void hash_graph(Graph& g) {
  uint64_t h = hash_mix(0xd15c, g.nodes.size());
  for (const GraphNode& gn : g.nodes) {
    h = hash_mix(h, gn.node->local_hash);
    for (const GraphRef& r : gn.inputs) h = hash_mix(hash_mix(h, r.node), r.index);
  }
  for (const GraphRef& r : g.outputs) h = hash_mix(hash_mix(h, r.node), r.index);
  g.structure_hash = h;
  g.dims.clear();
  for_each_dim(g, [&g](const DimSite&, int64_t v) { g.dims.push_back(v); });
  g.pattern = size_pattern(g.dims);
  for (int32_t c : g.pattern) h = hash_mix(h, static_cast<uint64_t>(static_cast<int64_t>(c)));
  g.hash = h;
}

DimSite Graph::site(size_t k) const {
  DimSite found{0, false, 0, 0};
  size_t i = 0;
  for_each_dim(*this, [&](const DimSite& s, int64_t) {
    if (i++ == k) found = s;
  });
  return found;
}

std::string DimSite::to_string(const Graph& g) const {
  const Node& n = *g.nodes[node].node;
  std::ostringstream os;
  if (is_attr) {
    os << "element " << pos << " of attribute " << which << " of %" << node << " ("
       << op_name(n.op) << ")";
  } else {
    os << "dim " << pos << " of %" << node << (n.is_data() ? " (input " : " (")
       << (n.is_data() ? std::to_string(g.nodes[node].param) : op_name(n.op));
    if (n.outputs.size() > 1) os << ", output " << which;
    os << ": " << n.outputs[which].to_string() << ")";
  }
  return os.str();
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
