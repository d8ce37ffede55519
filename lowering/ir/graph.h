// A flat, post-ordered view of the part of the trace DAG that a sync runs.
//
// The sync builds one Graph from the live pending values; its structural hash
// is the compile-cache key, and the executor (reference or compiled) runs it.
// Data leaves become parameters, in the order the walk meets them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lowering/ir/node.h"

namespace disc::ir {

struct GraphRef {
  uint32_t node;   // index into Graph::nodes
  uint32_t index;  // output index of that node
  bool operator==(const GraphRef& o) const { return node == o.node && index == o.index; }
};

struct GraphNode {
  const Node* node;
  std::vector<GraphRef> inputs;
  int32_t param = -1;  // parameter index for data leaves
};

// Where one entry of Graph::dims comes from.
struct DimSite {
  uint32_t node;     // index into Graph::nodes
  bool is_attr;      // a symbolic attribute value, else an output size
  uint32_t which;    // attrs index, or output index
  uint32_t pos;      // element of the int list, or dim of the output
  std::string to_string(const struct Graph& g) const;
};

// The size pattern codes each dim: sizes <= 1 (and the negative markers of
// view / slice) stand for themselves, because broadcasting and empty
// tensors change what a kernel does; any other size becomes a symbol,
// numbered by first appearance. Two graphs with equal structure and equal
// patterns differ only in the values of their symbols, which every kernel
// takes at run time: that equality is the cache's guard.
constexpr int32_t kFirstSymbol = 2;

struct Graph {
  std::vector<GraphNode> nodes;   // post-order: inputs before users
  std::vector<uint32_t> params;   // node indices of data leaves
  std::vector<GraphRef> outputs;  // one per requested root, deduplicated
  std::vector<int64_t> dims;      // every size and symbolic attr value, in walk order
  std::vector<int32_t> pattern;   // dims as literals or symbols (>= kFirstSymbol)
  // Per parameter: read-only, its buffer stays the data of something outside
  // this graph (a storage that this sync does not rebind), so it is never
  // written in place. Filled by the sync; empty means "all read-only".
  std::vector<uint8_t> read_only_params;
  uint64_t structure_hash = 0;    // ops, attributes, dtypes, ranks, edges
  uint64_t hash = 0;              // structure_hash + pattern: the cache key

  size_t num_ops() const { return nodes.size() - params.size(); }
  std::string to_string() const;
  // Which node, output or attribute dims[k] belongs to.
  DimSite site(size_t k) const;
};

// Visits every dim of the graph in a fixed order (the order of
// Graph::dims): per node, its symbolic attribute values, then its output
// sizes. `visit(DimSite, int64_t value)`.
template <typename F>
void for_each_dim(const Graph& g, F&& visit) {
  for (uint32_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = *g.nodes[i].node;
    for (uint32_t a = 0; a < n.attrs.size(); ++a) {
      const Attr& at = n.attrs[a];
      if (!at.symbolic) continue;
      if (at.kind == Attr::Kind::kIntList) {
        for (uint32_t k = 0; k < at.ints.size(); ++k) visit(DimSite{i, true, a, k}, at.ints[k]);
      } else {
        visit(DimSite{i, true, a, 0}, at.i);
      }
    }
    for (uint32_t o = 0; o < n.outputs.size(); ++o) {
      const std::vector<int64_t>& sizes = n.outputs[o].sizes;
      for (uint32_t d = 0; d < sizes.size(); ++d) visit(DimSite{i, false, o, d}, sizes[d]);
    }
  }
}

// Builds the graph that computes `roots` (duplicates are kept as separate
// outputs referring to the same GraphRef). Hashes structure, attributes,
// dtypes, ranks and the size pattern; concrete sizes, runtime scalar values
// and data contents are excluded.
Graph build_graph(const std::vector<Value>& roots);

// Fills structure_hash, dims, pattern and hash of a graph whose nodes,
// params and outputs are set (build_graph, and the text parser ir/parse.h).
void hash_graph(Graph& g);

}  // namespace disc::ir
