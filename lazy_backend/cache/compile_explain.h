// Why the compile cache missed: the answer DISC_DEBUG_COMPILE=1 prints and
// torch_disc.explain() lists, for every compile.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lowering/ir/graph.h"

namespace disc {

// What the cache remembers of a compiled graph: enough to check a hit
// exactly (a hash collision must never run the wrong executable) and to
// compare a missing graph against it.
struct GraphKey {
  uint64_t hash = 0;
  uint64_t structure_hash = 0;
  std::vector<uint64_t> node_hashes;  // local hash per node, walk order
  std::vector<uint32_t> node_ops;
  std::vector<int32_t> pattern;
  std::vector<int64_t> dims;          // the sizes it was first compiled for

  static GraphKey of(const ir::Graph& g);
  // The guard: same structure and the same size pattern.
  bool matches(const ir::Graph& g) const;
};

// Names what differs between `g` and the nearest of `cached`: a dim (which
// node, which size, what it was), or the first node whose op, attributes,
// dtypes or ranks differ.
std::string explain_miss(const ir::Graph& g, const std::vector<const GraphKey*>& cached);

}  // namespace disc
