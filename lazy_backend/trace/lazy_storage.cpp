#include "lazy_backend/trace/lazy_storage.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/CPUAllocator.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <map>

#include "lazy_backend/base/failures.h"
#include "lazy_backend/base/graph_worker.h"
#include "lazy_backend/device/memory_stats.h"
#include "lazy_backend/trace/allocator.h"
#include "lazy_backend/trace/node_builder.h"
#include "lazy_backend/trace/tensor_data.h"

namespace disc {

namespace {

// Keyed by allocation id; leaked on purpose so it outlives static tensors.
std::map<uint64_t, LazyStorage*>& registry() {
  static auto* r = new std::map<uint64_t, LazyStorage*>();
  return *r;
}
uint64_t g_next_id = 0;  // guarded by trace_mutex()

// True when t sees the whole buffer in row-major order from offset 0: then
// its value is the buffer's value up to a reshape.
bool covers_storage(const at::Tensor& t, size_t nbytes) {
  return t.storage_offset() == 0 && t.is_contiguous() &&
         static_cast<size_t>(t.numel()) * t.element_size() == nbytes;
}

// Whether v is computed from constants alone (zeros, a fill, a random
// draw), looking at a few nodes at most: the value a buffer was created
// with, which no failure can take away. Data is no constant: an op that
// reads it may fail on it.
bool made_of_constants(const ir::Value& v) {
  constexpr int kMaxNodes = 8;
  std::vector<const ir::Node*> todo{v.node.get()};
  for (int seen = 0; !todo.empty(); ++seen) {
    const ir::Node* n = todo.back();
    todo.pop_back();
    if (seen == kMaxNodes || n->is_data()) return false;
    for (const ir::Value& in : n->inputs) todo.push_back(in.node.get());
  }
  return true;
}

// Whether t sees every element of the buffer exactly once from offset 0.
bool sees_whole_buffer(const at::Tensor& t, size_t nbytes) {
  return t.storage_offset() == 0 && static_cast<size_t>(t.numel()) * t.element_size() == nbytes &&
         t.is_non_overlapping_and_dense();
}

int64_t elements(size_t nbytes, at::ScalarType dtype) {
  size_t item = c10::elementSize(dtype);
  TORCH_CHECK(nbytes % item == 0, "disc: storage of ", nbytes, " bytes cannot be viewed as ",
              dtype);
  return static_cast<int64_t>(nbytes / item);
}

}  // namespace

std::recursive_mutex& trace_mutex() {
  static std::recursive_mutex mu;
  return mu;
}

TraceLock::TraceLock() {
  if (trace_mutex().try_lock()) return;
  GilReleased no_gil;
  trace_mutex().lock();
}

LazyStorage::LazyStorage(size_t nbytes) : nbytes_(nbytes) {
  TraceLock lock;
  id_ = g_next_id++;
  registry().emplace(id_, this);
}

LazyStorage::~LazyStorage() {
  TraceLock lock;
  registry().erase(id_);
  if (held_) count_held_bytes(nbytes_, false);
}

void LazyStorage::hold_if_materialized() {
  if (held_ || !value_ || !value_.node->is_data()) return;
  held_ = true;
  count_held_bytes(nbytes_, true);
}

std::vector<LazyStorage*> live_storages() {
  std::vector<LazyStorage*> out;
  out.reserve(registry().size());
  for (const auto& [id, s] : registry()) out.push_back(s);
  return out;
}

void LazyStorage::ensure_initialized(at::ScalarType dtype) {
  if (!value_) value_ = op_zeros({to_ir(dtype), {elements(nbytes_, dtype)}});
}

ir::Value LazyStorage::typed_value(at::ScalarType dtype) {
  ensure_initialized(dtype);
  const ir::TensorType& t = type_of(value_);
  if (t.dtype == to_ir(dtype)) return value_;
  // A byte-level reader (torch.save, deepcopy) or a dtype view: reinterpret.
  ir::Value flat = t.sizes.size() == 1 ? value_ : op_reshape(value_, {t.numel()});
  return op_view_dtype(flat, to_ir(dtype), elements(nbytes_, dtype));
}

ir::Value LazyStorage::read(const at::Tensor& t) {
  const at::ScalarType dtype = t.scalar_type();
  for (const CachedView& c : views_) {
    if (c.dtype == dtype && c.offset == t.storage_offset() && c.sizes == t.sizes() &&
        c.strides == t.strides())
      return c.value;
  }
  ir::Value base = typed_value(dtype);
  ir::Value v;
  if (covers_storage(t, nbytes_)) {
    v = type_of(base).sizes == t.sizes() ? base : op_reshape(base, t.sizes().vec());
  } else {
    v = op_as_strided(base, t.sizes().vec(), t.strides().vec(), t.storage_offset());
  }
  remember_view(t, v);
  return v;
}

void LazyStorage::remember_view(const at::Tensor& t, ir::Value v) {
  if (views_.size() >= 8) views_.erase(views_.begin());
  views_.push_back({t.sizes().vec(), t.strides().vec(), t.storage_offset(), t.scalar_type(), std::move(v)});
}

void LazyStorage::write(const at::Tensor& t, ir::Value v) {
  TORCH_INTERNAL_ASSERT(type_of(v).sizes == t.sizes(), "disc: write of ",
                        type_of(v).to_string(), " into ", t.sizes());
  views_.clear();
  const bool fresh = !value_;
  if (!pending()) fallback_ = value_;  // the first write since the last sync
  writer_ = this_thread_token();
  if (covers_storage(t, nbytes_)) {
    value_ = v;
  } else if (sees_whole_buffer(t, nbytes_)) {  // channels_last: the buffer in memory order
    value_ = op_reshape(op_permute(v, memory_order(t)), {t.numel()});
  } else {
    ir::Value base = typed_value(t.scalar_type());
    value_ = op_as_strided_scatter(base, v, t.sizes().vec(), t.strides().vec(),
                                   t.storage_offset());
  }
  if ((fresh || !fallback_) && made_of_constants(value_)) fallback_ = value_;
  hold_if_materialized();
  views_.push_back({t.sizes().vec(), t.strides().vec(), t.storage_offset(), t.scalar_type(), v});
}

at::Tensor LazyStorage::read_cpu(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(!pending(), "disc: read_cpu before sync");
  if (!value_) return at::zeros(t.sizes(), t.options().device(at::kCPU));
  const ir::NodePtr leaf = value_.node;
  at::Tensor data;
  try {
    data = *data_of(*leaf);
  } catch (...) {  // the graph computing it failed: this read raises that
    failure_seen(std::current_exception());
    throw;
  }
  // Its old value, restored after the graph that was to update it failed:
  // the thread that still owes that failure is told, by its first such read.
  const TensorData* d = payload_of(*leaf);
  if (d && d->restored_after() && failure_of(this_thread_token()) == d->restored_after()) {
    failure_seen(d->restored_after());
    std::rethrow_exception(d->restored_after());
  }
  if (covers_storage(t, nbytes_) && data.scalar_type() == t.scalar_type())
    return data.reshape(t.sizes());
  at::Tensor flat = data.contiguous().reshape({-1});
  if (flat.scalar_type() != t.scalar_type()) flat = flat.view(t.scalar_type());
  // The data may be a view into a larger buffer (a graph output that is a
  // slice of another): as_strided's offset counts from that buffer's start.
  return flat.as_strided(t.sizes(), t.strides(), flat.storage_offset() + t.storage_offset());
}

void LazyStorage::bind(ir::Value data) {
  value_ = std::move(data);
  fallback_ = {};  // value_ is the fallback of the next graph that writes it
  views_.clear();
  hold_if_materialized();
}


void LazyStorage::discard(const std::exception_ptr& error) {
  value_ = fallback_ ? fallback_ : make_failed_data(type_of(value_), error);
  writer_ = 0;  // a constant fallback is computed by the next sync, for nobody
  views_.clear();
}

void LazyStorage::free_all() {
  if (held_) count_held_bytes(nbytes_, false);
  held_ = false;
  value_ = {};
  fallback_ = {};
  writer_ = this_thread_token();
  nbytes_ = 0;
  views_.clear();
}

void LazyStorage::grow(size_t nbytes) {
  if (nbytes <= nbytes_) return;
  if (value_) {
    const ir::TensorType& t = type_of(value_);
    size_t item = c10::elementSize(to_aten(t.dtype));
    TORCH_CHECK((nbytes - nbytes_) % item == 0, "disc: resize by a partial element");
    ir::Value flat = t.sizes.size() == 1 ? value_ : op_reshape(value_, {t.numel()});
    value_ = op_pad_flat(flat, static_cast<int64_t>((nbytes - nbytes_) / item));
  }
  fallback_ = {};  // nothing of the new size was there before
  writer_ = this_thread_token();
  if (held_) {  // a held buffer is reallocated at its new size
    count_held_bytes(nbytes_, false);
    count_held_bytes(nbytes, true);
  }
  nbytes_ = nbytes;
  views_.clear();
}

namespace {

// A forked child has a copy of the parent's traces and none of its graph
// worker, whose results they may be waiting for: like CUDA, disc refuses to
// run there, at once and saying why, instead of hanging (a DataLoader
// worker over a dataset of disc tensors used to wait forever).
std::atomic<bool> g_forked_child{false};
const bool fork_watch_installed =
    (pthread_atfork(nullptr, nullptr, [] { g_forked_child.store(true); }), true);

}  // namespace

LazyStorage& lazy_storage_of(const at::Tensor& t) {
  TORCH_CHECK(!g_forked_child.load(std::memory_order_relaxed),
              "disc: disc tensors cannot be used in a forked child process (as CUDA tensors "
              "cannot): a DataLoader worker over a dataset holding disc tensors is one. Keep "
              "the dataset on the CPU and move each batch in the training loop "
              "(batch.to(\"disc\")), or use num_workers=0.");
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1,
              "disc: expected a disc tensor, got one on ", t.device());
  void* ctx = t.storage().data_ptr().get_context();
  TORCH_CHECK(ctx != nullptr, "disc: tensor has no disc storage");
  return *static_cast<LazyStorage*>(ctx);
}

