// Codegen of fusion groups (fused_kernel.cpp): kernels compile through
// MLIR and match a scalar reference -- kLoop with broadcasting and a runtime
// scalar, a softmax row kernel on its vector and strided paths -- for several
// shapes from one compiled kernel (sizes are runtime arguments).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <type_traits>

#include "graph_builder.h"
#include "lowering/codegen/cpu/fused_kernel.h"
#include "lowering/passes/pipeline.h"
#include "runtime/cpu/mlir_jit.h"

using namespace disc;
using namespace disc::lowering;
using disc::runtime::MemRef1D;
using disc::testing::GraphBuilder;

namespace {

// Launches kernel `k` over rows [0, rows) as kernel_launch.cpp does: the
// input and output buffers in signature order, then sizes, strides (input k,
// axis a at k * rank + a), runtime scalars, begin, end and chunk 0.
void launch(const FusedKernel& k, const runtime::JitModule& jit, std::vector<MemRef1D<float>> buffers,
            std::vector<int64_t> sizes, std::vector<int64_t> strides, std::vector<double> scalars,
            int64_t rows) {
  auto ref = [](auto& v) {
    using T = typename std::remove_reference_t<decltype(v)>::value_type;
    return MemRef1D<T>{v.data(), v.data(), 0, static_cast<int64_t>(v.size()), 1};
  };
  MemRef1D<int64_t> ms = ref(sizes), mst = ref(strides);
  MemRef1D<double> msc = ref(scalars);
  int64_t begin = 0, end = rows, chunk = 0;
  std::vector<void*> args;
  for (auto& b : buffers) b.pack(args);
  ms.pack(args);
  mst.pack(args);
  msc.pack(args);
  args.push_back(&begin);
  args.push_back(&end);
  args.push_back(&chunk);
  jit.invoke_packed(k.name, args);
}

}  // namespace

TEST(FusedKernel, FusedGroupMatchesScalarReferenceForManyShapes) {
  // relu(x * y + alpha * b) - with b broadcast over rows, alpha a runtime scalar.
  GraphBuilder gb;
  auto x = gb.param({3, 5});
  auto y = gb.param({3, 5});
  auto b = gb.param({5});
  auto m = gb.op("aten::mul.Tensor", {x, y}, {3, 5});
  auto a = gb.op("aten::add.Tensor", {m, b}, {3, 5}, {}, {GraphBuilder::scalar(0.5)});
  auto r = gb.op("aten::relu", {a}, {3, 5});
  Program p = compile(ir::build_graph({r})).program;
  ASSERT_EQ(p.groups.size(), 1u);
  std::string why;
  auto k = emit_fused_kernel(p, 0, &why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(k->inputs.size(), 3u);
  EXPECT_EQ(k->outputs.size(), 1u);
  EXPECT_EQ(k->runtime.size(), 1u);
  auto jit = runtime::JitModule::compile(k->mlir);

  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 5}, {1, 7}, {64, 33}}) {
    std::vector<float> xv(rows * cols), yv(rows * cols), bv(cols), out(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) { xv[i] = std::sin(i * 0.7f); yv[i] = std::cos(i * 1.3f); }
    for (int64_t j = 0; j < cols; ++j) bv[j] = 0.1f * j - 1.f;
    // strides of x, y, b in the [rows, cols] space; b broadcasts over rows.
    MemRef1D<float> mx{xv.data(), xv.data(), 0, rows * cols, 1}, my{yv.data(), yv.data(), 0, rows * cols, 1},
        mb{bv.data(), bv.data(), 0, cols, 1}, mo{out.data(), out.data(), 0, rows * cols, 1};
    launch(*k, *jit, {mx, my, mb, mo}, {rows, cols}, {cols, 1, cols, 1, 0, 1}, {0.5}, rows);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        float want = std::max(0.f, xv[i * cols + j] * yv[i * cols + j] + 0.5f * bv[j]);
        ASSERT_NEAR(out[i * cols + j], want, 1e-6) << rows << "x" << cols << " at " << i << "," << j;
      }
  }
}

