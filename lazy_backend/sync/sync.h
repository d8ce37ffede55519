// The sync: runs the pending graph of every live disc tensor at once.
#pragma once
#include <functional>
#include <string>

namespace disc {

// `cause` names why ("item", "to_cpu", "optimizer_step", "user",
// "fallback:aten::foo"); it is counted and, with DISC_DEBUG_SYNC=1, printed
// with the Python line that caused it. The graph runs on the graph worker
// (graph_worker.h): every pending tensor gets its value as a future that a
// read waits for. The error of an earlier sync's graph is raised here, after
// this sync has handed over its own.
void sync(const std::string& cause);

// Waits until the graph of the last sync has run (syncs hand graphs to the
// graph worker, graph_worker.h); raises its error if it failed and no sync
// or read has raised it yet.
void wait();

// Set by the Python bindings: returns "file:line (function)" of the user code
// running now, or "" when called outside Python.
void set_python_location_provider(std::function<std::string()> provider);
std::string python_location();

// Drops compiled graphs (tests, and after changing DISC_* settings).
void clear_compile_cache();
size_t compile_cache_size();

}  // namespace disc