bool is_disc(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

namespace {

// Grows t's storage to the bytes its new geometry reaches.
void fit_storage(const at::Tensor& t) {
  const size_t need = (static_cast<size_t>(t.numel()) + t.storage_offset()) * t.element_size();
  TraceLock lock;
  LazyStorage& s = lazy_storage_of(t);
  if (need > s.nbytes()) {
    s.grow(need);
    t.storage().set_nbytes(need);
  }
}

}  // namespace

void resize_disc(const at::Tensor& t, at::IntArrayRef sizes) {
  if (t.sizes() == sizes) return;
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  fit_storage(t);
}

void resize_disc(const at::Tensor& t, const at::Tensor& meta) {
  const bool takes_strides = t.numel() == 0 && meta.numel() > 0 && !memory_order(meta).empty();
  if (!takes_strides) return resize_disc(t, meta.sizes());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(meta.sizes(), meta.strides());
  fit_storage(t);
}

ir::Value read_value(const at::Tensor& t) {
  TraceLock lock;
  return lazy_storage_of(t).read(t);
}

at::Tensor empty_disc(at::IntArrayRef sizes, at::ScalarType dtype) {
  constexpr c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_generic(sizes, disc_allocator(), ks, dtype, std::nullopt);
}

std::vector<int64_t> memory_order(const at::Tensor& t) {
  if (!t.defined() || t.is_contiguous() || !t.is_non_overlapping_and_dense()) return {};
  std::vector<int64_t> dims(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) dims[d] = d;
  std::stable_sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  return dims;
}

at::Tensor empty_disc_like(const at::Tensor& meta) {
  if (memory_order(meta).empty()) return empty_disc(meta.sizes(), meta.scalar_type());
  constexpr c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_strided_generic(meta.sizes(), meta.strides(), disc_allocator(), ks,
                                           meta.scalar_type());
}

}  // namespace disc
