#include "lazy_backend/cache/compile_explain.h"

#include <iomanip>
#include <sstream>

#include "lowering/ir/hash.h"

namespace disc {

GraphKey GraphKey::of(const ir::Graph& g) {
  GraphKey k;
  k.hash = g.hash;
  k.structure_hash = g.structure_hash;
  k.node_hashes.reserve(g.nodes.size());
  k.node_ops.reserve(g.nodes.size());
  for (const ir::GraphNode& gn : g.nodes) {
    k.node_hashes.push_back(gn.node->local_hash);
    k.node_ops.push_back(gn.node->op);
  }
  k.pattern = g.pattern;
  k.dims = g.dims;
  return k;
}

bool GraphKey::matches(const ir::Graph& g) const {
  if (hash != g.hash || structure_hash != g.structure_hash || pattern != g.pattern ||
      node_hashes.size() != g.nodes.size())
    return false;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (node_hashes[i] != g.nodes[i].node->local_hash) return false;
  return true;
}

namespace {

// First position holding the same code as position k (the dim it equals).
size_t first_with(const std::vector<int32_t>& pattern, size_t k) {
  for (size_t j = 0; j < k; ++j)
    if (pattern[j] == pattern[k]) return j;
  return k;
}

std::string explain_sizes(const ir::Graph& g, const GraphKey& c) {
  size_t k = 0;
  while (k < g.pattern.size() && g.pattern[k] == c.pattern[k]) ++k;
  if (k == g.pattern.size()) return "hash collision with graph " + ir::hash_hex(c.hash);
  std::ostringstream os;
  os << "same structure as graph " << ir::hash_hex(c.hash) << ", other sizes: " << g.site(k).to_string(g)
     << " is " << g.dims[k] << ", was " << c.dims[k];
  if (g.pattern[k] < ir::kFirstSymbol || c.pattern[k] < ir::kFirstSymbol) {
    os << " (sizes 0 and 1 are specialized: they change broadcasting)";
    return os.str();
  }
  const size_t now_eq = first_with(g.pattern, k), was_eq = first_with(c.pattern, k);
  if (now_eq < k) os << "; it now equals " << g.site(now_eq).to_string(g) << " (" << g.dims[now_eq] << ")";
  if (was_eq < k) os << "; it was equal to " << g.site(was_eq).to_string(g) << " (" << c.dims[was_eq] << ")";
  return os.str();
}

std::string explain_structure(const ir::Graph& g, const GraphKey& c) {
  size_t i = 0;
  while (i < g.nodes.size() && i < c.node_hashes.size() && g.nodes[i].node->local_hash == c.node_hashes[i])
    ++i;
  std::ostringstream os;
  os << "new structure; nearest cached graph " << ir::hash_hex(c.hash) << " (" << c.node_hashes.size()
     << " nodes) first differs at node %" << i << ": ";
  if (i == g.nodes.size() || i == c.node_hashes.size()) {
    os << (i == g.nodes.size() ? "this graph ends there" : "the cached graph ends there")
       << " (" << g.nodes.size() << " nodes here)";
    if (i == g.nodes.size() && i == c.node_hashes.size()) os << "; only the edges or outputs differ";
    return os.str();
  }
  const ir::Node& n = *g.nodes[i].node;
  if (n.op != c.node_ops[i])
    os << "here " << ir::op_name(n.op) << ", there " << ir::op_name(c.node_ops[i]);
  else
    os << ir::op_name(n.op) << " with other attributes, dtypes or ranks: " << n.to_string();
  return os.str();
}

}  // namespace

std::string explain_miss(const ir::Graph& g, const std::vector<const GraphKey*>& cached) {
  if (cached.empty()) return "first graph: the cache is empty";
  const GraphKey* nearest = nullptr;
  size_t best = 0;
  for (const GraphKey* c : cached) {
    if (c->structure_hash == g.structure_hash && c->pattern.size() == g.pattern.size())
      return explain_sizes(g, *c);
    size_t i = 0;
    while (i < g.nodes.size() && i < c->node_hashes.size() &&
           g.nodes[i].node->local_hash == c->node_hashes[i])
      ++i;
    if (!nearest || i > best) nearest = c, best = i;
  }
  return explain_structure(g, *nearest);
}

}  // namespace disc
