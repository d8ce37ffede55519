// Merged GEMM groups on oneDNN (see gemm_merge_exec.h).
#include "lazy_backend/exec/gemm_merge_exec.h"

#include <ATen/ATen.h>

#include "lazy_backend/base/metrics.h"

namespace disc {

namespace {

using lowering::GemmMergeKind;

struct Operands {
  at::Tensor a, b, bias;  // bias undefined for mm
};

Operands operands_of(const ir::Node& n, const std::vector<at::Tensor>& ins) {
  if (lowering::op_of(n.op) != lowering::Op::kAddmm) return {ins[0], ins[1], {}};
  return {ins[1], ins[2], ins[0].reshape({-1}).expand({ins[2].size(1)})};
}

bool col_major(const at::Tensor& t) {
  return t.dim() == 2 && t.stride(0) == 1 && (t.size(1) <= 1 || t.stride(1) == t.size(0));
}

// Concatenates 2-D matrices along `dim`; column-major ones stay column-major
// (their transposes are concatenated along the other dim: whole blocks, no
// transposing copy), as nn.Linear's W^T does.
at::Tensor concat(const std::vector<at::Tensor>& ms, int64_t dim) {
  bool all_col = true;
  for (const at::Tensor& m : ms) all_col = all_col && col_major(m);
  if (!all_col) return at::cat(ms, dim);
  std::vector<at::Tensor> ts;
  for (const at::Tensor& m : ms) ts.push_back(m.t());
  return at::cat(ts, 1 - dim).t();
}

}  // namespace

void run_gemm_group(const lowering::Program& p, uint32_t group, const ir::Graph& g,
                    std::vector<std::vector<at::Tensor>>& values) {
  const std::vector<std::optional<lowering::LibraryCall>>& calls = p.plan.library;
  const lowering::GemmGroup& grp = p.gemm_groups[group];
  std::vector<std::vector<at::Tensor>> ins(grp.ops.size());
  for (size_t i = 0; i < grp.ops.size(); ++i) {
    for (const ir::GraphRef& r : p.ops[grp.ops[i]].inputs) ins[i].push_back(values[r.node][r.index]);
    // The pass merged only what oneDNN takes (float32, unscaled, bias [n]),
    // read from the trace's types, which the values have.
    const char* why = gemm_aten_reason(*g.nodes[grp.ops[i]].node, ins[i]);
    TORCH_INTERNAL_ASSERT(!why, "disc: merged GEMM %", grp.ops[i], " cannot run on oneDNN (", why, ")");
  }
  metrics::bump("kernels_launched");
  metrics::bump("launches.library");
  metrics::bump("gemm_merge.launches");
  metrics::bump("gemm_merge.members", static_cast<int64_t>(grp.ops.size()));
  std::vector<Operands> ops;
  for (size_t i = 0; i < grp.ops.size(); ++i) ops.push_back(operands_of(*g.nodes[grp.ops[i]].node, ins[i]));

  std::vector<at::Tensor> parts;
  if (grp.kind == GemmMergeKind::kSharedLhs) {
    std::vector<at::Tensor> bs, biases;
    std::vector<WeightView> weights;
    for (size_t i = 0; i < ops.size(); ++i) {
      bs.push_back(ops[i].b);
      if (ops[i].bias.defined()) biases.push_back(ops[i].bias);
      if (std::optional<at::Tensor> base = weight_base(*calls[grp.ops[i]], g)) weights.push_back({*base, ops[i].b});
    }
    at::Tensor bias = biases.empty() ? at::Tensor() : at::cat(biases, 0);
    at::Tensor out;
    if (weights.size() == ops.size()) {
      // Pre-packed: the concatenated B is made (and packed) on a miss only;
      // the GEMM reads nothing but the sizes of this stand-in.
      int64_t n = 0;
      for (const at::Tensor& x : bs) n += x.size(1);
      at::Tensor sizes_only = at::empty({1}, at::kFloat).expand({bs[0].size(0), n});
      out = onednn_matmul(ops[0].a, sizes_only, bias, runtime::Activation::kNone, false, &weights,
                          [&] { return concat(bs, 1); });
    } else {
      metrics::bump("gemm_merge.weight_concats");
      out = onednn_matmul(ops[0].a, concat(bs, 1), bias, runtime::Activation::kNone, false);
    }
    int64_t off = 0;
    for (const at::Tensor& x : bs) {
      parts.push_back(out.narrow(1, off, x.size(1)));
      off += x.size(1);
    }
  } else if (grp.kind == GemmMergeKind::kSharedRhs) {
    std::vector<at::Tensor> as;
    for (const Operands& o : ops) as.push_back(o.a);
    std::vector<WeightView> weights;
    if (std::optional<at::Tensor> base = weight_base(*calls[grp.ops[0]], g)) weights.push_back({*base, ops[0].b});
    at::Tensor out = onednn_matmul(concat(as, 0), ops[0].b, ops[0].bias, runtime::Activation::kNone, false,
                                   weights.empty() ? nullptr : &weights);
    int64_t off = 0;
    for (const at::Tensor& x : as) {
      parts.push_back(out.narrow(0, off, x.size(0)));
      off += x.size(0);
    }
  } else {
    std::vector<at::Tensor> as, bs;
    for (const Operands& o : ops) as.push_back(o.a), bs.push_back(o.b);
    at::Tensor out = onednn_matmul(at::stack(as), at::stack(bs), {}, runtime::Activation::kNone, true);
    for (size_t i = 0; i < ops.size(); ++i) parts.push_back(out.select(0, static_cast<int64_t>(i)));
  }
  for (size_t i = 0; i < grp.ops.size(); ++i) {
    const uint32_t m = grp.ops[i];
    TORCH_INTERNAL_ASSERT(parts[i].sizes() == c10::IntArrayRef(g.nodes[m].node->outputs[0].sizes),
                          "disc: merged GEMM part of %", m, " differs from its trace");
    if (calls[m]->own_buffer) {
      parts[i] = parts[i].clone(at::MemoryFormat::Contiguous);
      metrics::bump("gemm_merge.slice_copies");
    }
    values[m] = {parts[i]};
  }
}

}  // namespace disc
