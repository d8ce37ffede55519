// What the sync's three launch files share (private to sync/): a launch,
// the launches in flight, and running a few roots now on the host.
//   launch.cpp      hands a graph over and runs it; settles those in flight
//   recovery.cpp    a graph that failed ends as if its failed part had not run
//   read_alone.cpp  a few ops read now, without waiting for the step's graph
#pragma once

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "lazy_backend/exec/executor.h"
#include "lowering/ir/graph.h"

namespace disc {

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

// The launches handed to the worker and not settled yet, oldest first
// (trace_mutex()).
std::deque<std::shared_ptr<Launch>>& in_flight();

// Runs `roots` as a graph of their own, on the host, writing none of its
// inputs: the other parts and the restored buffers read them after it.
std::vector<at::Tensor> run_now(const std::vector<ir::Value>& roots);

// Gives a launch that failed (or was skipped) its outcome: see recovery.cpp.
void recover(Launch& l);

}  // namespace disc