TEST(FusedKernel, LoopKernelOutputsMayTakeTheBuffersOfItsInputs) {
  // A momentum update with two outputs: buf' = buf * w + g, p' = p - 0.1 buf'.
  // A kLoop kernel loads every input of an element before storing there, so
  // each output may be written into any input read at the same index --
  // here crosswise, buf' into p's buffer and p' into buf's, which a kernel
  // storing buf' before it loads p would get wrong.
  GraphBuilder gb;
  auto p = gb.param({4, 37});
  auto buf = gb.param({4, 37});
  auto g = gb.param({4, 37});
  auto w = gb.param({37});
  auto m = gb.op("aten::mul.Tensor", {buf, w}, {4, 37});
  auto nb = gb.op("aten::add.Tensor", {m, g}, {4, 37}, {}, {GraphBuilder::scalar(1.0)});
  auto np = gb.op("aten::add.Tensor", {p, nb}, {4, 37}, {}, {GraphBuilder::scalar(-0.1)});
  Program prog = compile(ir::build_graph({nb, np})).program;
  ASSERT_EQ(prog.groups.size(), 1u);
  std::string why;
  auto k = emit_fused_kernel(prog, 0, &why);
  ASSERT_TRUE(k) << why;
  EXPECT_TRUE(k->loads_before_stores);
  ASSERT_EQ(k->inputs.size(), 4u);
  ASSERT_EQ(k->outputs.size(), 2u);
  auto jit = runtime::JitModule::compile(k->mlir);

  const int64_t rows = 4, cols = 37, n = rows * cols;
  std::vector<float> pv(n), bv(n), gv(n), wv(cols);
  for (int64_t i = 0; i < n; ++i) {
    pv[i] = std::sin(i * 0.3f);
    bv[i] = std::cos(i * 0.7f);
    gv[i] = 0.01f * i;
  }
  for (int64_t j = 0; j < cols; ++j) wv[j] = 0.9f + 0.001f * j;
  std::vector<float> want_b(n), want_p(n);
  for (int64_t i = 0; i < n; ++i) {
    want_b[i] = bv[i] * wv[i % cols] + gv[i];
    want_p[i] = pv[i] - 0.1f * want_b[i];
  }
  // Kernel inputs in the kernel's order, found by the node they read.
  std::map<const ir::Node*, std::vector<float>*> data = {
      {p.node.get(), &pv}, {buf.node.get(), &bv}, {g.node.get(), &gv}, {w.node.get(), &wv}};
  std::vector<MemRef1D<float>> buffers;
  std::vector<int64_t> strides;
  for (const ir::GraphRef& r : k->inputs) {
    std::vector<float>* v = data.at(prog.ops[r.node].node);
    buffers.push_back({v->data(), v->data(), 0, static_cast<int64_t>(v->size()), 1});
    strides.push_back(v == &wv ? 0 : cols);  // w broadcasts over rows
    strides.push_back(1);
  }
  // Outputs crosswise: buf' into p's buffer, p' into buf's.
  const bool nb_first = prog.ops[k->outputs[0].op].node == nb.node.get();
  std::vector<float>* into_nb = &pv;
  std::vector<float>* into_np = &bv;
  for (std::vector<float>* v : nb_first ? std::vector{into_nb, into_np} : std::vector{into_np, into_nb})
    buffers.push_back({v->data(), v->data(), 0, n, 1});
  std::vector<double> scalars;  // the adds' alphas, runtime arguments
  for (auto [op, slot] : k->runtime) scalars.push_back(prog.ops[op].node == nb.node.get() ? 1.0 : -0.1);
  launch(*k, *jit, buffers, {rows, cols}, strides, scalars, rows);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR((*into_nb)[i], want_b[i], 1e-5) << "buf' at " << i;
    ASSERT_NEAR((*into_np)[i], want_p[i], 1e-5) << "p' at " << i;
  }
}

TEST(FusedKernel, AGroupHoldingAnOpWithoutCodegenIsDeclinedByName) {
  // The planner never groups silu (no codegen in ops.def); a group made by
  // hand is still declined, naming it, rather than miscompiled.
  GraphBuilder gb;
  auto x = gb.param({4});
  auto g = gb.op("aten::silu", {x}, {4});
  auto e = gb.op("aten::exp", {g}, {4});
  Program p = compile(ir::build_graph({e})).program;
  for (const FusionGroup& group : p.groups)
    for (uint32_t op : group.ops) EXPECT_NE(p.ops[op].node, g.node.get());
  p.groups = {{FusionKind::kLoop, {1, 2}}};
  p.ops[1].group = p.ops[2].group = 0;
  std::string why;
  EXPECT_FALSE(emit_fused_kernel(p, 0, &why));
  EXPECT_NE(why.find("aten::silu: op has no codegen"), std::string::npos) << why;
}

