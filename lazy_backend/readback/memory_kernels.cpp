// PrivateUse1 kernels that manage storage rather than compute: allocation,
// set_/resize_, and the transfers between disc and CPU. Views are in
// view_kernels.cpp; everything else goes through capture.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <torch/library.h>

#include "lazy_backend/base/graph_worker.h"
#include "lazy_backend/base/metrics.h"
#include "lazy_backend/device/target.h"
#include "lazy_backend/sync/launch.h"
#include "lazy_backend/sync/sync.h"
#include "lazy_backend/trace/allocator.h"
#include "lazy_backend/trace/capture.h"
#include "lazy_backend/trace/lazy_storage.h"
#include "lazy_backend/trace/node_builder.h"
#include "lazy_backend/trace/tensor_data.h"

namespace disc {

namespace {

constexpr c10::DispatchKeySet kDiscKeys(c10::DispatchKey::PrivateUse1);


void check_layout_and_device(std::optional<at::Layout> layout, std::optional<at::Device> device) {
  TORCH_CHECK(!layout || *layout == at::kStrided, "disc: only strided tensors are supported, got ",
              *layout);
  TORCH_CHECK(!device || device->index() <= 0, "disc: device ", *device,
              " does not exist (there is one disc device, disc:0)");
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool>, std::optional<at::MemoryFormat> memory_format) {
  check_layout_and_device(layout, device);
  at::ScalarType st = dtype.value_or(at::get_default_dtype_as_scalartype());
  to_ir(st);  // rejects unsupported dtypes by name
  return at::detail::empty_generic(size, disc_allocator(), kDiscKeys, st, memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool>) {
  check_layout_and_device(layout, device);
  at::ScalarType st = dtype.value_or(at::get_default_dtype_as_scalartype());
  to_ir(st);
  return at::detail::empty_strided_generic(size, stride, disc_allocator(), kDiscKeys, st);
}

// Waits until the graph computing s's value has delivered it, outside the
// trace lock and without the GIL: the graph may need it (a Python custom
// op), and other Python threads trace on meanwhile. (Recovering a failed
// graph takes the trace lock: read_cpu does that, with the GIL.)
void wait_for_value(LazyStorage& s) {
  ir::NodePtr leaf;
  {
    TraceLock lock;
    if (s.value() && !s.pending()) leaf = s.value().node;
  }
  TensorData* d = leaf ? payload_of(*leaf) : nullptr;
  if (!d || d->resolved()) return;
  GilReleased no_gil;
  d->wait_delivered();
}

// The values of a disc tensor on the CPU, syncing first if they are pending.
at::Tensor to_cpu(const at::Tensor& src, const char* cause) {
  LazyStorage& s = lazy_storage_of(src);
  bool pending;
  {
    TraceLock lock;
    pending = s.pending();
  }
  // A read raises the failure of the graph that computed this tensor, and
  // no other: a failed step's error waits for the next sync (sync.h).
  if (pending && !read_alone(s, cause)) sync(cause, Owed::kKeep);
  wait_for_value(s);
  TraceLock lock;
  metrics::counters().transfers_to_cpu++;
  at::Tensor cpu = s.read_cpu(src);
  if (!cpu.is_cpu()) cpu = cpu.cpu();  // the CUDA target's value (device/target.h)
  // The buffer holds a conjugate or negative view's base values: the CPU
  // tensor carries the same bits, so CPU ops (copy_, item) apply them.
  if (src.is_conj()) cpu = cpu._conj();
  if (src.is_neg()) cpu = cpu._neg_view();
  return cpu;
}

// dst (disc) = src (disc or CPU), broadcast and converted as copy_ does.
void copy_into_disc(const at::Tensor& dst, const at::Tensor& src) {
  // The values dst's buffer must hold: src's, through dst's conjugate and
  // negative bits when dst is such a view.
  at::Tensor values = is_disc(src) ? without_math_bits(src) : src.resolve_conj().resolve_neg();
  if (dst.is_conj()) values = at::conj_physical(values);
  if (dst.is_neg()) values = at::neg(values);
  ir::Value v;
  if (is_disc(values)) {
    v = read_value(values);
  } else {
    TORCH_CHECK(values.device().is_cpu(), "disc: cannot copy from ", values.device(), " to disc");
    to_ir(values.scalar_type());
    metrics::counters().transfers_to_disc++;
    // A snapshot: the caller may change its CPU tensor right after.
    v = make_data(snapshot_on_target(values));
  }
  TraceLock lock;
  LazyStorage& s = lazy_storage_of(dst);
  if (type_of(v) == type_of(dst)) {
    s.write(dst, v);
  } else {
    s.write(dst, op_copy(s.read(dst), v));
  }
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool) {
  if (self.is_same(src)) return self;
  if (is_disc(self)) {
    copy_into_disc(self, src);
  } else {
    self.copy_(to_cpu(src, "to_cpu"));
  }
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = dst;
  copy_(d, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (is_disc(dst)) {
    resize_disc(dst, self.sizes());
  } else {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

const at::Tensor& resize_(const at::Tensor& self, at::IntArrayRef size,
                          std::optional<at::MemoryFormat> format) {
  TORCH_CHECK(!format || *format == at::MemoryFormat::Contiguous ||
                  *format == at::MemoryFormat::Preserve,
              "disc: resize_ supports contiguous memory format only");
  resize_disc(self, size);
  return self;
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(to_cpu(self, "item"));
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset,
                        at::IntArrayRef size, at::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1,
              "disc: set_ needs a disc storage, got one on ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    impl->set_sizes_and_strides(size, stride);
  }
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.element_size());
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  return set_storage(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  at::Storage fresh(at::Storage::use_byte_size_t(), 0, disc_allocator(), true);
  return set_storage(self, fresh, 0, {0}, {});
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&capture_or_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  // Transfers and host reads.
  m.impl("copy_", TORCH_FN(copy_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  // Storage management.
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_", TORCH_FN(set_empty));
}

}  // namespace disc
