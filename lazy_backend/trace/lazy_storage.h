// The storage model of disc tensors.
//
// Every disc tensor is an ordinary TensorImpl with real sizes, strides and
// storage offset over a c10::Storage whose DataPtr context is a LazyStorage.
// A LazyStorage holds no bytes: it holds the *value* of its whole buffer as a
// trace value (pending) or as CPU data (after a sync). Views share the
// LazyStorage, exactly as CPU views share memory, so views of views, in-place
// ops on views, detach() and autograd's as_strided replay are all exact:
//   read(t)     -> the value seen through t's geometry (reshape / as_strided)
//   write(t, v) -> the buffer's new value (v itself, or as_strided_scatter)
#pragma once
#include <ATen/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "lowering/ir/node.h"

namespace disc {

class LazyStorage {
 public:
  explicit LazyStorage(size_t nbytes);
  ~LazyStorage();
  LazyStorage(const LazyStorage&) = delete;
  LazyStorage& operator=(const LazyStorage&) = delete;

  // Both require trace_mutex().
  ir::Value read(const at::Tensor& t);
  void write(const at::Tensor& t, ir::Value v);

  // Records that t (a new view of this buffer) has value v until the next
  // write, so reading it needs no as_strided. Requires trace_mutex().
  void remember_view(const at::Tensor& t, ir::Value v);

  // After a sync: the CPU values seen through t's geometry (may alias the
  // stored data; copy before handing out).
  at::Tensor read_cpu(const at::Tensor& t);

  // The whole buffer's value; pending when it is not a data leaf.
  const ir::Value& value() const { return value_; }
  bool pending() const { return value_ && !value_.node->is_data(); }
  // The sync's result for value(): a data leaf, whose tensor may still be
  // on its way from the graph worker (tensor_data.h).
  void bind(ir::Value data);
  // What the buffer holds if the graph computing value() fails: its value
  // at the last sync, or, for a buffer created since, the constant it was
  // created with (zeros, a fill); null when it has neither. A failed step
  // then leaves parameters, optimizer state and statistics as they were.
  const ir::Value& fallback() const { return fallback_; }
  // The thread that traced the last write (failures.h): a failure of the
  // graph computing value() is its failure.
  uint64_t writer() const { return writer_; }
  // Drops the pending value, traced by a thread whose earlier work failed:
  // back to fallback(), or `error` when there is none.
  void discard(const std::exception_ptr& error);
  // Drops remembered view values. Every sync does this for every storage,
  // so each step traces from the same state and yields the same graph.
  void forget_views() { views_.clear(); }
  void grow(size_t nbytes);        // resize_ to a larger size
  // resize_(0): the buffer lets go of its value and its bytes (FSDP2 frees
  // an unsharded parameter so, and grows it back before the next use).
  void free_all();
  size_t nbytes() const { return nbytes_; }
  // Allocation order: the sync orders graph outputs by it, so the same
  // program yields the same graph (and cache key) every step.
  uint64_t id() const { return id_; }

 private:
  struct CachedView {
    std::vector<int64_t> sizes, strides;
    int64_t offset;
    at::ScalarType dtype;
    ir::Value value;
  };
  ir::Value typed_value(at::ScalarType dtype);  // value_ reinterpreted as dtype
  // Starts counting nbytes_ in the memory statistics (allocator.h) once
  // value_ is data.
  void hold_if_materialized();
  void ensure_initialized(at::ScalarType dtype);

  uint64_t id_;
  size_t nbytes_;
  ir::Value value_;  // null until first written: reads then see zeros
  ir::Value fallback_;    // see fallback()
  uint64_t writer_ = 0;   // see writer()
  bool held_ = false;     // counted as held bytes (hold_if_materialized)
  std::vector<CachedView> views_;  // values read since the last write
};

// The LazyStorage behind a disc tensor; throws for other devices.
LazyStorage& lazy_storage_of(const at::Tensor& t);
bool is_disc(const at::Tensor& t);
// Gives a disc tensor new (contiguous) sizes, growing its storage if needed:
// resize_, and out= ops that resize their output. Equal sizes keep strides.
void resize_disc(const at::Tensor& t, at::IntArrayRef sizes);
// The same for an out= argument after its op's Meta kernel ran on it: an
// empty one takes the strides the kernel gave it (an abs.out of a
// channels_last tensor is channels_last, as in eager).
void resize_disc(const at::Tensor& t, const at::Tensor& meta);
// Reads a disc tensor's value (takes trace_mutex()).
ir::Value read_value(const at::Tensor& t);

// One lock for trace state: tracing threads and the sync never interleave.
std::recursive_mutex& trace_mutex();

// Holds trace_mutex(), waiting for it without the GIL: no thread then holds
// the GIL while it waits for the lock, so one holding the lock may take the
// GIL (a sync's Ctrl-C check, a Python meta kernel) without a deadlock.
class TraceLock {
 public:
  TraceLock();
  ~TraceLock() { trace_mutex().unlock(); }
  TraceLock(const TraceLock&) = delete;
  TraceLock& operator=(const TraceLock&) = delete;
};

// Every live LazyStorage in allocation order (caller holds trace_mutex()).
std::vector<LazyStorage*> live_storages();

at::Tensor empty_disc(at::IntArrayRef sizes, at::ScalarType dtype);
// t's dims in memory order, outermost first, where t is dense in another
// order than row-major (channels_last); empty otherwise.
std::vector<int64_t> memory_order(const at::Tensor& t);
// A new disc tensor of `meta`'s sizes and dtype, and its strides where they
// are dense in another order (channels_last), as eager lays out the result.
at::Tensor empty_disc_like(const at::Tensor& meta);

}  // namespace disc
