#include "lazy_backend/metrics.h"

#include <mutex>

namespace disc::metrics {

namespace {
std::mutex& named_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, int64_t>& named() {
  static std::map<std::string, int64_t> m;
  return m;
}
}  // namespace

Counters& counters() {
  static Counters c;
  return c;
}

void bump(const std::string& name, int64_t by) {
  std::lock_guard<std::mutex> lock(named_mutex());
  named()[name] += by;
}

std::map<std::string, int64_t> snapshot() {
  const Counters& c = counters();
  std::map<std::string, int64_t> out;
  {
    std::lock_guard<std::mutex> lock(named_mutex());
    out = named();
  }
  out["ops_traced"] = c.ops_traced;
  out["graphs_run"] = c.graphs_run;
  out["graph_nodes"] = c.graph_nodes;
  out["cache_hits"] = c.cache_hits;
  out["cache_misses"] = c.cache_misses;
  out["compiles"] = c.cache_misses;
  out["syncs"] = c.syncs;
  out["fallbacks"] = c.fallbacks;
  out["trace_ns"] = c.trace_ns;
  out["hash_ns"] = c.hash_ns;
  out["compile_ns"] = c.compile_ns;
  out["execute_ns"] = c.execute_ns;
  out["transfers_to_cpu"] = c.transfers_to_cpu;
  out["transfers_to_disc"] = c.transfers_to_disc;
  return out;
}

void reset() {
  Counters& c = counters();
  for (auto* a : {&c.ops_traced, &c.graphs_run, &c.graph_nodes, &c.cache_hits, &c.cache_misses,
                  &c.syncs, &c.fallbacks, &c.trace_ns, &c.hash_ns, &c.compile_ns, &c.execute_ns,
                  &c.transfers_to_cpu, &c.transfers_to_disc})
    a->store(0);
  std::lock_guard<std::mutex> lock(named_mutex());
  named().clear();
}

}  // namespace disc::metrics
