// Compiled graphs keyed by the graph's structural hash.
#pragma once
#include <memory>
#include <mutex>
#include <unordered_map>

#include "lazy_backend/executor.h"

namespace disc {

class CompileCache {
 public:
  // Returns the executable for `graph`'s structure, compiling on a miss.
  // `hit` tells which happened.
  Executable& get_or_compile(const ir::Graph& graph, Executor& executor, bool* hit);
  void clear();
  size_t size() const;

 private:
  struct Entry {
    size_t num_nodes;   // guards against hash collisions
    size_t num_params;
    std::unique_ptr<Executable> executable;
  };
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_;
};

CompileCache& compile_cache();

}  // namespace disc
