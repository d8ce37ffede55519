#include "lazy_backend/compile_cache.h"

#include <c10/util/Exception.h>

namespace disc {

Executable& CompileCache::get_or_compile(const ir::Graph& graph, Executor& executor,
                                         bool* hit) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(graph.hash);
  if (it != entries_.end()) {
    TORCH_INTERNAL_ASSERT(it->second.num_nodes == graph.nodes.size() &&
                              it->second.num_params == graph.params.size(),
                          "disc: graph hash collision");
    *hit = true;
    return *it->second.executable;
  }
  *hit = false;
  Entry e{graph.nodes.size(), graph.params.size(), executor.compile(graph)};
  return *entries_.emplace(graph.hash, std::move(e)).first->second.executable;
}

void CompileCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

size_t CompileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

CompileCache& compile_cache() {
  static CompileCache c;
  return c;
}

}  // namespace disc
