// The sync's compile step: the executable for a graph, from the compile
// cache, or planned by the compiler pipeline and built by the executor on a
// miss (then counted, explained and logged in the cache).
#pragma once

#include <memory>

#include "lazy_backend/exec/executor.h"
#include "lowering/ir/graph.h"

namespace disc {

// `hit` tells whether the graph needed no new kernels: found in the cache,
// revalidated against a cached plan, or compiled by an earlier process.
// Compiles run one at a time, so that two threads never compile one graph.
std::shared_ptr<Executable> executable_for(const ir::Graph& graph, Executor& executor, bool* hit);

}  // namespace disc
