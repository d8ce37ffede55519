// The graph worker: one thread that runs the graphs syncs hand it, one at a
// time, so that the host traces the next step while this one computes -- a
// lazy-tensor device's asynchronous execution, as torch_xla's on an
// accelerator. On a CPU "device" it takes one more thread than the intra-op
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

// Runs `work` on the worker. Waits first for the previous work to finish:
// at most one graph is in flight, so a failure is known before the next
// graph, which reads its results, starts. The caller's thread-local ATen
// state (grad mode, intra-op threads) is the work's.
void run_on_worker(std::function<void()> work);

// Waits until the worker has finished its work (true if there was any).
bool wait_for_worker();
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
