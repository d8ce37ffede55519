// Counters and timers of the disc backend: the test oracle ("step 2 compiled
// nothing", "no op fell back") and the source of torch_disc.metrics.report().
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace disc::metrics {

// Hot counters are plain atomics; rare, named ones (syncs by cause,
// fallbacks by op) live in a map behind a mutex.
struct Counters {
  std::atomic<int64_t> ops_traced{0};
  std::atomic<int64_t> graphs_run{0};
  std::atomic<int64_t> graph_nodes{0};
  std::atomic<int64_t> cache_hits{0};
  std::atomic<int64_t> cache_misses{0};
  std::atomic<int64_t> syncs{0};
  std::atomic<int64_t> fallbacks{0};
  std::atomic<int64_t> trace_ns{0};
  std::atomic<int64_t> hash_ns{0};
  std::atomic<int64_t> compile_ns{0};
  std::atomic<int64_t> execute_ns{0};
  std::atomic<int64_t> transfers_to_cpu{0};
  std::atomic<int64_t> transfers_to_disc{0};
};

Counters& counters();
void bump(const std::string& name, int64_t by = 1);  // named counters

// A named counter on a hot path (per GEMM, per buffer): the name is looked
// up once, where the handle is made (a function-local static), and each
// bump is then a relaxed atomic add instead of a lock and a map search.
// Same counter as bump(name).
struct Slot;
class Named {
 public:
  explicit Named(const std::string& name);
  void operator+=(int64_t by);
  void operator++() { *this += 1; }

 private:
  Slot* slot_;
};
std::map<std::string, int64_t> snapshot();           // all of them, by name
void reset();

// Adds the lifetime of the scope, in ns, to a timer counter.
class ScopedTimer {
 public:
  explicit ScopedTimer(std::atomic<int64_t>& sink)
      : sink_(sink), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    sink_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now() - start_).count();
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  std::atomic<int64_t>& sink_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace disc::metrics
