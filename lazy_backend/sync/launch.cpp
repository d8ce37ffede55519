// Handing a sync's graph over and settling the graphs in flight (launch.h).
#include "lazy_backend/sync/launch.h"

#include <atomic>
#include <deque>

#include "lazy_backend/base/graph_worker.h"
#include "lazy_backend/base/metrics.h"
#include "lazy_backend/base/profiler_range.h"
#include "lazy_backend/sync/launches.h"
#include "lazy_backend/trace/node_builder.h"
#include "lazy_backend/trace/tensor_data.h"
#include "lowering/ir/hash.h"

namespace disc {

namespace {

// graph_clock_ns(): like execute_ns, but never reset with the metrics.
std::atomic<int64_t> g_graph_clock_ns{0};

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

// Runs a launch (on the graph worker, or inline): each new tensor (a loss)
// is delivered as soon as it is final, the rest when the graph has run; on
// a failure those not delivered are orphaned, for
// settle() to recover. The step's trace (roots, graph) is dropped by the
// host when it forgets the launch at a later sync, not here: the host
// allocated those nodes, and freeing them on the worker thread cost the
// MNIST MLP step ~80 us of worker time (cross-thread frees), a tenth of it.
// It holds the graph's inputs a little longer; the results are let go here.
void execute(Launch& l) {
  NoPythonDispatch no_python;
  if (reads_lost_result(l.graph)) {
    l.skipped = true;
    for (const ir::Value& r : l.results) payload_of(*r.node)->orphan();
    l.state.store(Launch::kFailed, std::memory_order_release);
    return;
  }
  ProfilerRange range([&] {
    return l.profiler_name.empty() ? "disc::graph " + ir::hash_hex(l.graph.hash) : l.profiler_name;
  });
  metrics::ScopedTimer t(metrics::counters().execute_ns);
  metrics::ScopedTimer clock(g_graph_clock_ns);
  metrics::counters().graphs_run++;
  metrics::counters().graph_nodes += static_cast<int64_t>(l.graph.num_ops());
  auto deliver = [&](size_t k, const at::Tensor& v) { payload_of(*l.results[k].node)->fulfil(v); };
  // A tensor that had a value before (a parameter, a statistic) gets its
  // new one with the whole graph: were the graph to fail, it keeps the old.
  auto publish = [&](size_t k, const at::Tensor& v) {
    if (!l.fallbacks[k]) deliver(k, v);
  };
  try {
    std::vector<at::Tensor> out = l.exe->run(l.graph, publish, &l.failure);
    for (size_t k = 0; k < out.size(); ++k) deliver(k, out[k]);
    l.results.clear();  // a result its tensor no longer holds is freed now
    l.state.store(Launch::kDone, std::memory_order_release);
  } catch (...) {
    l.error = std::current_exception();
    for (const ir::Value& r : l.results) payload_of(*r.node)->orphan();
    l.state.store(Launch::kFailed, std::memory_order_release);
  }
}

}  // namespace

std::deque<std::shared_ptr<Launch>>& in_flight() {
  static auto* l = new std::deque<std::shared_ptr<Launch>>();  // leaked: read at exit
  return *l;
}

std::vector<at::Tensor> run_now(const std::vector<ir::Value>& roots) {
  NoPythonDispatch no_python;
  ir::Graph g = build_and_hash(roots, {});
  g.read_only_params.clear();  // none listed: every input is read-only
  return lookup_or_compile(g)->run(g, nullptr, nullptr);
}

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

// Waits for the launches in flight and recovers those that failed, oldest
// first (a later one may read an earlier one's results). Every future data
// leaf is resolved afterwards.
void settle() {
  TraceLock lock;
  wait_for_worker_interruptibly();
  std::deque<std::shared_ptr<Launch>> launches = std::move(in_flight());
  in_flight().clear();
  for (const auto& l : launches)
    if (l->state.load() == Launch::kFailed) recover(*l);
}

namespace {

// A reader waiting for a result of a failed launch: after the recovery it
// sees its own result or that result's error (as a `.cpu()` whose part ran
// returns its value when another part failed).
void settle_for_reader() { settle(); }
const bool settler_installed = (set_future_settler(&settle_for_reader), true);

}  // namespace

int64_t graph_clock_ns() { return g_graph_clock_ns.load(std::memory_order_relaxed); }

// Hands the pending graph over: its results become future data leaves,
// bound at once, and the graph runs on the worker or, with DISC_ASYNC=0,
// right here (and is recovered here if it fails).
void launch(const Pending& pending, ir::Graph graph, std::shared_ptr<Executable> exe,
            std::string profiler_name) {
  auto l = std::make_shared<Launch>();
  l->profiler_name = std::move(profiler_name);
  l->roots = pending.roots;
  l->graph = std::move(graph);
  l->exe = std::move(exe);
  for (LazyStorage* s : pending.storages) {
    l->fallbacks.push_back(s->fallback());
    l->writers.push_back(s->writer());
    l->results.push_back(make_future_data(type_of(s->value())));
    s->bind(l->results.back());
  }
  // Views remembered before this sync would otherwise make the next step's
  // trace depend on what earlier steps read (a different graph, a recompile).
  for (LazyStorage* s : live_storages()) s->forget_views();
  if (async_enabled()) {
    in_flight().push_back(l);
    run_on_worker([l] { execute(*l); });
    return;
  }
  execute(*l);
  if (l->state.load() == Launch::kFailed) recover(*l);
}

}  // namespace disc
