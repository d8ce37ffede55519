// The CUDA target's kernels (lowering/codegen/cuda/kernels.cpp) and NVRTC
// (runtime/cuda/nvrtc.cpp), without a GPU: a sweep of groups -- every
// element-wise op the codegen emits, broadcast inputs, runtime scalars,
// bf16 and bool tensors, row and column reductions, softmax and layer norm
// and their backward -- emits CUDA C++ that compiles for sm_80 and sm_90
// within a register budget and without spills. (Running the kernels needs a GPU:
// the CUDA target's parity tests do that where one is present.)
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "cuda_sweep.h"
#include "graph_builder.h"
#include "lowering/codegen/cuda/kernels.h"
#include "lowering/codegen/cuda/launch.h"
#include "runtime/cuda/nvrtc.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::GraphBuilder;
using disc::testing::Case;
using disc::testing::sweep;

namespace {

// The kernels of the sweep's programs.
std::vector<CudaKernel> sweep_kernels() {
  std::vector<CudaKernel> out;
  for (const Case& c : sweep()) {
    GraphBuilder b;
    Program p = disc::testing::compiled({c.build(b)});
    size_t emitted = 0;
    for (uint32_t g = 0; g < p.groups.size(); ++g) {
      std::string why;
      std::optional<CudaKernel> k = emit_cuda_kernel(p, g, &why);
      EXPECT_TRUE(k) << c.name << ": group " << g << ": " << why;
      if (k) out.push_back(*k), ++emitted;
    }
    EXPECT_GE(emitted, 1u) << c.name;
  }
  return out;
}

}  // namespace

TEST(NvrtcResources, ReadsPtxasVerboseOutput) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'other' for 'sm_90'\n"
      "ptxas info    : Used 40 registers\n"
      "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
      "ptxas info    : Function properties for k\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 18 registers, used 0 barriers, 256 bytes smem, 380 bytes cmem[0]\n";
  runtime::nvrtc::Resources r = runtime::nvrtc::parse_resources(log, "k");
  EXPECT_EQ(r.registers, 18);
  EXPECT_EQ(r.stack_bytes, 8);
  EXPECT_EQ(r.spill_store_bytes, 4);
  EXPECT_EQ(r.spill_load_bytes, 12);
  EXPECT_EQ(r.shared_bytes, 256);
  EXPECT_EQ(runtime::nvrtc::parse_resources(log, "absent").registers, -1);
}

