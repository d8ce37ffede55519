// How a launch splits its work:
//  * most kernels: dim 0 in ATen parallel_for chunks (at least ~32K elements
//    each, so small kernels run on the calling thread);
//  * kernels with per-column sums: a number of chunks fixed by the size (one
//    per ~32K elements, at most kColumnChunks), each writing its partial sums
//    to its own row of a [chunks, n] buffer, added up after. The chunking does
//    not depend on the thread count, so the sums are the same on any
//    machine; a small kernel (a bias gradient) is one chunk whose partials
//    are the result, with nothing to add up.
#include "lazy_backend/exec/kernel_launch.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/trace/tensor_data.h"

namespace disc {

namespace {

using lowering::KernelOutput;
using runtime::MemRef1D;

constexpr int64_t kColumnChunks = 16;
constexpr int64_t kColumnChunkElements = 32768;

// The kernel reads sizes, strides and scalars only; MemRef1D has no const.
template <typename T>
MemRef1D<char> buffer(const T* data, int64_t n) {
  char* p = reinterpret_cast<char*>(const_cast<T*>(data));
  return {p, p, 0, n, 1};
}

// What one launch passes to the kernel, and how its work is split.
struct KernelArgs {
  std::vector<int64_t> sizes;  // the iteration space, padded with leading 1s to the rank
  int64_t numel = 1, rows = 1;
  c10::SmallVector<void*, 16> inputs;
  c10::SmallVector<int64_t, 64> strides;  // input k, axis a at k * rank + a; 0 broadcasts
  c10::SmallVector<double, 8> scalars;
  c10::SmallVector<at::Tensor, 4> outputs;
  c10::SmallVector<at::Tensor, 2> cast_inputs;  // kept alive while the kernel reads them
  bool by_column = false;  // a kPerColumn output: chunks of rows write partial sums
  int64_t chunks = 1;
  // Per-column outputs are [chunks, n] partial sums; when they are the
  // result (one chunk, or one per outer index) they are made in the op's
  // own sizes, the same elements in the same order.
  bool partials_are_result = true;
};

// `t` in the dtype the kernel was generated for. An ATen kernel may return
// another dtype than its meta kernel, from which the graph took its types
// (where aten_ops.def has no META_THEN fix for it): read as the traced
// dtype, its bytes would be garbage. Cast, as
// eager's autograd casts a gradient to its input's dtype; counted
// (launches.dtype_casts).
const at::Tensor& as_traced(const at::Tensor& t, ir::DType traced, KernelArgs& a) {
  const at::ScalarType want = to_aten(traced);
  if (t.scalar_type() == want) return t;
  static metrics::Named casts("launches.dtype_casts");
  ++casts;
  a.cast_inputs.push_back(t.to(want));
  return a.cast_inputs.back();
}

// Sizes, input pointers and broadcast strides, runtime scalars of this graph.
// (Small vectors throughout: a launch costs a handful of heap allocations
// otherwise, and an MLP step has a dozen launches on the graph worker.)
KernelArgs kernel_args(const lowering::FusedKernel& spec, const ir::Graph& g,
                       const std::vector<std::vector<at::Tensor>>& values) {
  KernelArgs a;
  const uint32_t R = spec.rank;
  // (A std::vector: GCC 12 warns, wrongly, of an uninitialized read when a
  // SmallVector is padded here.)
  a.sizes = g.nodes[spec.space.node].node->outputs[spec.space.index].sizes;
  a.sizes.insert(a.sizes.begin(), R - std::min<size_t>(R, a.sizes.size()), 1);
  for (int64_t s : a.sizes) a.numel *= s;
  for (size_t d = 0; d + 1 < a.sizes.size(); ++d) a.rows *= a.sizes[d];
  for (size_t k = 0; k < spec.inputs.size(); ++k) {
    const ir::GraphRef& r = spec.inputs[k];
    const at::Tensor& t = as_traced(values[r.node][r.index], spec.input_dtypes[k], a);
    a.inputs.push_back(t.data_ptr());
    const int64_t lead = static_cast<int64_t>(R) - t.dim();
    for (uint32_t d = 0; d < R; ++d) {
      const int64_t ax = static_cast<int64_t>(d) - lead;
      a.strides.push_back(ax < 0 || t.size(ax) == 1 ? 0 : t.stride(ax));
    }
  }
  for (auto [op, slot] : spec.runtime) {
    const ir::Attr& s = g.nodes[op].node->runtime[slot];
    a.scalars.push_back(s.kind == ir::Attr::Kind::kScalarDouble ? s.d : static_cast<double>(s.i));
  }
  return a;
}

// A column reduction runs in a fixed number of row chunks (so its sums do
// not depend on the thread count); one over the middle dims has one chunk
// per index of dim 0, whose partials are the result.
void split_into_chunks(const lowering::FusedKernel& spec, KernelArgs& a) {
  a.by_column = std::any_of(spec.outputs.begin(), spec.outputs.end(), [](const KernelOutput& o) {
    return o.extent == KernelOutput::Extent::kPerColumn;
  });
  const int64_t by_size = std::max<int64_t>(a.numel / kColumnChunkElements, 1);
  a.chunks = !a.by_column      ? 1
             : spec.per_outer ? a.sizes[0]
                              : std::min({a.sizes[0], kColumnChunks, by_size});
  a.partials_are_result = spec.per_outer || a.chunks == 1;
}

// A per-column output the kernel writes as f32 partials to be rounded
// after: a bf16 or f16 column sum.
bool rounded_after(const ir::TensorType& type, const KernelOutput& o) {
  return o.extent == KernelOutput::Extent::kPerColumn && type.dtype != ir::DType::kFloat32;
}

// Each output's buffer: the one `into` gives (an input it may overwrite),
// a [chunks, n] partial-sum buffer, or a new one of the op's sizes.
void allocate_outputs(const lowering::FusedKernel& spec, const ir::Graph& g,
                      const std::vector<at::Tensor>& into, KernelArgs& a) {
  for (size_t j = 0; j < spec.outputs.size(); ++j) {
    const KernelOutput& o = spec.outputs[j];
    const ir::TensorType& type = g.nodes[o.op].node->outputs[o.index];
    const bool partials = o.extent == KernelOutput::Extent::kPerColumn &&
                          (!a.partials_are_result || rounded_after(type, o));
    const bool reuse = !partials && j < into.size() && into[j].defined() &&
                       into[j].scalar_type() == to_aten(type.dtype);
    a.outputs.push_back(reuse      ? into[j]
                        : partials ? new_float_tensor({a.chunks, a.sizes.back()})
                                   : new_tensor(type.sizes, to_aten(type.dtype)));
  }
}

// One call of the kernel over dim 0's [begin, end), writing partial-sum row `chunk`.
void call(runtime::PackedFn fn, const KernelArgs& a, int64_t begin, int64_t end, int64_t chunk) {
  c10::SmallVector<MemRef1D<char>, 16> bufs;
  for (void* p : a.inputs) bufs.push_back(buffer(p, INT64_MAX));
  for (const at::Tensor& t : a.outputs) bufs.push_back(buffer(t.data_ptr(), t.numel()));
  bufs.push_back(buffer(a.sizes.data(), static_cast<int64_t>(a.sizes.size())));
  bufs.push_back(buffer(a.strides.data(), static_cast<int64_t>(a.strides.size())));
  bufs.push_back(buffer(a.scalars.data(), static_cast<int64_t>(a.scalars.size())));
  c10::SmallVector<void*, 96> args;
  for (auto& b : bufs) b.pack(args);
  args.push_back(&begin);
  args.push_back(&end);
  args.push_back(&chunk);
  fn(args.data());
}

// Runs the kernel split across ATen's thread pool; returns the pieces
// parallel_for made (one per thread that ran).
int64_t run_parallel(const lowering::FusedKernel& spec, runtime::PackedFn fn, const KernelArgs& a) {
  std::atomic<int64_t> parts{0};
  const int64_t dim0 = a.sizes[0];
  if (a.by_column) {
    // The chunks are fixed (so are the sums); how many threads run them is
    // not: a small kernel runs all of them on the calling thread.
    const int64_t per_chunk = a.chunks > 0 ? std::max<int64_t>(a.numel / a.chunks, 1) : 1;
    const int64_t grain = std::clamp<int64_t>(32768 / per_chunk, 1, std::max<int64_t>(a.chunks, 1));
    at::parallel_for(0, a.chunks, grain, [&](int64_t first, int64_t last) {
      for (int64_t c = first; c < last; ++c) call(fn, a, c * dim0 / a.chunks, (c + 1) * dim0 / a.chunks, c);
      ++parts;
    });
  } else if (spec.kind != lowering::FusionKind::kLoop ? a.rows > 0 : a.numel > 0) {
    // A row kernel still runs over rows of length 0 (their sum is 0, their
    // mean NaN); nothing runs when there are no rows, or no elements.
    const int64_t inner = std::max(a.numel, a.rows) / dim0;
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1));
    at::parallel_for(0, dim0, grain, [&](int64_t begin, int64_t end) {
      call(fn, a, begin, end, 0);
      ++parts;
    });
  }
  return parts.load();
}

