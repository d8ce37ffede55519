#include "lazy_backend/sync/launch.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "lazy_backend/base/failures.h"
#include "lazy_backend/base/graph_worker.h"
#include "lazy_backend/base/metrics.h"
#include "lazy_backend/base/profiler_range.h"
#include "lazy_backend/trace/node_builder.h"
#include "lazy_backend/trace/tensor_data.h"
#include "lowering/ir/hash.h"
#include "lowering/ops.h"

namespace disc {

namespace {

// A graph's ops are ATen's CPU kernels, run as they are: without the Python
// dispatcher or a dispatch mode the host had on (torch.compile's tracing
// does), which would see our internal CPU ops, and on the graph worker
// (which inherits the host's dispatch state) wait for a GIL that the host,
// waiting for this graph, may hold.
struct NoPythonDispatch {
  static constexpr c10::DispatchKeySet kKeys{c10::DispatchKey::Python, c10::DispatchKey::PythonDispatcher,
                                             c10::DispatchKey::PythonTLSSnapshot,
                                             c10::DispatchKey::PreDispatch};
  c10::impl::ExcludeDispatchKeyGuard guard{kKeys};
};

// One sync's graph from hand-off to its last result: what running it needs,
// and what recovering it needs if it fails.
struct Launch {
  std::vector<ir::Value> roots;    // the traces it computes
  std::vector<ir::Value> results;  // one future data leaf per root
  // Per root: what its buffer holds if the graph fails (LazyStorage::
  // fallback()), and the thread that traced it (failing if it fails).
  std::vector<ir::Value> fallbacks;
  std::vector<uint64_t> writers;
  ir::Graph graph;
  std::shared_ptr<Executable> exe;
  std::string profiler_name;       // see launch()
  std::exception_ptr error;        // set when the run failed
  RunFailure failure;              // what the failed run had done
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

// Runs a launch (on the graph worker, or inline): each new tensor (a loss)
// is delivered as soon as it is final, the rest when the graph has run; on
// a failure those not delivered are orphaned, for
// settle() to recover. The step's trace (roots, graph) is dropped by the
// host when it forgets the launch at a later sync, not here: the host
// allocated those nodes, and freeing them on the worker thread cost the
// MNIST MLP step ~80 us of worker time (cross-thread frees), a tenth of it.
// It holds the graph's inputs a little longer; the results are let go here.
// graph_clock_ns(): like execute_ns, but never reset with the metrics.
std::atomic<int64_t> g_graph_clock_ns{0};

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

// The launches handed to the worker and not settled yet, oldest first
// (trace_mutex()).
std::deque<std::shared_ptr<Launch>>& in_flight() {
  static auto* l = new std::deque<std::shared_ptr<Launch>>();  // leaked: read at exit
  return *l;
}

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

// Runs `roots` as a graph of their own, on the host, writing none of its
// inputs: the other parts and the restored buffers read them after it.
std::vector<at::Tensor> run_now(const std::vector<ir::Value>& roots) {
  NoPythonDispatch no_python;
  ir::Graph g = build_and_hash(roots, {});
  g.read_only_params.clear();  // none listed: every input is read-only
  return lookup_or_compile(g)->run(g, nullptr, nullptr);
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

constexpr size_t kMaxOpsReadAlone = 64;  // a conv stack's output-length formula
constexpr int64_t kMaxElementsReadAlone = int64_t{1} << 16;

// Whether at most `max_ops` ops compute `v`: a walk that stops as soon as
// it meets one more, so reading a large pending trace (a loss read before
// the optimizer step) looks at a few nodes here before it syncs, instead
// of building its whole graph twice.
bool at_most_ops(const ir::Value& v, size_t max_ops) {
  std::unordered_set<const ir::Node*> seen{v.node.get()};
  std::vector<const ir::Node*> work{v.node.get()};
  size_t ops = 0;
  while (!work.empty()) {
    const ir::Node* n = work.back();
    work.pop_back();
    if (n->is_data()) continue;
    if (++ops > max_ops) return false;
    for (const ir::Value& in : n->inputs)
      if (seen.insert(in.node.get()).second) work.push_back(in.node.get());
  }
  return true;
}

// Whether node `n` writes one of the graph's inputs. Writing a buffer the
// graph made itself (ones_like: a fill_ of a fresh tensor) changes nothing
// outside it.
bool writes_an_input(const ir::Graph& g, const ir::GraphNode& n) {
  for (uint32_t m : n.node->mutated)
    if (g.nodes[n.inputs[m].node].param >= 0) return true;
  return false;
}

// Whether graph `g`, a few ops (at_most_ops), may run on its own, now, on
// the reading thread: its tensors are small (computing them again in the
// next sync's graph costs nothing worth counting; a model's forward, read
// before its backward, is not that), no op writes an input, draws random
// numbers or exchanges data with other processes (which expect it once),
// and all of its inputs are delivered and none is one that a graph in
// flight may update in place (an input it only reads, such as a batch
// every step reads, is no obstacle).
bool computable_alone(const ir::Graph& g) {
  std::unordered_set<const ir::Node*> inputs;
  for (const ir::GraphNode& n : g.nodes) {
    for (const ir::TensorType& t : n.node->outputs)
      if (t.numel() > kMaxElementsReadAlone) return false;
    if (n.param >= 0) {
      const TensorData* d = payload_of(*n.node);
      if (!d || !d->ready()) return false;
      inputs.insert(n.node);
    } else if (writes_an_input(g, n) || n.node->rng_runtime >= 0 ||
               lowering::is_collective(n.node->op)) {
      return false;
    }
  }
  for (const auto& l : in_flight()) {
    const ir::Graph& running = l->graph;
    for (size_t k = 0; k < running.params.size(); ++k) {
      const bool read_only = running.read_only_params.empty() || running.read_only_params[k];
      if (!read_only && inputs.count(running.nodes[running.params[k]].node)) return false;
    }
  }
  return true;
}

}  // namespace

bool read_alone(LazyStorage& s, const std::string& cause) {
  TraceLock lock;
  if (!s.pending() || !at_most_ops(s.value(), kMaxOpsReadAlone)) return false;
  const ir::Graph g = ir::build_graph({s.value()});
  if (!computable_alone(g)) return false;
  // Every pending buffer whose value this graph computes anyway (the other
  // results of a layer norm's backward, the mask a model reads later) gets
  // it too: read one by one, each would compute the graph again.
  std::unordered_set<const ir::Node*> computed;
  for (const ir::GraphNode& n : g.nodes) computed.insert(n.node);
  std::vector<LazyStorage*> storages{&s};
  std::vector<ir::Value> roots{s.value()};
  bool rest_pending = false;
  for (LazyStorage* o : live_storages()) {
    if (o == &s || !o->pending()) continue;
    if (!computed.count(o->value().node.get())) {
      rest_pending = true;
      continue;
    }
    storages.push_back(o);
    roots.push_back(o->value());
  }
  if (!rest_pending) return false;  // a sync computes the same graph
  std::vector<at::Tensor> values;
  try {
    values = run_now(roots);
  } catch (...) {
    return false;  // the sync fails as it would have, and recovers the step
  }
  for (size_t k = 0; k < storages.size(); ++k) storages[k]->bind(make_data(std::move(values[k])));
  metrics::bump("read_alone." + cause);
  return true;
}

// Hands the pending graph over: its results become future data leaves,
// bound at once, and the graph runs on the worker or, with DISC_ASYNC=0,
// right here (and is recovered here if it fails).
int64_t graph_clock_ns() { return g_graph_clock_ns.load(std::memory_order_relaxed); }

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