TEST(CudaLoopKernel, IsShapeGenericAndNamedByItsText) {
  GraphBuilder b;
  auto x = b.param({4, 6}), row = b.param({6});
  Program p = disc::testing::compiled({b.op("aten::mul.Tensor", {x, row}, {4, 6})});
  std::string why;
  auto k = emit_cuda_kernel(p, 0, &why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(k->rank, 2u);
  EXPECT_EQ(k->inputs.size(), 2u);
  // Sizes and strides are arguments: the index splits by sizes[a] and
  // each input's offset adds its stride along each axis.
  EXPECT_NE(k->source.find("rest % sizes[1]"), std::string::npos);
  EXPECT_NE(k->source.find("strides[3]"), std::string::npos);  // input 1, axis 1
  EXPECT_EQ(k->source.find("extern \"C\" __global__ void " + k->name), k->source.find("extern"));
  // The same group again: the same text and name.
  EXPECT_EQ(emit_cuda_kernel(p, 0, &why)->name, k->name);
}

TEST(CudaColumnKernel, WritesOnePartialRowPerChunk) {
  // nn.Linear's bias gradient: a sum over the leading dims. Chunks of rows
  // (gridDim.y of them) each write a partial row the launcher adds up, as
  // the CPU kernels' chunks.
  GraphBuilder b;
  auto col = b.op("aten::sum.dim_IntList", {b.param({4, 6})}, {6},
                  {GraphBuilder::ints({0}), GraphBuilder::boolean(false), ir::Attr::none()});
  Program p = disc::testing::compiled({col});
  ASSERT_EQ(p.groups.size(), 1u);
  std::string why;
  auto k = emit_cuda_kernel(p, 0, &why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(k->outputs[0].extent, KernelOutput::Extent::kPerColumn);
  EXPECT_NE(k->source.find("const long long chunks = static_cast<long long>(gridDim.y);"), std::string::npos);
  EXPECT_NE(k->source.find("out0[c * n + j] = acc;"), std::string::npos) << k->source;
  EXPECT_EQ(k->source.find("= disc_block_reduce("), std::string::npos);  // no block reduction

  // A mean over the middle dims: one chunk per batch entry, the result itself.
  GraphBuilder b2;
  auto mid = b2.op("aten::mean.dim", {b2.param({2, 3, 6})}, {2, 6},
                   {GraphBuilder::ints({1}), GraphBuilder::boolean(false), ir::Attr::none()});
  Program p2 = disc::testing::compiled({mid});
  auto k2 = emit_cuda_kernel(p2, 0, &why);
  ASSERT_TRUE(k2) << why;
  EXPECT_TRUE(k2->per_outer);
  EXPECT_NE(k2->source.find("const long long chunks = sizes[0];"), std::string::npos) << k2->source;
}

TEST(CudaRowKernel, LayerNormBackwardSumsWeightGradsIntoTheBlocksRow) {
  GraphBuilder b;
  ir::NodePtr n = disc::testing::layer_norm_backward(b, b.param({4, 6}), true);
  Program p = disc::testing::compiled({{n, 0}, {n, 1}, {n, 2}});
  ASSERT_EQ(p.groups.size(), 1u);
  std::string why;
  auto k = emit_cuda_kernel(p, 0, &why);
  ASSERT_TRUE(k) << why;
  ASSERT_EQ(k->outputs.size(), 3u);
  // dw and db: the block's partial row, cleared before its first row.
  const std::string clear = "out1[blockIdx.x * n + j] = 0.0f;";
  const size_t cleared = k->source.find(clear), rows = k->source.find("for (long long row = blockIdx.x;");
  ASSERT_NE(cleared, std::string::npos) << k->source;
  EXPECT_LT(cleared, rows);
  EXPECT_NE(k->source.find("out2[blockIdx.x * n + j] = out2[blockIdx.x * n + j] + "), std::string::npos);
  // Both row sums in one pass over the row.
  EXPECT_NE(k->source.find("disc_block_reduce(acc1, disc_part, 0.0f, disc_add())"), std::string::npos);
}

TEST(CudaRowKernel, ReducesOverTheBlockAndWritesRowsFromThreadZero) {
  GraphBuilder b;
  auto s = b.op("aten::_softmax", {b.param({4, 6})}, {4, 6},
                {GraphBuilder::integer(1), GraphBuilder::boolean(false)});
  Program p = disc::testing::compiled({s});
  std::string why;
  auto k = emit_cuda_kernel(p, 0, &why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(k->name.rfind("disc_row_", 0), 0u);
  EXPECT_NE(k->source.find("disc_block_reduce(acc0, disc_part, disc_neg_inf(), disc_max())"),
            std::string::npos);
  EXPECT_NE(k->source.find("disc_block_reduce(acc0, disc_part, 0.0f, disc_add())"), std::string::npos);
  EXPECT_NE(k->source.find("for (long long row = blockIdx.x; row < rows; row += gridDim.x)"),
            std::string::npos);
}

TEST(CudaLoopKernel, SweepCompilesForSm80AndSm90WithoutSpills) {
  std::vector<CudaKernel> kernels = sweep_kernels();
  ASSERT_GE(kernels.size(), 31u);
  if (!runtime::nvrtc::available()) GTEST_SKIP() << "built without the CUDA toolkit (NVRTC)";
  for (const CudaKernel& k : kernels) {
    for (const char* arch : {"sm_80", "sm_90"}) {
      runtime::nvrtc::Compiled c = runtime::nvrtc::compile(k.source, k.name, arch);
      EXPECT_FALSE(c.cubin.empty()) << k.name << " " << arch;
      const runtime::nvrtc::Resources& r = c.resources;
      EXPECT_GT(r.registers, 0) << k.name << " " << arch << ":\n" << c.log;
      // These kernels fit 64 registers (full occupancy at 1024 threads a
      // block on both) and never touch local memory.
      EXPECT_LE(r.registers, 64) << k.name << " " << arch << ":\n" << k.source;
      EXPECT_EQ(r.spill_store_bytes + r.spill_load_bytes, 0) << k.name << " " << arch;
      EXPECT_EQ(r.stack_bytes, 0) << k.name << " " << arch;
    }
  }
}

TEST(NvrtcCache, ASecondCompileOfTheSameTextComesFromDisk) {
  if (!runtime::nvrtc::available()) GTEST_SKIP() << "built without the CUDA toolkit (NVRTC)";
  char tmpl[] = "/tmp/disc_nvrtc_cache_XXXXXX";
  ASSERT_TRUE(mkdtemp(tmpl));
  const runtime::DiskCache cache(tmpl, runtime::nvrtc::version());
  const std::vector<CudaKernel> kernels = sweep_kernels();
  const CudaKernel& k = kernels.at(0);
  bool hit = true;
  const runtime::nvrtc::Compiled first = runtime::nvrtc::compile_cached(cache, k.source, k.name, "sm_90", &hit);
  EXPECT_FALSE(hit);
  const runtime::nvrtc::Compiled again = runtime::nvrtc::compile_cached(cache, k.source, k.name, "sm_90", &hit);
  EXPECT_TRUE(hit);
  EXPECT_EQ(again.cubin, first.cubin);
  EXPECT_EQ(again.resources.registers, first.resources.registers);
  EXPECT_EQ(again.arch, "sm_90");
  // Another architecture, another text: each its own entry.
  runtime::nvrtc::compile_cached(cache, k.source, k.name, "sm_80", &hit);
  EXPECT_FALSE(hit);
  const CudaKernel& other = kernels.at(1);
  runtime::nvrtc::compile_cached(cache, other.source, other.name, "sm_90", &hit);
  EXPECT_FALSE(hit);
  // A damaged entry is compiled again, and the new one serves next time.
  for (const auto& f : std::filesystem::directory_iterator(tmpl)) {
    std::fstream s(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(-3, std::ios::end);
    s.put('\x5a');
  }
  const runtime::nvrtc::Compiled redone = runtime::nvrtc::compile_cached(cache, k.source, k.name, "sm_90", &hit);
  EXPECT_FALSE(hit);
  EXPECT_EQ(redone.cubin, first.cubin);
  runtime::nvrtc::compile_cached(cache, k.source, k.name, "sm_90", &hit);
  EXPECT_TRUE(hit);
  // Another NVRTC's entries are not used.
  const runtime::DiskCache older(tmpl, "nvrtc-12.0");
  runtime::nvrtc::compile_cached(older, k.source, k.name, "sm_90", &hit);
  EXPECT_FALSE(hit);
  std::filesystem::remove_all(tmpl);
}

TEST(CudaLaunchShape, FillsTheGpuForEachKindAndSize) {
  GraphBuilder b;
  auto x = b.param({4, 6});
  auto soft = b.op("aten::_softmax", {x}, {4, 6}, {GraphBuilder::integer(1), GraphBuilder::boolean(false)});
  Program p = disc::testing::compiled({soft});
  std::string why;
  const CudaKernel rows = *emit_cuda_kernel(p, 0, &why);
  ASSERT_EQ(rows.launch, CudaKernel::Launch::kRows);
  // BERT's attention softmax, [batch * heads * seq, seq], on 132 SMs: a
  // thread per 4 columns, blocks to fill the SMs, at most one per row.
  CudaLaunchShape s = cuda_launch_shape(rows, {8 * 12 * 128, 128}, 132);
  EXPECT_EQ(s.block_x, 32u);
  EXPECT_EQ(s.grid_x, 132u * 64);
  EXPECT_EQ(s.partial_rows, 0u);
  s = cuda_launch_shape(rows, {3, 4096}, 132);  // few wide rows
  EXPECT_EQ(s.block_x, 1024u);
  EXPECT_EQ(s.grid_x, 3u);
  s = cuda_launch_shape(rows, {0, 768}, 132);  // an empty batch still launches one block
  EXPECT_EQ(s.grid_x, 1u);

  GraphBuilder b2;
  ir::NodePtr ln = disc::testing::layer_norm_backward(b2, b2.param({4, 6}), true);
  Program p2 = disc::testing::compiled({{ln, 0}, {ln, 1}, {ln, 2}});
  s = cuda_launch_shape(*emit_cuda_kernel(p2, 0, &why), {4096, 768}, 132);
  EXPECT_EQ(s.block_x, 192u);
  EXPECT_EQ(s.grid_x, 132u * 10);
  EXPECT_EQ(s.partial_rows, s.grid_x);  // dw and db: a row per block

  GraphBuilder b3;
  Program p3 = disc::testing::compiled({b3.op("aten::sum.dim_IntList", {b3.param({4, 6})}, {6},
                                               {GraphBuilder::ints({0}), GraphBuilder::boolean(false),
                                                ir::Attr::none()})});
  const CudaKernel columns = *emit_cuda_kernel(p3, 0, &why);
  s = cuda_launch_shape(columns, {4096, 768}, 132);  // nn.Linear's bias gradient
  EXPECT_EQ(s.block_x, 128u);
  EXPECT_EQ(s.grid_x, 6u);
  EXPECT_EQ(s.grid_y, 132u * 4 / 6);
  EXPECT_EQ(s.partial_rows, s.grid_y);
  s = cuda_launch_shape(columns, {2, 768}, 132);  // no more chunks than rows
  EXPECT_EQ(s.grid_y, 2u);

  GraphBuilder b4;
  Program p4 = disc::testing::compiled({b4.op("aten::mul.Tensor", {b4.param({4, 6}), b4.param({6})}, {4, 6})});
  const CudaKernel loop = *emit_cuda_kernel(p4, 0, &why);
  s = cuda_launch_shape(loop, {4096, 768}, 132);
  EXPECT_EQ(s.block_x, 256u);
  EXPECT_EQ(s.grid_x, 132u * 8);
  EXPECT_EQ(cuda_launch_shape(loop, {5, 6}, 132).grid_x, 1u);
}
