// Which ATen ops the disc device records, and how each reaches the capture.
//
//  * Every op without a more specific kernel reaches the PrivateUse1 boxed
//    fallback, which records it (capture.cpp) or runs it on the CPU fallback.
//  * Structured ops (add, mm, ...) have CompositeExplicitAutogradNonFunctional
//    kernels that would outrank that fallback and rewrite `mm(a, b)` into
//    `empty` + `mm.out(a, b, out)`: an extra buffer and node per op. The
//    capture kernel is registered for those ops directly, so the trace holds
//    the functional op.
//  * A few CompositeExplicitAutograd ops would decompose into backend hooks
//    that CPU cannot replay (convolution -> convolution_overrideable); they
//    are recorded as themselves.
//  * Storage and metadata ops have dedicated kernels (memory_kernels.cpp).
//  * native_batch_norm updates running_mean / running_var in training, but
//    its schema does not say so: it is recorded as _native_batch_norm_legit
//    (or its eval and no-stats forms), whose schemas do.
//  * _to_copy within the device (a cast: `w.to(torch.bfloat16)`, autocast's
//    casts) is recorded as itself. Its composite would trace `zeros` +
//    `reshape` + `copy`: a fill launch thrown away and a copy on ATen where
//    one cast kernel does. A copy off the device, or into another layout,
//    stays the composite: a read-back, or eager's strides.
#include <ATen/Functions.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <memory>

#include "lazy_backend/trace/aten_ops.h"
#include "lazy_backend/trace/capture.h"

namespace disc {

namespace {

bool is_out_variant(const c10::FunctionSchema& s) {
  for (const auto& a : s.arguments())
    if (a.is_out()) return true;
  return false;
}

bool returns_alias(const c10::FunctionSchema& s) {
  for (const auto& r : s.returns())
    if (r.alias_info() && !r.alias_info()->isWrite()) return true;
  return false;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  const bool stats = running_mean && running_mean->defined() && running_var && running_var->defined();
  if (!stats) return at::_native_batch_norm_legit(input, weight, bias, training, momentum, eps);
  if (!training)
    return at::_native_batch_norm_legit_no_training(input, weight, bias, *running_mean, *running_var,
                                                    momentum, eps);
  // The tensors are written through their storages: the const is the schema's.
  at::Tensor mean = *running_mean, var = *running_var;
  return at::_native_batch_norm_legit(input, weight, bias, mean, var, training, momentum, eps);
}

// Whether _to_copy's arguments ask for a dense cast on the disc device. (Its
// dispatch key comes from the device argument too: an upload reaches here.)
bool casts_within_device(c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& self = args[0].toTensor();
  if (self.device().type() != c10::DeviceType::PrivateUse1) return false;
  const auto layout = args[2].toOptional<at::Layout>();
  const auto device = args[3].toOptional<at::Device>();
  const auto format = args[6].toOptional<at::MemoryFormat>();
  if (layout && *layout != at::kStrided) return false;
  if (device && device->type() != c10::DeviceType::PrivateUse1) return false;
  if (!format || *format == at::MemoryFormat::Preserve) return self.is_contiguous();
  return *format == at::MemoryFormat::Contiguous;
}

void to_copy(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  constexpr size_t kArgs = 7;  // self, dtype, layout, device, pin_memory, non_blocking, format
  c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, kArgs);
  if (casts_within_device(args)) return capture_or_fallback(op, ks, stack);
  at::Tensor out = at::native::_to_copy(
      args[0].toTensor(), args[1].toOptional<at::ScalarType>(), args[2].toOptional<at::Layout>(),
      args[3].toOptional<at::Device>(), args[4].toOptional<bool>(), args[5].toBool(),
      args[6].toOptional<at::MemoryFormat>());
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(out));
}

}  // namespace

size_t register_structured_captures() {
  static std::unique_ptr<torch::Library> lib;
  static size_t count = 0;
  if (lib) return count;
  lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                         c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const std::string& name : aten_ops::recorded_whole()) {
    lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&capture_or_fallback>());
    ++count;
  }
  lib->impl("native_batch_norm", TORCH_FN(native_batch_norm));
  lib->impl("_to_copy", torch::CppFunction::makeFromBoxedFunction<&to_copy>());
  count += 2;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = dispatcher.findOp(name);
    if (!op || !op->hasSchema()) continue;
    const c10::FunctionSchema& schema = op->schema();
    if (is_out_variant(schema) || returns_alias(schema)) continue;
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
      continue;
    if (op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    std::string qualified = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
    lib->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&capture_or_fallback>());
    ++count;
  }
  return count;
}

}  // namespace disc
