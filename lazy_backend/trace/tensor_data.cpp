#include "lazy_backend/trace/tensor_data.h"

#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>

#include "lazy_backend/base/graph_worker.h"
#include "lazy_backend/base/metrics.h"

namespace disc {

std::optional<ir::DType> ir_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBool: return ir::DType::kBool;
    case at::kByte: return ir::DType::kUInt8;
    case at::kChar: return ir::DType::kInt8;
    case at::kShort: return ir::DType::kInt16;
    case at::kInt: return ir::DType::kInt32;
    case at::kLong: return ir::DType::kInt64;
    case at::kHalf: return ir::DType::kFloat16;
    case at::kBFloat16: return ir::DType::kBFloat16;
    case at::kFloat: return ir::DType::kFloat32;
    case at::kDouble: return ir::DType::kFloat64;
    case at::kComplexFloat: return ir::DType::kComplex64;
    case at::kComplexDouble: return ir::DType::kComplex128;
    default:
      return std::nullopt;
  }
}

ir::DType to_ir(at::ScalarType t) {
  const std::optional<ir::DType> d = ir_dtype(t);
  TORCH_CHECK(d, "disc: dtype ", t, " is not supported on the disc device");
  return *d;
}

at::Tensor new_float_tensor(c10::IntArrayRef sizes) { return new_tensor(sizes, at::kFloat); }

at::Tensor new_tensor(c10::IntArrayRef sizes, at::ScalarType dtype) {
  return at::detail::empty_cpu(sizes, dtype, /*pin_memory=*/false, std::nullopt);
}

at::ScalarType to_aten(ir::DType t) {
  switch (t) {
    case ir::DType::kBool: return at::kBool;
    case ir::DType::kUInt8: return at::kByte;
    case ir::DType::kInt8: return at::kChar;
    case ir::DType::kInt16: return at::kShort;
    case ir::DType::kInt32: return at::kInt;
    case ir::DType::kInt64: return at::kLong;
    case ir::DType::kFloat16: return at::kHalf;
    case ir::DType::kBFloat16: return at::kBFloat16;
    case ir::DType::kFloat32: return at::kFloat;
    case ir::DType::kFloat64: return at::kDouble;
    case ir::DType::kComplex64: return at::kComplexFloat;
    case ir::DType::kComplex128: return at::kComplexDouble;
  }
  TORCH_CHECK(false, "disc: bad ir dtype");
}

ir::TensorType type_of(const at::Tensor& t) {
  if (!t.defined()) return {ir::DType::kFloat32, {}, /*undefined=*/true};
  return {to_ir(t.scalar_type()), t.sizes().vec()};
}

ir::Value make_data(at::Tensor cpu) {
  ir::TensorType type = type_of(cpu);
  return {ir::make_data_node(std::move(type), std::make_shared<TensorData>(std::move(cpu))), 0};
}

ir::Value make_future_data(ir::TensorType type) {
  return {ir::make_data_node(std::move(type), std::make_shared<TensorData>()), 0};
}

ir::Value make_failed_data(ir::TensorType type, std::exception_ptr error) {
  ir::Value v = make_future_data(std::move(type));
  payload_of(*v.node)->fail(std::move(error));
  return v;
}

TensorData* payload_of(const ir::Node& n) {
  return static_cast<TensorData*>(n.payload.get());
}

const at::Tensor* data_of(const ir::Node& n) {
  TensorData* d = payload_of(n);
  return d ? &d->get() : nullptr;
}

namespace {
std::atomic<void (*)()> g_settle{nullptr};
}  // namespace

void set_future_settler(void (*settle)()) { g_settle = settle; }

const at::Tensor& TensorData::get() {
  wait_resolved();
  if (state() == kFailed) std::rethrow_exception(error_);
  return tensor_;
}

void TensorData::wait_resolved() {
  if (state() == kReady) return;
  TORCH_INTERNAL_ASSERT(!on_graph_worker() || resolved(),
                        "disc: a graph started before one of its inputs was computed");
  wait_delivered();
  if (state() == kOrphaned) {
    if (void (*settle)() = g_settle.load()) settle();
    TORCH_INTERNAL_ASSERT(resolved(), "disc: a failed graph's result was never recovered");
  }
}

void TensorData::wait_delivered() {
  if (state() != kPending) return;
  static metrics::Named waits("async.host_waits");
  ++waits;
  // Poll briefly, then sleep: a thread asleep on a condition variable takes
  // ~50 us more to wake on a VM, which a small step feels. Not longer: the
  // polling core is one the graph's threads cannot use while they use every
  // core. 2 cores, 2 threads, AMD EPYC, a graph of one bf16 SDPA [8, 12,
  // 128, 32] (ATen's flash kernel): 1000 us of polling made its kernel take
  // 3.17 ms against 2.05 ms; 150 us, 2.20 ms; and the MNIST MLP step is
  // 0.58 ms with either.
  constexpr int64_t kSpinUs = 150;
  poll_for(kSpinUs, [&] { return state() != kPending; });
  std::unique_lock<std::mutex> lock(mu_);
  wait_interruptibly(cv_, lock, [&] { return state() != kPending; });
}

void TensorData::set(State s) {
  state_.store(s, std::memory_order_release);
  cv_.notify_all();
}

void TensorData::fulfil(at::Tensor t, std::exception_ptr restored_after) {
  std::lock_guard<std::mutex> lock(mu_);
  if (resolved()) return;
  tensor_ = std::move(t);
  restored_after_ = std::move(restored_after);
  set(kReady);
}

void TensorData::fail(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (resolved()) return;
  error_ = std::move(e);
  set(kFailed);
}

void TensorData::orphan() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state() == kPending) set(kOrphaned);
}

}  // namespace disc
