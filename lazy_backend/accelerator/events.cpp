#include "lazy_backend/accelerator/events.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "lazy_backend/base/graph_worker.h"
#include "lazy_backend/sync/launch.h"
#include "lazy_backend/sync/sync.h"
#include "lazy_backend/trace/lazy_storage.h"

namespace disc::events {

namespace {

const c10::Device kDevice{c10::DeviceType::PrivateUse1, 0};

std::atomic<c10::StreamId> g_next_stream{1};
thread_local c10::StreamId t_current_stream = 0;

c10::Stream stream_of(c10::StreamId id) { return c10::Stream(c10::Stream::UNSAFE, kDevice, id); }

// One recording of an event. `handed` once its completion is queued behind
// the graphs that compute what was traced before it; `done` once it ran.
struct Mark {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> handed{false};
  bool done = false;
  int64_t clock_ns = 0;

  void complete() {
    {
      std::lock_guard<std::mutex> lock(mu);
      clock_ns = graph_clock_ns();
      done = true;
    }
    cv.notify_all();
  }

  static void hand_over(const std::shared_ptr<Mark>& m) {
    m->handed = true;
    behind_graphs([m] { m->complete(); });
  }
};

// What torch.Event holds as its native handle. Recording it again starts a
// new Mark: an earlier one still queued completes only itself.
struct Event {
  bool timed = false;
  std::shared_ptr<Mark> mark;  // null until recorded
};

Event& event_of(void* e) {
  TORCH_CHECK(e, "disc: event handle is null");
  return *static_cast<Event*>(e);
}

bool any_pending() {
  TraceLock lock;
  for (LazyStorage* s : live_storages())
    if (s->pending()) return true;
  return false;
}

void wait_for(Mark& m) {
  GilReleased released;
  std::unique_lock<std::mutex> lock(m.mu);
  wait_interruptibly(m.cv, lock, [&] { return m.done; });
}

// An untimed event still waiting for its sync: the sync happens now, since
// nothing else would make its work run.
void hand_over_now(Mark& m) {
  if (m.handed) return;
  GilReleased released;
  sync("event", Owed::kKeep);
}

}  // namespace

c10::Stream current_stream() noexcept { return stream_of(t_current_stream); }

c10::Stream exchange_stream(c10::Stream s) noexcept {
  const c10::StreamId old = t_current_stream;
  t_current_stream = s.id();
  return stream_of(old);
}

c10::Stream new_stream() { return stream_of(g_next_stream.fetch_add(1)); }
c10::Stream default_stream() { return stream_of(0); }

bool query_device() { return !any_pending() && !worker_busy(); }

void synchronize_device() {
  GilReleased released;
  sync("synchronize");
  wait_for_worker_interruptibly();
  wait();
}

void record(void** handle, c10::EventFlag flag) {
  if (!*handle) *handle = new Event{flag == c10::EventFlag::BACKEND_DEFAULT, nullptr};
  Event& e = event_of(*handle);
  auto mark = std::make_shared<Mark>();
  {
    GilReleased released;  // the sync and the worker may need it
    if (e.timed) {
      // A timed event is an exact point: the graph so far ends here.
      sync("event", Owed::kKeep);
      Mark::hand_over(mark);
    } else {
      TraceLock lock;
      if (any_pending()) after_next_sync([mark] { Mark::hand_over(mark); });
      else Mark::hand_over(mark);
    }
  }
  e.mark = std::move(mark);
}

bool query(void* handle) {
  const std::shared_ptr<Mark> m = event_of(handle).mark;
  if (!m) return true;  // never recorded: nothing to wait for, as on CUDA
  hand_over_now(*m);
  std::lock_guard<std::mutex> lock(m->mu);
  return m->done;
}

void synchronize(void* handle) {
  if (const std::shared_ptr<Mark> m = event_of(handle).mark) {
    hand_over_now(*m);
    wait_for(*m);
  }
}

double elapsed_ms(void* start, void* end) {
  Event& a = event_of(start);
  Event& b = event_of(end);
  TORCH_CHECK(a.timed && b.timed,
              "disc: elapsed_time needs both events created with enable_timing=True");
  TORCH_CHECK(a.mark && b.mark, "disc: elapsed_time needs both events recorded first");
  wait_for(*a.mark);
  wait_for(*b.mark);
  return static_cast<double>(b.mark->clock_ns - a.mark->clock_ns) / 1e6;
}

void destroy(void* handle) noexcept { delete static_cast<Event*>(handle); }

}  // namespace disc::events
