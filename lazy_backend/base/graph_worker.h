// The graph worker: one thread that runs the graphs syncs hand it, in
// order, one at a time, so that the host traces the next step while this
// one computes -- a lazy-tensor device's asynchronous execution, as
// torch_xla's on an accelerator. On a CPU "device" it takes one more thread than the intra-op
// pool: DISC_ASYNC=0 (or torch_disc.set_async(False)) runs graphs on the
// thread that syncs instead.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
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

// Runs `f` once every graph handed over so far has run: queued on the
// worker behind them, or now where graphs run on the syncing thread.
void behind_graphs(std::function<void()> f);

// Waits until the worker has finished its work (true if there was any).
bool wait_for_worker();
// The same where the host may stop waiting: raises when a signal (Ctrl-C)
// is pending, checked every 100 ms (check_interrupt). The work goes on.
bool wait_for_worker_interruptibly();
// Waits until run_on_worker would not wait: all but the newest work done;
// interruptible too.
void wait_for_room();

// Set by the Python bindings: raises KeyboardInterrupt (or what a signal
// handler raised) when a signal is pending for this process. A host that
// waits for the worker checks it every 100 ms, so Ctrl-C is not held until
// a long graph ends. Never called on the worker, in fork or exit handlers,
// or where a raise would leave work half handed over.
void set_interrupt_check(void (*check)());
void check_interrupt();

// Set by the Python bindings: let go of the GIL if the calling thread holds
// it (returning what restore needs), and take it back.
void set_gil_hooks(void* (*release)(), void (*restore)(void*));

// While alive, the calling thread does not hold the GIL: for a host that
// waits for the worker holding no lock of ours (a read), so that the graph
// (a Python custom op) and other Python threads can run meanwhile.
class GilReleased {
 public:
  GilReleased();
  ~GilReleased();
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  void* saved_;
};

// Waits on `cv` under `lock` until `done()`, checking for interrupts with
// the lock let go (the check may wait for the GIL).
template <class Done>
void wait_interruptibly(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Done done) {
  while (!cv.wait_for(lock, std::chrono::milliseconds(100), done)) {
    lock.unlock();
    check_interrupt();
    lock.lock();
  }
}
// Whether the worker is running work now.
bool worker_busy();

// Whether the calling thread is the graph worker, which must never wait for
// a future leaf (its inputs are resolved before it starts a graph).
bool on_graph_worker();

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
