// Bridges torch tensors and the torch-free trace IR: dtype mapping and the
// payload that data leaves hold (a CPU tensor, the reference executor's
// device memory).
#pragma once
#include <ATen/Tensor.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>

#include "lowering/ir/node.h"

namespace disc {

// The tensor of a data leaf. A leaf made by make_data has it from the start;
// one made by make_future_data is the result of a graph that a sync handed
// to the graph worker (graph_worker.h): the worker fulfils it when the value
// is final -- a loss as soon as it is computed, before the backward and the
// update that follow it -- or the sync's recovery fails it with the error.
class TensorData : public ir::Payload {
 public:
  explicit TensorData(at::Tensor t) : tensor_(std::move(t)), state_(kReady) {}
  TensorData() : state_(kPending) {}

  // The tensor, waiting while the graph computing it runs; rethrows the
  // graph's error when it failed here.
  const at::Tensor& get();
  // Waits until it is fulfilled or failed (settling a failed graph).
  void wait_resolved();
  // Waits until the graph computing it has fulfilled or orphaned it: the
  // part of wait_resolved that takes no lock of ours.
  void wait_delivered();
  bool ready() const { return state() == kReady; }
  // Fulfilled or failed. Both are no-ops once it is either.
  bool resolved() const { return state() == kReady || state() == kFailed; }
  // `restored_after`: t is its buffer's value from before a graph that
  // failed with that error (the sync's recovery): a read by the thread that
  // still owes the failure raises it, rather than see the old value as the
  // new one.
  void fulfil(at::Tensor t, std::exception_ptr restored_after = nullptr);
  void fail(std::exception_ptr e);
  const std::exception_ptr& restored_after() const { return restored_after_; }
  // The graph failed before computing it: the next thread that waits for it
  // asks the sync to recover the graph (set_future_settler), which fulfils
  // or fails it.
  void orphan();

 private:
  enum State : int { kPending, kReady, kFailed, kOrphaned };
  State state() const { return static_cast<State>(state_.load(std::memory_order_acquire)); }
  void set(State s);  // under mu_, wakes the waiters
  at::Tensor tensor_;
  std::exception_ptr error_, restored_after_;
  std::atomic<int> state_;
  std::mutex mu_;
  std::condition_variable cv_;
};

// A new, uninitialized CPU tensor of `sizes` (float32, or `dtype`): at::empty
// without the dispatcher (the compiled executor makes a few dozen per step).
at::Tensor new_float_tensor(c10::IntArrayRef sizes);
at::Tensor new_tensor(c10::IntArrayRef sizes, at::ScalarType dtype);

// The dtypes a disc tensor may have: those with an ir::DType.
std::optional<ir::DType> ir_dtype(at::ScalarType t);
ir::DType to_ir(at::ScalarType t);  // throws, naming the dtype, if unsupported
at::ScalarType to_aten(ir::DType t);
ir::TensorType type_of(const at::Tensor& t);

// A leaf node holding `cpu` (which must not be mutated afterwards).
ir::Value make_data(at::Tensor cpu);
// A leaf of type `type` whose tensor a graph in flight will deliver.
ir::Value make_future_data(ir::TensorType type);
// A leaf of type `type` that holds `error` instead of a tensor.
ir::Value make_failed_data(ir::TensorType type, std::exception_ptr error);
// The payload of a data leaf, or nullptr for other nodes.
TensorData* payload_of(const ir::Node& n);
// The tensor a data leaf holds (waiting for it if a graph computes it), or
// nullptr for other nodes.
const at::Tensor* data_of(const ir::Node& n);

// Set by the sync: waits for the graphs in flight and recovers those that
// failed, so that every future leaf is resolved afterwards.
void set_future_settler(void (*settle)());
}  // namespace disc
