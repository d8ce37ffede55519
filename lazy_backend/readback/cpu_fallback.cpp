// The CPU fallback: ops the trace cannot record run eagerly on CPU copies.
// Every use is counted per op (fallback.<op>), so the fallback is visible in
// metrics and never silently slow. Its inputs are computed first: alone
// where they come from a few ops (launch.h read_alone: the labels mask
// before a CTC loss), leaving the step's graph pending; else by one sync.
#include <ATen/native/CPUFallback.h>

#include <mutex>
#include <set>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/sync/launch.h"
#include "lazy_backend/sync/sync.h"
#include "lazy_backend/trace/capture.h"
#include "lazy_backend/trace/lazy_storage.h"

namespace disc {

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

// Whether `t` is a disc tensor whose value is still only a trace.
bool pending_disc_tensor(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return false;
  TraceLock lock;
  return lazy_storage_of(t).pending();
}

// Computes the pending tensors among the op's arguments: each alone if it
// can be, else everything at once.
void compute_inputs(const torch::jit::Stack& stack, const std::string& cause) {
  std::vector<at::Tensor> pending;
  for (const c10::IValue& v : stack) {
    if (v.isTensor() && pending_disc_tensor(v.toTensor())) pending.push_back(v.toTensor());
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorVector())
        if (pending_disc_tensor(t)) pending.push_back(t);
  }
  for (const at::Tensor& t : pending) {
    if (!pending_disc_tensor(t)) continue;  // computed with an earlier one
    if (!read_alone(lazy_storage_of(t), cause)) {
      sync(cause);
      return;
    }
  }
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                  const std::string& reason) {
  const std::string name = op.schema().name() +
                           (op.schema().overload_name().empty() ? "" : "." + op.schema().overload_name());
  metrics::counters().fallbacks++;
  metrics::bump("fallback." + name);
  warn_once(name, reason);
  compute_inputs(*stack, "fallback:" + name);
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace disc
