// The graph worker: one thread that runs the graphs syncs hand it, in
// order, one at a time, so that the host traces the next step while this
// one computes -- a lazy-tensor device's asynchronous execution, as
// torch_xla's on an accelerator. On a CPU "device" it takes one more thread than the intra-op
// pool: DISC_ASYNC=0 (or torch_disc.set_async(False)) runs graphs on the
// thread that syncs instead.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

namespace disc {

// Whether syncs hand their graphs to the worker (DISC_ASYNC, default on).
bool async_enabled();
void set_async_enabled(bool on);

// Queues `work` for the worker, which runs its work in order, one at a
// time. Waits first while two are queued or running: the host hands over
// the next graph while the previous one runs, and runs at most that far
// ahead. The caller's thread-local ATen state (grad mode, intra-op threads)
// is the work's.
void run_on_worker(std::function<void()> work);

// Waits until the worker has finished its work (true if there was any).
bool wait_for_worker();
// Waits until run_on_worker would not wait: all but the newest work done.
void wait_for_room();
// Whether the worker is running work now.
bool worker_busy();

// Polls `done` for up to `us` microseconds, pausing between looks (a pause
// keeps the core awake without hogging the pipeline; a yield where there is
// no such instruction). Returns done().
template <class Done>
bool poll_for(int64_t us, Done done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (!done() && std::chrono::steady_clock::now() < until) {
#if defined(__x86_64__) || defined(__i386__)
    for (int i = 0; i < 64; ++i) __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
  return done();
}

}  // namespace disc
