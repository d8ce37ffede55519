// The CPU fallback: ops the trace cannot record run eagerly on CPU copies.
// Every use is counted per op (fallback.<op>) and causes one sync, so the
// fallback is visible in metrics and never silently slow.
#include <ATen/native/CPUFallback.h>

#include <mutex>
#include <set>

#include "lazy_backend/metrics.h"
#include "lazy_backend/sync/sync.h"
#include "lazy_backend/trace/capture.h"

namespace disc {

bool is_denied(const std::string& op_name) {
  // Output shapes that depend on values, and ops that read values on the host.
  static const std::set<std::string> denied = {
      "aten::nonzero", "aten::masked_select", "aten::unique_dim", "aten::_unique",
      "aten::_unique2", "aten::unique_consecutive", "aten::bincount", "aten::repeat_interleave",
      "aten::_local_scalar_dense", "aten::item", "aten::equal", "aten::is_nonzero",
      "aten::allclose", "aten::_assert_async",
  };
  return denied.count(op_name) > 0;
}

namespace {
// One warning per op and process: visible, but not a flood in a training loop.
void warn_once(const std::string& name, const std::string& reason) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (!warned.insert(name).second) return;
  TORCH_WARN("disc: ", name, " runs on the CPU fallback (", reason,
             "); see torch_disc.metrics.counters()['fallback.", name, "']");
}
}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                  const std::string& reason) {
  const std::string name = op.schema().name() +
                           (op.schema().overload_name().empty() ? "" : "." + op.schema().overload_name());
  metrics::counters().fallbacks++;
  metrics::bump("fallback." + name);
  warn_once(name, reason);
  // One sync up front: the fallback then copies materialized data only.
  sync("fallback:" + name);
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace disc
