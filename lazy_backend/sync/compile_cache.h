// Compiled graphs keyed by the graph's structural hash (structure + size
// pattern, not concrete sizes): one executable serves every batch size and
// sequence length with the same pattern. A new pattern of a known structure
// (a sequence length that happens to equal a model dim) is planned again,
// which takes a millisecond; when the plan comes out the same, the cached
// executable is reused ("revalidated") instead of compiled. Each compile is
// explained and logged.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "lazy_backend/exec/executor.h"
#include "lazy_backend/sync/compile_explain.h"

namespace disc {

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
  // Returns the executable for `graph`'s structure, compiling on a miss.
  // `hit` tells which happened. Shared: a graph in flight keeps its
  // executable alive through clear().
  std::shared_ptr<Executable> get_or_compile(const ir::Graph& graph, Executor& executor, bool* hit);
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
  // An entry of the same structure whose plan is `signature`: its
  // executable serves `graph` too (see Program::signature).
  const Entry* same_plan(const ir::Graph& graph, uint64_t signature) const;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<Entry>> entries_;  // by hash; a vector for collisions
  size_t size_ = 0;
  std::vector<CompileRecord> log_;
};

CompileCache& compile_cache();

}  // namespace disc
