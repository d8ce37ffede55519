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

struct Graph {
  std::vector<GraphNode> nodes;   // post-order: inputs before users
  std::vector<uint32_t> params;   // node indices of data leaves
  std::vector<GraphRef> outputs;  // one per requested root, deduplicated
  uint64_t hash = 0;

  size_t num_ops() const { return nodes.size() - params.size(); }
  std::string to_string() const;
};

// Builds the graph that computes `roots` (duplicates are kept as separate
// outputs referring to the same GraphRef). Hashes structure, attributes,
// dtypes and shapes; runtime scalar values and data contents are excluded.
Graph build_graph(const std::vector<Value>& roots);

}  // namespace disc::ir
