// Reads the text that Graph::to_string() prints back into a Graph, so that a
// DISC_DUMP_IR dump or a hand-written file can be fed to the passes
// (tools/disc_opt.cpp, tests/ir/). print(parse(text)) == text.
//
//   graph(hash=5e1f0c2d9a8b7e61, params=1)
//     %0 = param 0 : float32[8]
//     %1 = aten::exp(%in0) -> (float32[8])  inputs(%0.0)
//     return (%1.0)
//
// `hash=` and `params=` may be left out; the hash is always recomputed.
// Lines starting with '#' and blank lines are skipped. Nodes may refer to
// later nodes (verify reports that, naming the node), not to missing ones.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lowering/ir/graph.h"

namespace disc::ir {

// "line 3: unknown dtype 'f16x'"
class ParseError : public std::runtime_error {
 public:
  ParseError(int line, const std::string& what)
      : std::runtime_error("line " + std::to_string(line) + ": " + what), line(line) {}
  int line;
};

// A graph with the nodes it refers to: Graph holds raw pointers, so the
// nodes live exactly as long as this. Movable, not copyable.
struct ParsedGraph {
  Graph graph;
  std::vector<NodePtr> nodes;  // nodes[k] is graph.nodes[k].node

  ParsedGraph() = default;
  ParsedGraph(ParsedGraph&&) = default;
  ParsedGraph(const ParsedGraph&) = delete;
  ~ParsedGraph();  // unlinks inputs first: a malformed file may hold a cycle
};

// Throws ParseError naming the line and the offending token.
ParsedGraph parse_graph(std::string_view text);

}  // namespace disc::ir
