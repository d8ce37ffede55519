// Launching a sync's graph and settling it: its results become future data
// leaves bound at once, the graph runs on the graph worker (or inline with
// DISC_ASYNC=0), each result is delivered as soon as it is final, and a
// graph that failed is recovered part by part after the fact (recover()).
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "lazy_backend/exec/executor.h"
#include "lazy_backend/sync/pending.h"

namespace disc {

// Hands the pending graph over (recovering it at once when it runs inline
// and fails). `profiler_name` names its run in torch.profiler (empty: the
// graph's hash alone).
void launch(const Pending& pending, ir::Graph graph, std::shared_ptr<Executable> exe,
            std::string profiler_name = {});

// Nanoseconds spent running graphs since the process started: the clock of
// timed disc events, which measure graph execution, not tracing or waiting.
int64_t graph_clock_ns();

// Reads `s` without a sync when a few pure ops compute it from inputs that
// are there (transformers' `attention_mask.all()` before the forward): they
// run now on this thread, `s` and every pending buffer whose value they
// compute get their values, and the rest of the pending trace stays as it
// is -- one graph later -- instead of the reader waiting behind the graphs
// in flight for everything traced so far. False, nothing done, when `s`
// does not qualify, when nothing else is pending (a sync does the same
// then), or when running it fails: the sync then fails as it would have,
// with its recovery. Counted as `read_alone.<cause>`.
bool read_alone(LazyStorage& s, const std::string& cause);

// Whether a launch handed over before the newest one failed; forgets those
// that succeeded. Waits until the worker has room (at most the newest runs).
bool older_launch_failed();

// Waits for the launches in flight and recovers those that failed, oldest
// first: every tensor a failed graph was to write gets its value from
// before it or its error, and the threads that traced it are failing
// (failures.h).
void settle();

}  // namespace disc
