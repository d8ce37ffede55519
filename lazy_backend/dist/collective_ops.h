// The collectives as ops (disc::all_reduce_, disc::broadcast_,
// disc::all_gather, disc::reduce_scatter, disc::scatter, disc::gather,
// disc::all_to_all): on disc tensors they are traced
// like any op and become graph nodes; their CPU kernels, which the
// executors run, call the group's transport (groups.h).
//
// Each takes `after`, the group's previous recorded collective (none for
// the first): an input read only for its order, so that every graph runs a
// group's collectives in the order they were called. all_reduce_ and
// broadcast_ work in place (a DDP bucket is reduced in its own buffer);
// all_gather returns the inputs of all ranks concatenated along dim 0 and
// reduce_scatter this rank's 1/size of dim 0; scatter sends row r of the
// root's [size, ...] input to rank r, gather stacks every rank's input as
// the rows of [size, ...] on the root (zeros elsewhere, so every rank's
// graph has one shape), all_to_all sends in_splits[r] rows of dim 0 to rank
// r and receives out_splits[r] from it (split sizes are SymInts: new sizes
// change the size pattern, not the graph): new tensors the backend copies
// into the caller's.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace disc::dist {

at::Tensor& all_reduce_(at::Tensor& self, const std::optional<at::Tensor>& after, int64_t reduce_op,
                        int64_t group);
at::Tensor& broadcast_(at::Tensor& self, const std::optional<at::Tensor>& after, int64_t root,
                       int64_t group);
at::Tensor all_gather(const at::Tensor& input, const std::optional<at::Tensor>& after,
                      int64_t group);
at::Tensor reduce_scatter(const at::Tensor& input, const std::optional<at::Tensor>& after,
                          int64_t reduce_op, int64_t group);
at::Tensor scatter(const at::Tensor& input, const std::optional<at::Tensor>& after, int64_t root,
                   int64_t group);
at::Tensor gather(const at::Tensor& input, const std::optional<at::Tensor>& after, int64_t root,
                  int64_t group);
at::Tensor all_to_all(const at::Tensor& input, const std::optional<at::Tensor>& after,
                      at::IntArrayRef in_splits, at::IntArrayRef out_splits, int64_t group);

}  // namespace disc::dist