// Partial sums folded into the result; outputs of one op (layer norm: y,
// mean, rstd) go back in index order.
void store_outputs(const lowering::FusedKernel& spec, const ir::Graph& g, const KernelArgs& a,
                   std::vector<std::vector<at::Tensor>>& values) {
  for (size_t j = 0; j < spec.outputs.size(); ++j) {
    const KernelOutput& o = spec.outputs[j];
    at::Tensor out = a.outputs[j];
    if (o.extent == KernelOutput::Extent::kPerColumn) {
      using Combine = KernelOutput::Combine;
      const ir::TensorType& type = g.nodes[o.op].node->outputs[o.index];
      if (!a.partials_are_result) out = o.combine == Combine::kMax ? out.amax(0) : out.sum(0);
      if (o.combine == Combine::kMean)
        out.div_(static_cast<double>(spec.per_outer ? a.rows / std::max<int64_t>(a.sizes[0], 1) : a.rows));
      if (rounded_after(type, o)) out = out.to(to_aten(type.dtype));
      if (!a.partials_are_result || rounded_after(type, o)) out = out.reshape(type.sizes);
    }
    std::vector<at::Tensor>& v = values[o.op];
    if (v.size() <= o.index) v.resize(o.index + 1);
    v[o.index] = out;
  }
}

}  // namespace

int64_t launch_fused_kernel(const lowering::FusedKernel& spec, runtime::PackedFn fn,
                            const ir::Graph& g, std::vector<std::vector<at::Tensor>>& values,
                            const std::vector<at::Tensor>& into) {
  KernelArgs args = kernel_args(spec, g, values);
  split_into_chunks(spec, args);
  allocate_outputs(spec, g, into, args);
  const int64_t parts = run_parallel(spec, fn, args);
  store_outputs(spec, g, args, values);
  return parts;
}

}  // namespace disc
