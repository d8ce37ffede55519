// The sync: runs the pending graph of every live disc tensor at once.
#pragma once
#include <functional>
#include <string>

namespace disc {

// What a sync does with the failure of an earlier graph that the calling
// thread traced into (failures.h): raises it (kRaise: an explicit sync, an
// optimizer step), or leaves it owed (kKeep: a read, which raises only the
// failure of the tensor it reads).
enum class Owed { kRaise, kKeep };

// `cause` names why ("item", "to_cpu", "optimizer_step", "user",
// "fallback:aten::foo"); it is counted and, with DISC_DEBUG_SYNC=1, printed
// with the Python line that caused it. The graph runs on the graph worker
// (graph_worker.h): every pending tensor gets its value as a future that a
// read waits for. A graph that fails leaves every tensor it was to write
// with its value from before (LazyStorage::fallback()) or, for one it
// created, with its error; that error is owed to the threads that traced
// it and raised here, after this sync has handed over its own graph.
void sync(const std::string& cause, Owed owed = Owed::kRaise);

// Runs `f` on the thread of the next sync, once that sync has handed its
// graph over (or found nothing to hand over): what follows the work traced
// until then (an event's completion, events.h). Takes trace_mutex().
void after_next_sync(std::function<void()> f);

// Waits until the graph of the last sync has run (syncs hand graphs to the
// graph worker, graph_worker.h); raises the failure owed to the calling
// thread, if any.
void wait();

// Drops compiled graphs (tests, and after changing DISC_* settings).
void clear_compile_cache();
size_t compile_cache_size();

}  // namespace disc
