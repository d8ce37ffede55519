// The sync, after torch_xla's SyncTensorsGraph: collect -> build and hash
// -> look up or compile -> run -> bind results. Each step is one call.
#include "lazy_backend/sync.h"

#include <cstdio>
#include <cstdlib>
#include <unordered_set>

#include "lazy_backend/compile_cache.h"
#include "lazy_backend/executor.h"
#include "lazy_backend/lazy_storage.h"
#include "lazy_backend/metrics.h"

namespace disc {

namespace {

std::function<std::string()>& location_provider() {
  static std::function<std::string()> f;
  return f;
}

bool env_flag(const char* name) {
  const char* e = std::getenv(name);
  return e && *e && std::string(e) != "0";
}

bool debug_sync() {
  static const bool on = env_flag("DISC_DEBUG_SYNC");
  return on;
}

bool debug_compile() {
  static const bool on = env_flag("DISC_DEBUG_COMPILE");
  return on;
}

struct Pending {
  std::vector<LazyStorage*> storages;
  std::vector<ir::Value> roots;  // storages[k]'s value
  // Data nodes that stay some storage's value after this sync: their
  // buffers may be read later and are never updated in place.
  std::unordered_set<const ir::Node*> kept;
};

// Every live buffer whose value is still a trace: computing them all in one
// graph is what keeps a value from ever being computed twice.
Pending collect_pending() {
  Pending p;
  for (LazyStorage* s : live_storages()) {
    if (s->parked()) continue;  // failed before: computed again when read
    if (!s->pending()) {
      if (s->value()) p.kept.insert(s->value().node.get());
      continue;
    }
    p.storages.push_back(s);
    p.roots.push_back(s->value());
  }
  return p;
}

ir::Graph build_and_hash(const Pending& p) {
  metrics::ScopedTimer t(metrics::counters().hash_ns);
  ir::Graph g = ir::build_graph(p.roots);
  g.pinned_params.reserve(g.params.size());
  for (uint32_t i : g.params) g.pinned_params.push_back(p.kept.count(g.nodes[i].node) > 0);
  return g;
}

Executable& lookup_or_compile(const ir::Graph& g) {
  metrics::ScopedTimer t(metrics::counters().compile_ns);
  bool hit = false;
  Executable& exe = compile_cache().get_or_compile(g, active_executor(), &hit);
  (hit ? metrics::counters().cache_hits : metrics::counters().cache_misses)++;
  return exe;
}

std::vector<at::Tensor> run(Executable& exe, const ir::Graph& g) {
  metrics::ScopedTimer t(metrics::counters().execute_ns);
  metrics::counters().graphs_run++;
  metrics::counters().graph_nodes += static_cast<int64_t>(g.num_ops());
  return exe.run(g);
}

void bind_results(const Pending& p, std::vector<at::Tensor>& results) {
  for (size_t k = 0; k < p.storages.size(); ++k) p.storages[k]->bind_data(std::move(results[k]));
  // Views remembered before this sync would otherwise make the next step's
  // trace depend on what earlier steps read (a different graph, a recompile).
  for (LazyStorage* s : live_storages()) s->forget_views();
}

void run_and_bind(const Pending& p, const ir::Graph& graph) {
  Executable& exe = lookup_or_compile(graph);
  std::vector<at::Tensor> results = run(exe, graph);
  bind_results(p, results);
}

// The pending buffers split into parts that share no node, so that a part
// can run without the others.
std::vector<Pending> independent_parts(const Pending& p, const ir::Graph& g) {
  std::vector<uint32_t> parent(g.nodes.size());
  for (uint32_t i = 0; i < parent.size(); ++i) parent[i] = i;
  auto find = [&](uint32_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  for (uint32_t i = 0; i < g.nodes.size(); ++i)
    for (const ir::GraphRef& r : g.nodes[i].inputs) parent[find(r.node)] = find(i);
  std::vector<Pending> parts;
  std::vector<int64_t> part_of(g.nodes.size(), -1);
  for (size_t k = 0; k < p.storages.size(); ++k) {
    int64_t& part = part_of[find(g.outputs[k].node)];
    if (part < 0) {
      part = static_cast<int64_t>(parts.size());
      parts.push_back({{}, {}, p.kept});
    }
    parts[part].storages.push_back(p.storages[k]);
    parts[part].roots.push_back(p.roots[k]);
  }
  return parts;
}

// A graph that failed to run (out of memory, an index out of range that
// only the data shows): each independent part runs on its own, so unrelated
// work still gets its values; the buffers of parts that fail are parked
// (counted: `failed_syncs`, `parked_buffers`), nothing is dropped. The
// caller rethrows the first failure.
void recover_parts(const Pending& pending, const ir::Graph& graph) {
  std::vector<Pending> parts = independent_parts(pending, graph);
  metrics::bump("failed_syncs");
  for (const Pending& part : parts) {
    if (parts.size() > 1) {
      try {
        run_and_bind(part, build_and_hash(part));
        continue;
      } catch (const c10::Error&) {
      }
    }
    for (LazyStorage* s : part.storages) s->park();
    metrics::bump("parked_buffers", static_cast<int64_t>(part.storages.size()));
  }
}

// Runs the pending graph; true when it had to be compiled.
bool sync_locked(const std::string& cause, const std::string& where) {
  std::lock_guard<std::recursive_mutex> lock(trace_mutex());
  metrics::counters().syncs++;
  metrics::bump("sync." + cause);
  Pending pending = collect_pending();
  if (pending.roots.empty()) return false;
  const int64_t misses_before = metrics::counters().cache_misses;
  ir::Graph graph = build_and_hash(pending);
  try {
    run_and_bind(pending, graph);
  } catch (const c10::Error&) {
    recover_parts(pending, graph);
    throw;
  }
  const bool compiled = metrics::counters().cache_misses > misses_before;
  if (debug_sync()) {
    std::fprintf(stderr, "[disc] sync cause=%s at %s: %zu ops, %zu outputs, cache %s\n",
                 cause.c_str(), where.empty() ? "<C++>" : where.c_str(), graph.num_ops(),
                 graph.outputs.size(), compiled ? "miss" : "hit");
  }
  return compiled;
}

}  // namespace

void sync(const std::string& cause) {
  const std::string where = debug_sync() ? python_location() : "";
  if (!sync_locked(cause, where)) return;
  // A compile is rare: say where it came from, outside the trace lock (the
  // location needs the GIL, which another thread may hold while it waits
  // for that lock).
  CompileRecord r = compile_cache().locate_last(where.empty() ? python_location() : where);
  if (debug_compile()) {
    std::fprintf(stderr, "[disc] compile %016llx (%zu ops, %.1f ms) at %s: %s\n",
                 static_cast<unsigned long long>(r.hash), r.ops, r.ms,
                 r.location.empty() ? "<C++>" : r.location.c_str(), r.reason.c_str());
  }
}

void set_python_location_provider(std::function<std::string()> provider) {
  location_provider() = std::move(provider);
}

std::string python_location() {
  return location_provider() ? location_provider()() : "";
}

void clear_compile_cache() { compile_cache().clear(); }
size_t compile_cache_size() { return compile_cache().size(); }

}  // namespace disc
