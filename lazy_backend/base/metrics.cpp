#include "lazy_backend/base/metrics.h"

#include <atomic>
#include <mutex>

namespace disc::metrics {

// A named counter's storage. Map nodes never move, so Named handles keep a
// pointer to theirs; reset() zeroes a slot and marks it unseen instead of
// erasing it, and snapshot() lists only slots bumped since.
struct Slot {
  std::atomic<int64_t> value{0};
  std::atomic<bool> seen{false};
};

namespace {
std::mutex& named_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, Slot>& named() {
  static std::map<std::string, Slot> m;
  return m;
}
}  // namespace

Named::Named(const std::string& name) {
  std::lock_guard<std::mutex> lock(named_mutex());
  slot_ = &named()[name];
}

void Named::operator+=(int64_t by) {
  slot_->value.fetch_add(by, std::memory_order_relaxed);
  slot_->seen.store(true, std::memory_order_relaxed);
}

Counters& counters() {
  static Counters c;
  return c;
}

void bump(const std::string& name, int64_t by) {
  std::lock_guard<std::mutex> lock(named_mutex());
  Slot& s = named()[name];
  s.value.fetch_add(by, std::memory_order_relaxed);
  s.seen.store(true, std::memory_order_relaxed);
}

std::map<std::string, int64_t> snapshot() {
  const Counters& c = counters();
  std::map<std::string, int64_t> out;
  {
    std::lock_guard<std::mutex> lock(named_mutex());
    for (const auto& [name, slot] : named())
      if (slot.seen.load(std::memory_order_relaxed)) out[name] = slot.value.load(std::memory_order_relaxed);
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
  for (auto& [name, slot] : named()) {
    slot.value.store(0, std::memory_order_relaxed);
    slot.seen.store(false, std::memory_order_relaxed);
  }
}

}  // namespace disc::metrics