namespace {

// Runs a one-input, one-output kernel over [rows, cols] with the given
// input strides (row, col); begin..end covers every row.
std::vector<float> run_rows(const FusedKernel& k, const runtime::JitModule& jit,
                            std::vector<float> in, int64_t rows, int64_t cols,
                            int64_t row_stride, int64_t col_stride) {
  std::vector<float> out(rows * cols);
  MemRef1D<float> mi{in.data(), in.data(), 0, static_cast<int64_t>(in.size()), 1};
  MemRef1D<float> mo{out.data(), out.data(), 0, rows * cols, 1};
  launch(k, jit, {mi, mo}, {rows, cols}, {row_stride, col_stride}, {}, rows);
  return out;
}

}  // namespace

TEST(FusedKernel, SoftmaxIsOneRowKernelOnVectorAndStridedPaths) {
  GraphBuilder gb;
  auto x = gb.param({8, 100});
  auto s = gb.op("aten::_softmax", {x}, {8, 100}, {GraphBuilder::integer(-1), GraphBuilder::boolean(false)});
  Program p = compile(ir::build_graph({s})).program;
  ASSERT_EQ(p.groups.size(), 1u);
  ASSERT_EQ(p.groups[0].kind, FusionKind::kStitch);
  std::string why;
  auto k = emit_fused_kernel(p, 0, &why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(k->rank, 2u);
  ASSERT_EQ(k->outputs.size(), 1u);
  EXPECT_NE(k->mlir.find("vector<16xf32>"), std::string::npos);  // the vector body
  auto jit = runtime::JitModule::compile(k->mlir);
  // Lengths around the vector width and the 4-way unroll; contiguous rows
  // (vector body + tail) and a transposed input (strided loop).
  for (int64_t cols : {1, 15, 16, 17, 64, 100, 129}) {
    const int64_t rows = 3;
    std::vector<float> in(rows * cols);
    for (size_t i = 0; i < in.size(); ++i) in[i] = std::sin(i * 0.37f) * 4.f;
    for (bool transposed : {false, true}) {
      // Transposed: element (r, c) lives at c * rows + r.
      std::vector<float> data(in.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          data[transposed ? c * rows + r : r * cols + c] = in[r * cols + c];
      auto out = transposed ? run_rows(*k, *jit, data, rows, cols, 1, rows)
                            : run_rows(*k, *jit, data, rows, cols, cols, 1);
      for (int64_t r = 0; r < rows; ++r) {
        double mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < cols; ++c) mx = std::max<double>(mx, in[r * cols + c]);
        for (int64_t c = 0; c < cols; ++c) sum += std::exp(in[r * cols + c] - mx);
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_NEAR(out[r * cols + c], std::exp(in[r * cols + c] - mx) / sum, 1e-6)
              << cols << " cols, transposed " << transposed << " at " << r << "," << c;
      }
    }
  }
}

TEST(FusedKernel, ReductionOverTheMiddleDimsIsAColumnKernelPerOuterIndex) {
  GraphBuilder gb;
  auto x = gb.param({4, 5, 6});
  auto s = gb.op("aten::sum.dim_IntList", {x}, {4, 6}, {GraphBuilder::ints({1}), GraphBuilder::boolean(false), ir::Attr{}});
  Program p = compile(ir::build_graph({s})).program;
  ASSERT_EQ(p.groups.size(), 1u);
  std::string why;
  std::optional<FusedKernel> k = emit_fused_kernel(p, 0, &why);
  ASSERT_TRUE(k) << why;
  EXPECT_TRUE(k->per_outer);
  ASSERT_EQ(k->outputs.size(), 1u);
  EXPECT_EQ(k->outputs[0].extent, KernelOutput::Extent::kPerColumn);
}

TEST(FusedKernel, ReductionOverOneInnerDimIsDeclinedWithTheReason) {
  GraphBuilder gb;
  auto x = gb.param({3, 4, 5, 6});
  auto s = gb.op("aten::sum.dim_IntList", {x}, {3, 4, 6}, {GraphBuilder::ints({2}), GraphBuilder::boolean(false), ir::Attr{}});
  Program p = compile(ir::build_graph({s})).program;
  ASSERT_EQ(p.groups.size(), 1u);
  std::string why;
  EXPECT_FALSE(emit_fused_kernel(p, 0, &why));
  EXPECT_NE(why.find("reduces neither the last dim, nor all leading dims"), std::string::npos) << why;
}
