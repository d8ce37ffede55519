#include "lazy_backend/cache/compile_cache.h"

#include <utility>

namespace disc {

std::shared_ptr<Executable> CompileCache::find(const ir::Graph& graph) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(graph.hash);
  if (it == entries_.end()) return nullptr;
  for (const Entry& e : it->second)
    if (e.key.matches(graph)) return e.executable;
  return nullptr;
}

std::shared_ptr<Executable> CompileCache::find_same_plan(const ir::Graph& graph,
                                                         uint64_t signature) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [h, bucket] : entries_)
    for (const Entry& e : bucket)
      if (e.key.structure_hash == graph.structure_hash && e.plan_signature == signature &&
          e.key.node_hashes.size() == graph.nodes.size())
        return e.executable;
  return nullptr;
}

void CompileCache::insert(const ir::Graph& graph, uint64_t signature,
                          std::shared_ptr<Executable> executable, bool new_executable) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_[graph.hash].push_back({GraphKey::of(graph), signature, std::move(executable)});
  if (new_executable) ++size_;
}

std::string CompileCache::explain_miss(const ir::Graph& graph) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const GraphKey*> cached;
  for (const auto& [h, bucket] : entries_)
    for (const Entry& e : bucket) cached.push_back(&e.key);
  return disc::explain_miss(graph, cached);
}

void CompileCache::log_compile(CompileRecord record) {
  std::lock_guard<std::mutex> lock(mu_);
  log_.push_back(std::move(record));
}

void CompileCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  size_ = 0;
}

size_t CompileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_;
}

std::vector<CompileRecord> CompileCache::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

void CompileCache::clear_log() {
  std::lock_guard<std::mutex> lock(mu_);
  log_.clear();
}

CompileRecord CompileCache::locate_last(const std::string& location) {
  std::lock_guard<std::mutex> lock(mu_);
  if (log_.empty()) return {};
  log_.back().location = location;
  return log_.back();
}

CompileCache& compile_cache() {
  static CompileCache c;
  return c;
}

}  // namespace disc
