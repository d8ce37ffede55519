// disc's work in torch.profiler: a range per graph run, per compile and per
// step of a compiled graph (a generated kernel, a oneDNN call, an ATen op),
// through PyTorch's RecordFunction, the API the profiler listens to. The
// graph worker runs each graph under the syncing thread's ThreadLocalState
// (graph_worker.h), so a profiler started on that thread sees the worker's
// ranges too, on the worker's thread id, nested as they ran.
#pragma once
#include <ATen/record_function.h>

#include <optional>
#include <string>

namespace disc {

// Whether a profiler (any RecordFunction observer) is listening on this
// thread: names that cost something to build are built only then.
inline bool profiler_listening() { return at::hasCallbacks() && at::isRecordFunctionEnabled(); }

// A profiler range for the lifetime of this object; name() is called only
// when a profiler is listening.
class ProfilerRange {
 public:
  template <class Name>
  explicit ProfilerRange(Name&& name) {
    // The common case, nobody listening, costs one lookup and no range.
    auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE);
    if (!callbacks) return;
    range_.emplace(std::move(*callbacks));
    if (range_->isActive()) range_->before(std::string(name()));
  }
  ProfilerRange(const ProfilerRange&) = delete;
  ProfilerRange& operator=(const ProfilerRange&) = delete;

 private:
  std::optional<at::RecordFunction> range_;
};

}  // namespace disc
