// View ops on disc tensors. Each makes its result exactly as on CPU (ATen's
// metadata kernel over the shared storage), then records the view as a node
// in the storage's view cache, so a read of the view is `transpose(x)` rather
// than `as_strided(buffer, sizes, strides, offset)`: graphs stay readable and
// free of concrete strides. Views not listed here fall back to as_strided.
#include <ATen/ATen.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/expand_native.h>
#include <ATen/ops/permute_native.h>
#include <ATen/ops/select_native.h>
#include <ATen/ops/slice_native.h>
#include <ATen/ops/squeeze_native.h>
#include <ATen/ops/t_native.h>
#include <ATen/ops/transpose_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "lazy_backend/trace/lazy_storage.h"
#include "lazy_backend/trace/node_builder.h"
#include "lazy_backend/trace/tensor_data.h"

namespace disc {

namespace {

using ir::Attr;

// Records `view`'s value as op(self, <attrs>) in its storage's view cache.
at::Tensor recorded(const at::Tensor& view, const at::Tensor& self, const char* op,
                    const std::function<void(NodeBuilder&)>& attrs) {
  TraceLock lock;
  LazyStorage& s = lazy_storage_of(self);
  NodeBuilder b(op);
  b.tensor(s.read(self));
  attrs(b);
  b.output(type_of(view));
  s.remember_view(view, {b.build(), 0});
  return view;
}

at::Tensor view(const at::Tensor& self, at::IntArrayRef size) {
  at::Tensor out = at::native::view(self, size);
  // Replayed as reshape: the CPU value of `self` may be laid out differently
  // from the disc tensor's strides, and reshape accepts any layout.
  return recorded(out, self, "aten::reshape", [&](NodeBuilder& b) { b.sym_ints(out.sizes().vec()); });
}

at::Tensor reshape_alias(const at::Tensor& self, at::IntArrayRef size, at::IntArrayRef stride) {
  at::Tensor out = at::native::_reshape_alias(self, size, stride);
  return recorded(out, self, "aten::reshape", [&](NodeBuilder& b) { b.sym_ints(out.sizes().vec()); });
}

at::Tensor transpose(const at::Tensor& self, int64_t d0, int64_t d1) {
  return recorded(at::native::transpose(self, d0, d1), self, "aten::transpose.int",
                  [&](NodeBuilder& b) { b.integer(d0).integer(d1); });
}

at::Tensor permute(const at::Tensor& self, at::IntArrayRef dims) {
  return recorded(at::native::permute(self, dims), self, "aten::permute",
                  [&](NodeBuilder& b) { b.ints(dims.vec()); });
}

at::Tensor expand(const at::Tensor& self, at::IntArrayRef size, bool implicit) {
  at::Tensor out = at::native::expand(self, size, implicit);
  return recorded(out, self, "aten::expand", [&](NodeBuilder& b) {
    b.sym_ints(out.sizes().vec()).attr(Attr::of_int(Attr::Kind::kBool, implicit));
  });
}

at::Tensor unsqueeze(const at::Tensor& self, int64_t dim) {
  return recorded(at::native::unsqueeze(self, dim), self, "aten::unsqueeze",
                  [&](NodeBuilder& b) { b.integer(dim); });
}

at::Tensor squeeze_dims(const at::Tensor& self, at::IntArrayRef dims) {
  return recorded(at::native::squeeze(self, dims), self, "aten::squeeze.dims",
                  [&](NodeBuilder& b) { b.ints(dims.vec()); });
}

at::Tensor squeeze_dim(const at::Tensor& self, int64_t dim) {
  return recorded(at::native::squeeze(self, dim), self, "aten::squeeze.dim",
                  [&](NodeBuilder& b) { b.integer(dim); });
}

at::Tensor squeeze_all(const at::Tensor& self) {
  return recorded(at::native::squeeze(self), self, "aten::squeeze", [](NodeBuilder&) {});
}

at::Tensor select(const at::Tensor& self, int64_t dim, int64_t index) {
  return recorded(at::native::select_symint(self, dim, index), self, "aten::select.int",
                  [&](NodeBuilder& b) { b.integer(dim).sym_integer(index); });
}

at::Tensor slice(const at::Tensor& self, int64_t dim, std::optional<int64_t> start,
                 std::optional<int64_t> end, int64_t step) {
  return recorded(at::native::slice(self, dim, start, end, step), self, "aten::slice.Tensor",
                  [&](NodeBuilder& b) {
                    b.integer(dim);
                    start ? b.sym_integer(*start) : b.none();
                    end ? b.sym_integer(*end) : b.none();
                    b.integer(step);
                  });
}

at::Tensor alias(const at::Tensor& self) {
  return recorded(at::native::alias(self), self, "aten::alias", [](NodeBuilder&) {});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // The general case: metadata only; reads become as_strided of the buffer.
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view.dtype", TORCH_FN(at::native::view_dtype));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  // A complex buffer seen as pairs of reals and back (z.real, z.imag, fft):
  // reads reinterpret the buffer's value as view.dtype's do.
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  // In-place views change only the tensor's own sizes and strides; reads
  // then go through the new geometry. (Recorded, they would rewrite the
  // buffer in a new layout under the old geometry: stft's transpose_.)
  m.impl("transpose_", TORCH_FN(at::native::transpose_));
  m.impl("t_", TORCH_FN(at::native::t_));
  m.impl("unsqueeze_", TORCH_FN(at::native::unsqueeze_));
  m.impl("squeeze_", TORCH_FN(static_cast<at::Tensor& (*)(at::Tensor&)>(at::native::squeeze_)));
  m.impl("squeeze_.dim",
         TORCH_FN(static_cast<at::Tensor& (*)(at::Tensor&, int64_t)>(at::native::squeeze_)));
  m.impl("squeeze_.dims", TORCH_FN(static_cast<at::Tensor& (*)(at::Tensor&, at::IntArrayRef)>(
                              at::native::squeeze_)));
  m.impl("as_strided_", TORCH_FN(at::native::as_strided__symint));
  // Recorded as themselves.
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("transpose.int", TORCH_FN(transpose));
  m.impl("permute", TORCH_FN(permute));
  m.impl("expand", TORCH_FN(expand));
  m.impl("unsqueeze", TORCH_FN(unsqueeze));
  m.impl("squeeze", TORCH_FN(squeeze_all));
  m.impl("squeeze.dim", TORCH_FN(squeeze_dim));
  m.impl("squeeze.dims", TORCH_FN(squeeze_dims));
  m.impl("select.int", TORCH_FN(select));
  m.impl("slice.Tensor", TORCH_FN(slice));
  m.impl("alias", TORCH_FN(alias));
}

}  // namespace disc
