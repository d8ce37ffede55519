// The failures of threads' work. A graph computes the pending work of every
// thread at once; when part of it fails, the threads that traced that part
// are *failing*: until the failure ends, whatever else they traced is
// discarded at the next sync, whoever syncs (the rest of the failed step
// must not be computed from the values restored for it), and a graph of
// theirs that was already handed over is not applied either. The failure
// ends at the thread's next sync or wait, which raises it, or at a read
// that raised it already. Other threads get nothing: a bad batch in one
// thread's model is no error of another thread's.
#pragma once
#include <cstdint>
#include <exception>
#include <vector>

namespace disc {

// The calling thread's token: never reused, unlike std::thread::id.
uint64_t this_thread_token();

// Work that `threads` traced failed with `error`. A thread failing already
// keeps its first error.
void record_failure(const std::exception_ptr& error, const std::vector<uint64_t>& threads);

// The error of `thread` while it is failing, else null.
std::exception_ptr failure_of(uint64_t thread);
// Whether any thread is failing (cheap: the sync asks at every collect).
bool any_thread_failing();

// Ends the calling thread's failure; returns its error (null when it was
// not failing), for the sync to raise.
std::exception_ptr end_failure();

// A read on the calling thread raised `error`: that ends its failure.
void failure_seen(const std::exception_ptr& error);

}  // namespace disc
