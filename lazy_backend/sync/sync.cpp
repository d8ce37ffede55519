// The sync, after torch_xla's SyncTensorsGraph: collect -> build and hash
// -> look up or compile -> settle earlier graphs if one failed -> launch
// (bind future results, run on the graph worker) -> raise this thread's
// failure. Each step is one call: pending.h has the first three, launch.h
// the hand-over and recovery, failures.h which threads are failing.
#include "lazy_backend/sync/sync.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "lazy_backend/base/failures.h"
#include "lazy_backend/base/graph_worker.h"
#include "lazy_backend/base/metrics.h"
#include "lazy_backend/base/profiler_range.h"
#include "lazy_backend/base/python_location.h"
#include "lazy_backend/cache/compile_cache.h"
#include "lazy_backend/sync/launch.h"
#include "lazy_backend/sync/pending.h"
#include "lowering/ir/hash.h"
#include "runtime/options.h"

namespace disc {

namespace {

std::vector<std::function<void()>>& after_sync() {  // trace_mutex()
  static std::vector<std::function<void()>> hooks;
  return hooks;
}

bool debug_sync() { return options::flag(options::Id::kDebugSync); }
bool debug_compile() { return options::flag(options::Id::kDebugCompile); }

// Settles the graphs in flight; true when the work of a thread that failed
// in them was discarded from what is pending.
bool settle_and_discard() {
  settle();
  return discard_work_of_failing_threads();
}

// Runs the pending graph, under the trace lock it takes; true when it had to
// be compiled. The work of failing threads is dropped first (failures.h).
// The graph is built and compiled while earlier ones may still run; an
// earlier one that failed is settled here (older_launch_failed), before
// this graph is handed over behind it.
bool run_pending(const std::string& cause, const std::string& where) {
  TraceLock lock;
  metrics::counters().syncs++;
  metrics::bump("sync." + cause);
  const int64_t misses_before = metrics::counters().cache_misses;
  discard_work_of_failing_threads();
  Pending pending = collect_pending();
  size_t ops = 0, outputs = 0;
  if (pending.roots.empty()) {
    if (!worker_busy()) settle();  // nothing to hand over: no need to wait
  } else {
    ir::Graph graph = build_and_hash(pending.roots, pending.kept);
    std::shared_ptr<Executable> exe = lookup_or_compile(graph);
    // A thread that failed in an earlier graph has its work dropped here.
    if ((!async_enabled() || older_launch_failed()) && settle_and_discard()) {
      pending = collect_pending();
      graph = build_and_hash(pending.roots, pending.kept);
      exe = pending.roots.empty() ? nullptr : lookup_or_compile(graph);
    }
    if (exe) {
      ops = graph.num_ops();
      outputs = graph.outputs.size();
      std::string name;
      if (profiler_listening())
        name = "disc::graph " + ir::hash_hex(graph.hash) + " (" + cause + ") " + where;
      launch(pending, std::move(graph), std::move(exe), std::move(name));
    }
  }
  for (const std::function<void()>& f : std::exchange(after_sync(), {})) f();
  const bool compiled = metrics::counters().cache_misses > misses_before;
  if (debug_sync()) {
    std::fprintf(stderr, "[disc] sync cause=%s at %s: %zu ops, %zu outputs, cache %s\n",
                 cause.c_str(), where.empty() ? "<C++>" : where.c_str(), ops, outputs,
                 compiled ? "miss" : "hit");
  }
  return compiled;
}

// A compile is rare: say where it came from (the location takes the GIL,
// so it is looked up after the trace lock is let go).
void locate_compile(const std::string& where) {
  CompileRecord r = compile_cache().locate_last(where.empty() ? python_location() : where);
  if (debug_compile()) {
    std::fprintf(stderr, "[disc] compile %016llx (%zu ops, %.1f ms) at %s: %s\n",
                 static_cast<unsigned long long>(r.hash), r.ops, r.ms,
                 r.location.empty() ? "<C++>" : r.location.c_str(), r.reason.c_str());
  }
}

}  // namespace

void sync(const std::string& cause, Owed owed) {
  // The user's line, for DISC_DEBUG_SYNC and for the graph's profiler range.
  const std::string where = debug_sync() || profiler_listening() ? python_location() : "";
  if (run_pending(cause, where)) locate_compile(where);
  if (owed == Owed::kKeep) return;
  if (std::exception_ptr e = end_failure()) std::rethrow_exception(e);
}

void after_next_sync(std::function<void()> f) {
  TraceLock lock;
  after_sync().push_back(std::move(f));
}

void wait() {
  {
    TraceLock lock;
    settle_and_discard();
  }
  if (std::exception_ptr e = end_failure()) std::rethrow_exception(e);
}

void clear_compile_cache() { compile_cache().clear(); }
size_t compile_cache_size() { return compile_cache().size(); }

}  // namespace disc
