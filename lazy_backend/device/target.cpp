#include "lazy_backend/device/target.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include "runtime/options.h"

namespace disc {

namespace {

// The index of DISC_TARGET's value in "cpu|cuda|auto".
enum Choice : int64_t { kCpu = 0, kCuda = 1, kAuto = 2 };

c10::Device resolve() {
  const int64_t choice = options::choice(options::Id::kTarget);
  const bool gpu = at::hasCUDA();
  TORCH_CHECK(choice != kCuda || gpu,
              "disc: DISC_TARGET=cuda, but torch sees no CUDA GPU (torch.cuda.is_available() is "
              "False): unset DISC_TARGET or set it to cpu or auto");
  return (choice == kCuda || (choice == kAuto && gpu)) ? c10::Device(c10::kCUDA, 0)
                                                       : c10::Device(c10::kCPU);
}

}  // namespace

c10::Device value_device() {
  static const c10::Device device = resolve();  // a throw leaves it unresolved
  return device;
}

const char* target_name() { return value_device().is_cuda() ? "cuda" : "cpu"; }

at::Tensor on_target(const at::Tensor& host) {
  return host.to(value_device(), host.scalar_type(), /*non_blocking=*/false, /*copy=*/false,
                 at::MemoryFormat::Contiguous);
}

at::Tensor snapshot_on_target(const at::Tensor& host) {
  return host.to(value_device(), host.scalar_type(), /*non_blocking=*/false, /*copy=*/true,
                 at::MemoryFormat::Contiguous);
}

}  // namespace disc
