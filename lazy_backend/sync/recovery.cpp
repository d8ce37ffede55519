// Recovering a graph that failed at run time (recover(), launches.h).
#include <algorithm>

#include "lazy_backend/base/failures.h"
#include "lazy_backend/base/metrics.h"
#include "lazy_backend/sync/launches.h"
#include "lazy_backend/trace/node_builder.h"
#include "lazy_backend/trace/tensor_data.h"
#include "lowering/ops.h"

namespace disc {

namespace {

// The results of a launch split into parts that compute no node in common
// (they may read the same inputs), so that a part can run without the
// others.
std::vector<std::vector<size_t>> independent_parts(const ir::Graph& g) {
  std::vector<uint32_t> parent(g.nodes.size());
  for (uint32_t i = 0; i < parent.size(); ++i) parent[i] = i;
  auto find = [&](uint32_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  for (uint32_t i = 0; i < g.nodes.size(); ++i)
    for (const ir::GraphRef& r : g.nodes[i].inputs)
      if (g.nodes[r.node].param < 0) parent[find(r.node)] = find(i);  // inputs are shared, not computed
  std::vector<std::vector<size_t>> parts;
  std::vector<int64_t> part_of(g.nodes.size(), -1);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    int64_t& part = part_of[find(g.outputs[k].node)];
    if (part < 0) {
      part = static_cast<int64_t>(parts.size());
      parts.emplace_back();
    }
    parts[part].push_back(k);
  }
  return parts;
}

// Every result of `l`, as one part.
std::vector<size_t> all_results(const Launch& l) {
  std::vector<size_t> all(l.results.size());
  for (size_t k = 0; k < all.size(); ++k) all[k] = k;
  return all;
}

bool has_collective(const ir::Graph& g) {
  return std::any_of(g.nodes.begin(), g.nodes.end(),
                     [](const ir::GraphNode& n) { return lowering::is_collective(n.node->op); });
}

// Gives result `k` of a failed launch its buffer's value from before the
// graph; false when the buffer has none (or one of another type).
bool restore(Launch& l, size_t k) {
  const ir::Value& before = l.fallbacks[k];
  if (!before || !(type_of(before) == type_of(l.roots[k]))) return false;
  TensorData* d = payload_of(*l.results[k].node);
  try {
    const at::Tensor* data = data_of(*before.node);
    // A leaf, or a constant to compute.
    d->fulfil(data ? *data : run_now({before}).front(), failure_of(l.writers[k]));
  } catch (...) {  // the earlier value failed too (a buffer a failed step created)
    d->fail(std::current_exception());
  }
  return true;
}

// Per independent part of a failed launch, its values or its error: a
// launch that ran as one part failed as a whole; otherwise each part runs
// again on its own (a skipped launch for the first time), from the inputs
// the graph started from: the plan overwrites none before its last step
// that may fail on data (buffer-plan).
struct PartOutcome {
  std::vector<at::Tensor> values;
  std::exception_ptr error;
};

std::vector<PartOutcome> rerun_parts(const Launch& l, const std::vector<std::vector<size_t>>& parts) {
  std::vector<PartOutcome> outcomes(parts.size(), PartOutcome{{}, l.error});
  if (parts.size() == 1 && !l.skipped) return outcomes;
  for (size_t p = 0; p < parts.size(); ++p) {
    try {
      std::vector<ir::Value> roots;
      for (size_t k : parts[p]) roots.push_back(l.roots[k]);
      outcomes[p] = {run_now(roots), nullptr};
    } catch (...) {  // its own error, or that of a failed input
      outcomes[p].error = std::current_exception();
    }
  }
  return outcomes;
}

}  // namespace

// A graph that failed to run (an index out of range that only the data
// shows, out of memory) ends as if the steps of the threads whose part
// failed had not run, and the others had: those threads are failing
// (failures.h), and every result a failing thread traced gets its buffer's
// value from before the graph (parameters, optimizer state, statistics),
// or, for a tensor its step created (its loss), the error -- or its value,
// where its part did not fail. Another thread's model, an independent
// part, gets its values. When the run had overwritten inputs (RunFailure),
// nothing can be restored: every result not delivered fails.
// Counted: `failed_syncs` or `async.skipped_launches`, and per buffer
// `failures.restored_buffers` / `failures.failed_buffers`.
void recover(Launch& l) {
  static metrics::Named restored("failures.restored_buffers"), failed("failures.failed_buffers");
  metrics::bump(l.skipped ? "async.skipped_launches" : "failed_syncs");
  // A run that overwrote inputs fails as one part: nothing runs again; nor
  // does a graph with a collective, which the other ranks ran once.
  const std::vector<std::vector<size_t>> parts =
      l.failure.inputs_overwritten || has_collective(l.graph)
          ? std::vector<std::vector<size_t>>{all_results(l)}
          : independent_parts(l.graph);
  const std::vector<PartOutcome> outcomes = rerun_parts(l, parts);
  // Recorded before a result is failed: a thread that reads one raises the
  // error, which ends its failure (failure_seen).
  for (size_t p = 0; p < parts.size(); ++p) {
    if (!outcomes[p].error) continue;
    std::vector<uint64_t> threads;
    for (size_t k : parts[p]) threads.push_back(l.writers[k]);
    record_failure(outcomes[p].error, threads);
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    for (size_t j = 0; j < parts[p].size(); ++j) {
      const size_t k = parts[p][j];
      TensorData* d = payload_of(*l.results[k].node);
      if (d->ready()) continue;  // delivered before the failure
      // Failing here or earlier: work traced after its failure is not applied.
      const bool thread_failed = failure_of(l.writers[k]) != nullptr;
      if (thread_failed && !l.failure.inputs_overwritten && restore(l, k)) {
        ++restored;
      } else if (!outcomes[p].error) {
        d->fulfil(outcomes[p].values[j]);
      } else {
        d->fail(outcomes[p].error);
        ++failed;
      }
    }
  }
}

}  // namespace disc
