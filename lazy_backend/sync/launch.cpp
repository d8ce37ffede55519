#include "lazy_backend/sync/launch.h"

#include <atomic>
#include <deque>
#include <unordered_map>

#include "lazy_backend/metrics.h"
#include "lazy_backend/sync/graph_worker.h"
#include "lazy_backend/trace/node_builder.h"
#include "lazy_backend/trace/tensor_data.h"

namespace disc {

namespace {

// One sync's graph from hand-off to its last result: what running it needs,
// and what recovering it needs if it fails.
struct Launch {
  std::vector<ir::Value> roots;    // the traces it computes
  std::vector<ir::Value> results;  // one future data leaf per root
  ir::Graph graph;
  std::shared_ptr<Executable> exe;
  std::exception_ptr error;        // set when the run failed
  bool skipped = false;            // not run: an input was lost (reads_lost_result)
  // kQueued until the run ends; the host reads only this while it runs.
  enum State : int { kQueued, kDone, kFailed };
  std::atomic<int> state{kQueued};
};

// Whether the graph reads a result that an earlier launch, which failed,
// never delivered: then it does not run (the worker must not wait for the
// recovery, which runs on the host); settle() recovers it after the
// failed one, in order. Launches run in order, so every other input is
// there by the time it starts.
bool reads_lost_result(const ir::Graph& g) {
  for (uint32_t i : g.params) {
    const TensorData* d = payload_of(*g.nodes[i].node);
    if (d && !d->ready()) return true;
  }
  return false;
}

// Runs a launch (on the graph worker, or inline): each result is delivered
// as soon as it is final; on a failure the rest are orphaned, for
// settle() to recover. The step's trace (roots, graph) is dropped by the
// host when it forgets the launch at a later sync, not here: the host
// allocated those nodes, and freeing them on the worker thread cost the
// MNIST MLP step ~80 us of worker time (cross-thread frees), a tenth of it.
// It holds the graph's inputs a little longer; the results are let go here.
void execute(Launch& l) {
  if (reads_lost_result(l.graph)) {
    l.skipped = true;
    for (const ir::Value& r : l.results) payload_of(*r.node)->orphan();
    l.state.store(Launch::kFailed, std::memory_order_release);
    return;
  }
  metrics::ScopedTimer t(metrics::counters().execute_ns);
  metrics::counters().graphs_run++;
  metrics::counters().graph_nodes += static_cast<int64_t>(l.graph.num_ops());
  auto deliver = [&](size_t k, const at::Tensor& v) { payload_of(*l.results[k].node)->fulfil(v); };
  try {
    std::vector<at::Tensor> out = l.exe->run(l.graph, deliver);
    for (size_t k = 0; k < out.size(); ++k) deliver(k, out[k]);
    l.results.clear();  // a result its tensor no longer holds is freed now
    l.state.store(Launch::kDone, std::memory_order_release);
  } catch (...) {
    l.error = std::current_exception();
    for (const ir::Value& r : l.results) payload_of(*r.node)->orphan();
    l.state.store(Launch::kFailed, std::memory_order_release);
  }
}

// The launches handed to the worker and not settled yet, oldest first
// (trace_mutex()).
std::deque<std::shared_ptr<Launch>>& in_flight() {
  static auto* l = new std::deque<std::shared_ptr<Launch>>();  // leaked: read at exit
  return *l;
}

// The results of a launch split into parts that share no node, so that a
// part can run without the others.
std::vector<std::vector<size_t>> independent_parts(const ir::Graph& g) {
  std::vector<uint32_t> parent(g.nodes.size());
  for (uint32_t i = 0; i < parent.size(); ++i) parent[i] = i;
  auto find = [&](uint32_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  for (uint32_t i = 0; i < g.nodes.size(); ++i)
    for (const ir::GraphRef& r : g.nodes[i].inputs) parent[find(r.node)] = find(i);
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

// A graph that failed to run (out of memory, an index out of range that
// only the data shows): each independent part runs on its own, so unrelated
// work still gets its values, and the results of the parts that fail carry
// their error; the buffers holding them are parked with the trace they were
// to compute (counted: `failed_syncs`, `parked_buffers`), nothing is
// dropped. Results delivered before the failure keep their values.
// Returns the launch's error (for a skipped launch: the first its parts
// raised, if any).
std::exception_ptr recover(Launch& l) {
  std::vector<std::vector<size_t>> parts = independent_parts(l.graph);
  metrics::bump(l.skipped ? "async.skipped_launches" : "failed_syncs");
  std::unordered_map<const ir::Node*, std::vector<LazyStorage*>> holders;
  for (LazyStorage* s : live_storages())
    if (s->value()) holders[s->value().node.get()].push_back(s);
  for (const std::vector<size_t>& part : parts) {
    std::exception_ptr error = l.error;
    if (parts.size() > 1 || l.skipped) {  // a skipped launch never ran: run it now
      try {
        std::vector<ir::Value> roots;
        for (size_t k : part) roots.push_back(l.roots[k]);
        ir::Graph g = build_and_hash(roots, collect_pending().kept);
        std::vector<at::Tensor> out = lookup_or_compile(g)->run(g, nullptr);
        for (size_t j = 0; j < part.size(); ++j) payload_of(*l.results[part[j]].node)->fulfil(out[j]);
        continue;
      } catch (...) {  // its own error, or that of a failed input
        error = std::current_exception();
      }
    }
    if (!l.error) l.error = error;
    for (size_t k : part) {
      TensorData* d = payload_of(*l.results[k].node);
      d->fail(error);
      if (d->ready()) continue;  // delivered before the failure
      auto it = holders.find(l.results[k].node.get());
      if (it == holders.end()) continue;
      for (LazyStorage* s : it->second) s->park(l.roots[k]);
      metrics::bump("parked_buffers", static_cast<int64_t>(it->second.size()));
    }
  }
  return l.error;
}

}  // namespace

// Whether a launch handed over before the newest one failed; forgets those
// that succeeded. The worker has finished all but the newest (wait_for_room),
// so the answer does not depend on timing: a graph's failure is raised at
// the second sync after it at the latest (the first may find it running).
bool older_launch_failed() {
  wait_for_room();
  auto& q = in_flight();
  while (!q.empty() && q.front()->state.load(std::memory_order_acquire) == Launch::kDone)
    q.pop_front();
  for (size_t k = 0; k + 1 < q.size(); ++k)
    if (q[k]->state.load(std::memory_order_acquire) == Launch::kFailed) return true;
  return false;
}

// Waits for the launches in flight; recovers those that failed, oldest
// first (a later one may read an earlier one's results), and returns the
// first error. Every future data leaf is resolved afterwards.
std::exception_ptr settle() {
  std::lock_guard<std::recursive_mutex> lock(trace_mutex());
  wait_for_worker_interruptibly();
  std::deque<std::shared_ptr<Launch>> launches = std::move(in_flight());
  in_flight().clear();
  std::exception_ptr first;
  for (const auto& l : launches) {
    if (l->state.load() != Launch::kFailed) continue;
    std::exception_ptr e = recover(*l);
    if (!first) first = e;
  }
  return first;
}

namespace {

// A reader waiting for a result of a failed launch: after the recovery it
// sees its own result or that result's error (as a `.cpu()` whose part ran
// returns its value when another part failed).
void settle_for_reader() { settle(); }
const bool settler_installed = (set_future_settler(&settle_for_reader), true);

}  // namespace

// Hands the pending graph over: its results become future data leaves,
// bound at once, and the graph runs on the worker or, with DISC_ASYNC=0,
// right here. Returns the inline run's error, after recovering it.
std::exception_ptr launch(const Pending& pending, ir::Graph graph, std::shared_ptr<Executable> exe) {
  auto l = std::make_shared<Launch>();
  l->roots = pending.roots;
  l->graph = std::move(graph);
  l->exe = std::move(exe);
  for (size_t k = 0; k < pending.storages.size(); ++k) {
    l->results.push_back(make_future_data(type_of(pending.roots[k])));
    pending.storages[k]->bind(l->results.back());
  }
  // Views remembered before this sync would otherwise make the next step's
  // trace depend on what earlier steps read (a different graph, a recompile).
  for (LazyStorage* s : live_storages()) s->forget_views();
  if (async_enabled()) {
    in_flight().push_back(l);
    run_on_worker([l] { execute(*l); });
    return nullptr;
  }
  execute(*l);
  if (l->state.load() == Launch::kDone) return nullptr;
  return recover(*l);
}

}  // namespace disc
