// DDP's reducer times each iteration (forward, backward compute and
// communication) with a timer registered for the parameters' device type;
// without one it warns on every rank. On disc, the events are host times:
// when the reducer saw them while tracing, not when the graph computed.
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace disc::dist {
namespace {

class HostClockTimer final : public c10d::Timer {
 public:
  explicit HostClockTimer(c10::Device) {}

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const std::optional<int64_t> from = getTimestamp(start), to = getTimestamp(end);
    if (!from || !to || *to < *from) return std::nullopt;
    return *to - *from;
  }
};

}  // namespace
}  // namespace disc::dist

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, disc::dist::HostClockTimer);
}  // namespace c10d
