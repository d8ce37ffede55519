// The sync's first steps, shared with the recovery of a failed graph:
// what is pending, the graph that computes it, and its executable.
#pragma once
#include <memory>
#include <unordered_set>
#include <vector>

#include "lazy_backend/exec/executor.h"
#include "lazy_backend/trace/lazy_storage.h"
#include "lowering/ir/graph.h"

namespace disc {

struct Pending {
  std::vector<LazyStorage*> storages;
  std::vector<ir::Value> roots;  // storages[k]'s value
  // Data nodes that stay some storage's value after this sync: their
  // buffers may be read later and are never updated in place.
  std::unordered_set<const ir::Node*> kept;
};

// Every live buffer whose value is still a trace: computing them all in one
// graph is what keeps a value from ever being computed twice. Single
// elements (a loss, an accuracy) come first: the graph then computes them
// before the backward and the update, and the host, which reads them right
// after the step, gets them while the rest still runs.
Pending collect_pending();

// Discards the pending values of threads that are failing (failures.h):
// the rest of a failed step is not computed. Whether it discarded any.
bool discard_work_of_failing_threads();

// The graph of `roots`, hashed, its parameters in `kept` marked as kept.
ir::Graph build_and_hash(const std::vector<ir::Value>& roots,
                         const std::unordered_set<const ir::Node*>& kept);

// The executable for `g`: from the compile cache, or compiled now (counted).
std::shared_ptr<Executable> lookup_or_compile(const ir::Graph& g);

}  // namespace disc
