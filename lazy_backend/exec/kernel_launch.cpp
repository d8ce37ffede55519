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

#include "lazy_backend/trace/tensor_data.h"

namespace disc {

namespace {

using lowering::KernelOutput;
using runtime::MemRef1D;

constexpr int64_t kColumnChunks = 16;
constexpr int64_t kColumnChunkElements = 32768;

template <typename T>
MemRef1D<char> buffer(T* data, int64_t n) {
  char* p = reinterpret_cast<char*>(data);
  return {p, p, 0, n, 1};
}

}  // namespace

int64_t launch_fused_kernel(const lowering::FusedKernel& spec, runtime::PackedFn fn,
                            const ir::Graph& g, std::vector<std::vector<at::Tensor>>& values,
                            const std::vector<at::Tensor>& into) {
  // Small vectors throughout: a launch costs a handful of heap allocations
  // otherwise, and an MLP step has a dozen launches on the graph worker.
  const uint32_t R = spec.rank;
  // The iteration space in this graph, padded with leading 1s to the rank.
  // (A std::vector: GCC 12 warns, wrongly, of an uninitialized read when a
  // SmallVector is padded here.)
  std::vector<int64_t> sizes = g.nodes[spec.space.node].node->outputs[spec.space.index].sizes;
  sizes.insert(sizes.begin(), R - std::min<size_t>(R, sizes.size()), 1);
  int64_t numel = 1, rows = 1;
  for (int64_t s : sizes) numel *= s;
  for (size_t a = 0; a + 1 < sizes.size(); ++a) rows *= sizes[a];
  c10::SmallVector<void*, 16> inputs;
  c10::SmallVector<int64_t, 64> strides;
  for (const ir::GraphRef& r : spec.inputs) {
    const at::Tensor& t = values[r.node][r.index];
    inputs.push_back(t.data_ptr());
    const int64_t lead = static_cast<int64_t>(R) - t.dim();
    for (uint32_t a = 0; a < R; ++a) {
      const int64_t ax = static_cast<int64_t>(a) - lead;
      strides.push_back(ax < 0 || t.size(ax) == 1 ? 0 : t.stride(ax));
    }
  }
  c10::SmallVector<double, 8> scalars;
  for (auto [op, slot] : spec.runtime) {
    const ir::Attr& a = g.nodes[op].node->runtime[slot];
    scalars.push_back(a.kind == ir::Attr::Kind::kScalarDouble ? a.d : static_cast<double>(a.i));
  }
  const bool by_column = std::any_of(spec.outputs.begin(), spec.outputs.end(), [](const KernelOutput& o) {
    return o.extent == KernelOutput::Extent::kPerColumn;
  });
  const int64_t n = sizes.back();
  // A reduction over the middle dims has one chunk per index of dim 0: its
  // partials are the result.
  const int64_t by_size = std::max<int64_t>(numel / kColumnChunkElements, 1);
  const int64_t chunks = !by_column      ? 1
                         : spec.per_outer ? sizes[0]
                                          : std::min({sizes[0], kColumnChunks, by_size});
  // Per-column outputs are [chunks, n] partial sums; when they are the
  // result (one chunk, or one per outer index) they are made in the op's
  // own sizes, the same elements in the same order.
  const bool partials_are_result = spec.per_outer || chunks == 1;
  c10::SmallVector<at::Tensor, 4> outputs;
  for (size_t j = 0; j < spec.outputs.size(); ++j) {
    const KernelOutput& o = spec.outputs[j];
    const std::vector<int64_t>& own = g.nodes[o.op].node->outputs[o.index].sizes;
    outputs.push_back(j < into.size() && into[j].defined() ? into[j]
                      : o.extent == KernelOutput::Extent::kPerColumn && !partials_are_result
                          ? new_float_tensor({chunks, n})
                          : new_float_tensor(own));
  }
  auto call = [&](int64_t begin, int64_t end, int64_t chunk) {
    c10::SmallVector<MemRef1D<char>, 16> bufs;
    for (void* p : inputs) bufs.push_back(buffer(p, INT64_MAX));
    for (const at::Tensor& t : outputs) bufs.push_back(buffer(t.data_ptr(), t.numel()));
    bufs.push_back(buffer(sizes.data(), static_cast<int64_t>(sizes.size())));
    bufs.push_back(buffer(strides.data(), static_cast<int64_t>(strides.size())));
    bufs.push_back(buffer(scalars.data(), static_cast<int64_t>(scalars.size())));
    c10::SmallVector<void*, 96> args;
    for (auto& b : bufs) b.pack(args);
    args.push_back(&begin);
    args.push_back(&end);
    args.push_back(&chunk);
    fn(args.data());
  };
  std::atomic<int64_t> parts{0};  // the pieces parallel_for made: one per thread that ran
  if (by_column) {
    // The chunks are fixed (so are the sums); how many threads run them is
    // not: a small kernel runs all of them on the calling thread.
    const int64_t per_chunk = chunks > 0 ? std::max<int64_t>(numel / chunks, 1) : 1;
    const int64_t chunk_grain = std::clamp<int64_t>(32768 / per_chunk, 1, std::max<int64_t>(chunks, 1));
    at::parallel_for(0, chunks, chunk_grain, [&](int64_t first, int64_t last) {
      for (int64_t c = first; c < last; ++c) call(c * sizes[0] / chunks, (c + 1) * sizes[0] / chunks, c);
      ++parts;
    });
  } else if (spec.kind != lowering::FusionKind::kLoop ? rows > 0 : numel > 0) {
    // A row kernel still runs over rows of length 0 (their sum is 0, their
    // mean NaN); nothing runs when there are no rows, or no elements.
    const int64_t inner = std::max(numel, rows) / sizes[0];
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1));
    at::parallel_for(0, sizes[0], grain, [&](int64_t begin, int64_t end) {
      call(begin, end, 0);
      ++parts;
    });
  }
  // Outputs of one op (layer norm: y, mean, rstd) go back in index order.
  for (size_t j = 0; j < spec.outputs.size(); ++j) {
    const KernelOutput& o = spec.outputs[j];
    at::Tensor out = outputs[j];
    if (o.extent == KernelOutput::Extent::kPerColumn) {
      using Combine = KernelOutput::Combine;
      if (!partials_are_result) out = o.combine == Combine::kMax ? out.amax(0) : out.sum(0);
      if (o.combine == Combine::kMean)
        out.div_(static_cast<double>(spec.per_outer ? rows / std::max<int64_t>(sizes[0], 1) : rows));
      if (!partials_are_result) out = out.view(g.nodes[o.op].node->outputs[o.index].sizes);
    }
    std::vector<at::Tensor>& v = values[o.op];
    if (v.size() <= o.index) v.resize(o.index + 1);
    v[o.index] = out;
  }
  return parts.load();
}

}  // namespace disc
