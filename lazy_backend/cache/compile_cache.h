// Compiled graphs keyed by the graph's structural hash (structure + size
// pattern, not concrete sizes): one executable serves every batch size and
// sequence length with the same pattern. A new pattern of a known structure
// (a sequence length that happens to equal a model dim) is planned again,
// which takes a millisecond; when the plan comes out the same, the cached
// executable serves it too ("revalidated"). The cache only finds and keeps:
// the sync's compile step (sync/compile.h) plans, compiles and explains.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "lazy_backend/cache/compile_explain.h"
#include "lowering/ir/graph.h"

namespace disc {

class Executable;  // exec/executor.h: the cache holds them, never runs them

// One compile: what it compiled and why the cache missed.
struct CompileRecord {
  uint64_t hash = 0;
  size_t ops = 0;
  double ms = 0;
  std::string reason;    // see explain_miss
  std::string location;  // the Python line whose sync compiled it
};

class CompileCache {
 public:
  // The executable compiled for `graph`'s structure and size pattern, or
  // null. Shared: a graph in flight keeps its executable alive through
  // clear().
  std::shared_ptr<Executable> find(const ir::Graph& graph) const;
  // An executable of the same structure whose plan is `signature`: it serves
  // `graph` too (see Program::signature). Null when there is none.
  std::shared_ptr<Executable> find_same_plan(const ir::Graph& graph, uint64_t signature) const;
  // Keeps `executable` for `graph`'s key; `signature` is its plan's (0 when
  // the pipeline failed). `new_executable` is false when it is one the
  // cache holds already (revalidated), which size() does not count again.
  void insert(const ir::Graph& graph, uint64_t signature, std::shared_ptr<Executable> executable,
              bool new_executable);
  // Why `graph` missed, measured against every cached key (explain_miss).
  std::string explain_miss(const ir::Graph& graph) const;
  void log_compile(CompileRecord record);
  void clear();
  size_t size() const;
  // Every compile since the last clear_log(), oldest first.
  std::vector<CompileRecord> log() const;
  void clear_log();
  // Fills in the location of the newest record (known only after the sync
  // has released its locks) and returns the record.
  CompileRecord locate_last(const std::string& location);

 private:
  struct Entry {
    GraphKey key;
    uint64_t plan_signature;  // 0 when the pipeline failed
    std::shared_ptr<Executable> executable;
  };
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<Entry>> entries_;  // by hash; a vector for collisions
  size_t size_ = 0;
  std::vector<CompileRecord> log_;
};

CompileCache& compile_cache();

}  // namespace disc
