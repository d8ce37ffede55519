#include "lazy_backend/base/graph_worker.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "runtime/options.h"

namespace disc {

namespace {

thread_local bool t_on_graph_worker = false;

class Worker {
 public:
  void submit(std::function<void()> work) {
    std::unique_lock<std::mutex> lock(mu_);
    wait_for_room_locked(lock);
    start_thread_locked();
    queue_.push_back(std::move(work));
    ++outstanding_;
    has_work_.store(true, std::memory_order_release);
    ready_.notify_one();
  }

  bool wait(bool interruptible) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool had = outstanding_ > 0;
    auto idle = [&] { return outstanding_ == 0; };
    if (interruptible) wait_interruptibly(idle_, lock, idle);
    else idle_.wait(lock, idle);
    return had;
  }

  void wait_for_room() {
    std::unique_lock<std::mutex> lock(mu_);
    wait_interruptibly(idle_, lock, [&] { return outstanding_ < kMaxOutstanding; });
  }

  bool busy() {
    std::lock_guard<std::mutex> lock(mu_);
    return outstanding_ > 0;
  }

  // A forked child has no worker thread: the next submit starts one. The
  // parent waits before forking, so no graph is in flight in the copy.
  void after_fork_in_child() {
    new (&mu_) std::mutex();
    new (&ready_) std::condition_variable();
    new (&idle_) std::condition_variable();
    started_ = false;
    outstanding_ = 0;
    queue_.clear();
  }

 private:
  void wait_for_room_locked(std::unique_lock<std::mutex>& lock) {
    idle_.wait(lock, [&] { return outstanding_ < kMaxOutstanding; });
  }

  void start_thread_locked() {
    if (started_) return;
    started_ = true;
    std::thread([this] { loop(); }).detach();
  }

  void loop() {
    t_on_graph_worker = true;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (queue_.empty()) {
        lock.unlock();
        spin_for_work();
        lock.lock();
      }
      ready_.wait(lock, [&] { return !queue_.empty(); });
      std::function<void()> work = std::move(queue_.front());
      queue_.pop_front();
      has_work_.store(!queue_.empty(), std::memory_order_relaxed);
      lock.unlock();
      work();  // catches its own errors (sync.cpp)
      work = nullptr;  // drops what it holds here, not under the lock
      lock.lock();
      --outstanding_;
      idle_.notify_all();
    }
  }

  // A step's next graph usually comes within a millisecond. A worker that
  // waits on the condition variable takes ~60 us to wake on a VM (its
  // vCPU halts); polling for a while first keeps it awake (measured on the
  // MNIST MLP step: ~1.10 -> ~1.00 ms with the host's wait below).
  void spin_for_work() {
    constexpr int64_t kSpinUs = 300;
    poll_for(kSpinUs, [&] { return has_work_.load(std::memory_order_acquire); });
  }
  std::atomic<bool> has_work_{false};

  std::mutex mu_;
  std::condition_variable ready_, idle_;
  // Two graphs at most: the one running and the next, handed over while it
  // runs (the next step's, while this step's backward and update still
  // compute), so the worker goes from one to the next without waiting for
  // the host. More would only let the host run further ahead of results it
  // must wait for anyway.
  static constexpr int kMaxOutstanding = 2;
  std::deque<std::function<void()>> queue_;
  int outstanding_ = 0;  // queued + running
  bool started_ = false;
};

Worker& worker() {
  // Leaked on purpose: its detached thread may outlive static destruction.
  static Worker* w = [] {
    auto* created = new Worker();
    pthread_atfork([] { wait_for_worker(); }, nullptr, [] { worker().after_fork_in_child(); });
    // Kernels and allocators the work uses are statics: finish first.
    std::atexit([] { wait_for_worker(); });
    return created;
  }();
  return *w;
}

}  // namespace

bool async_enabled() { return options::flag(options::Id::kAsync); }

void set_async_enabled(bool on) {
  wait_for_worker();
  options::set(options::Id::kAsync, on ? "1" : "0");
}

void run_on_worker(std::function<void()> work) {
  at::ThreadLocalState state;  // the syncing thread's grad mode and dispatch state
  worker().submit([state = std::move(state), work = std::move(work)] {
    at::ThreadLocalStateGuard guard(state);
    // OpenMP's thread count is per calling thread: give this one the
    // process's setting (torch.set_num_threads), as ATen's own workers do.
    at::init_num_threads();
    work();
  });
}

void behind_graphs(std::function<void()> f) {
  if (async_enabled()) run_on_worker(std::move(f));
  else f();
}

bool wait_for_worker() { return worker().wait(false); }
bool wait_for_worker_interruptibly() { return worker().wait(true); }

namespace {
std::atomic<void (*)()> g_interrupt_check{nullptr};
std::atomic<void* (*)()> g_release_gil{nullptr};
std::atomic<void (*)(void*)> g_restore_gil{nullptr};
}  // namespace

void set_gil_hooks(void* (*release)(), void (*restore)(void*)) {
  g_release_gil = release;
  g_restore_gil = restore;
}

GilReleased::GilReleased() {
  void* (*release)() = g_release_gil.load();
  saved_ = release ? release() : nullptr;
}

GilReleased::~GilReleased() {
  if (saved_) g_restore_gil.load()(saved_);
}

void set_interrupt_check(void (*check)()) { g_interrupt_check = check; }
void check_interrupt() {
  if (void (*check)() = g_interrupt_check.load()) check();
}
void wait_for_room() { worker().wait_for_room(); }
bool worker_busy() { return worker().busy(); }

bool on_graph_worker() { return t_on_graph_worker; }

}  // namespace disc
