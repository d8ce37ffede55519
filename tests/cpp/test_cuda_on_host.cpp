// The CUDA kernels, checked without a GPU: each sweep kernel's CUDA C++ is
// compiled by the host C++ compiler with definitions standing in for
// CUDA's, run on the CPU as a grid -- blocks one after another, a block's
// threads as host threads meeting at __syncthreads, a warp shuffle as an
// exchange between them, __shared__ arrays shared by the block -- and
// compared with the CPU target's MLIR kernel for the same group on the same
// inputs (broadcast strides, runtime scalars, bf16 bits and bool masks
// included). Each kernel runs in several launch shapes (one to five
// blocks, 32 to 256 threads, 2-D grids for column kernels, and the one
// cuda_launch_shape picks), as tools/gpu_check.py runs them on a GPU, with
// per-column partial rows added up (or their maximum taken) as the
// launcher does. Blocks run one after another, in order or last to first,
// so a block that relies on another's writes fails. What this cannot check
// -- the device's math functions, warps that really run in lockstep,
// blocks that race, speed -- needs a GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "cuda_sweep_trials.h"
#include "lowering/codegen/cuda/launch.h"

using namespace disc;
using namespace disc::lowering;

namespace {

// A kernel built as a host shared library: its entry point and the grid
// runner of its shim.
struct HostKernel {
  void* fn = nullptr;
  void (*launch)(unsigned, unsigned, unsigned, bool, void*, void**, unsigned, long long) = nullptr;
};

HostKernel build_on_host(const CudaKernel& k, const std::string& dir) {
  const std::string src = dir + "/" + k.name + ".cpp", lib = dir + "/" + k.name + ".so";
  std::ofstream(src) << "#include \"" DISC_HOST_SHIM "\"\n" << k.source;
  const std::string cmd = std::string(DISC_HOST_CXX) + " -std=c++17 -O1 -pthread -shared -fPIC -o " + lib +
                          " " + src + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << k.source;
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_TRUE(handle) << dlerror();
  if (!handle) return {};
  HostKernel h;
  h.fn = dlsym(handle, k.name.c_str());
  h.launch = reinterpret_cast<decltype(h.launch)>(dlsym(handle, "disc_host_launch"));
  return h;
}

// `count` NaNs: f32, or bf16's bits.
std::vector<char> nan_buffer(int64_t count, bool bf16) {
  std::vector<char> out(count * (bf16 ? 2 : 4));
  const float f32 = std::numeric_limits<float>::quiet_NaN();
  const uint16_t b16 = 0x7FC1;
  for (int64_t i = 0; i < count; ++i) {
    if (bf16) std::memcpy(out.data() + 2 * i, &b16, 2);
    else std::memcpy(out.data() + 4 * i, &f32, 4);
  }
  return out;
}

struct Shape {
  unsigned gx, gy, bx;
  bool reversed = false;  // blocks last to first: a block must not rely on another's writes
};

// The launch shapes a kernel runs in here (blockDim.x whole warps): a few
// of each kind's, and the one cuda_launch_shape picks for a GPU of one SM.
std::vector<Shape> shapes(const disc::testing::Trial& t) {
  const CudaLaunchShape picked = cuda_launch_shape(t.cuda, t.sizes, 1);
  std::vector<Shape> out{{picked.grid_x, picked.grid_y, picked.block_x}};
  switch (t.cuda.launch) {
    case CudaKernel::Launch::kElements: out.insert(out.end(), {{1, 1, 32}, {3, 1, 64}}); break;
    case CudaKernel::Launch::kRows: out.insert(out.end(), {{1, 1, 32}, {2, 1, 64}, {5, 1, 32, true}}); break;
    case CudaKernel::Launch::kColumns: out.insert(out.end(), {{1, 1, 32}, {2, 3, 32, true}}); break;
  }
  return out;
}

bool has_partials(const disc::testing::Trial& t) {
  return std::any_of(t.cuda.outputs.begin(), t.cuda.outputs.end(),
                     [](const KernelOutput& o) { return o.extent == KernelOutput::Extent::kPerColumn; });
}

// How many partial rows a per-column output has in this launch: a block's
// (row kernels), a chunk's (column kernels), one per index of dim 0.
unsigned partial_rows(const disc::testing::Trial& t, const Shape& s) {
  if (t.cuda.per_outer) return static_cast<unsigned>(t.sizes[0]);
  return t.cuda.launch == CudaKernel::Launch::kRows ? s.gx : s.gy;
}

// Output k as the launcher hands it on: partial rows added up, or their
// maximum (a per_outer kernel's rows are the result).
std::vector<float> combined(const disc::testing::Trial& t, size_t k, const std::vector<char>& raw,
                            const Shape& s) {
  const int64_t count = t.out_count[k];
  std::vector<float> out(count);
  const KernelOutput& o = t.cuda.outputs[k];
  if (o.extent != KernelOutput::Extent::kPerColumn || t.cuda.per_outer) {
    for (int64_t i = 0; i < count; ++i) out[i] = disc::testing::element(raw, t.out_bf16[k], i);
    return out;
  }
  const bool max = o.combine == KernelOutput::Combine::kMax;
  for (int64_t i = 0; i < count; ++i) {
    float v = max ? -std::numeric_limits<float>::infinity() : 0.0f;
    for (unsigned r = 0; r < partial_rows(t, s); ++r) {
      const float p = disc::testing::element(raw, false, r * count + i);
      v = max ? (v > p || v != v ? v : p) : v + p;
    }
    out[i] = v;
  }
  return out;
}

}  // namespace

TEST(CudaKernelsOnHost, MatchTheCpuKernelsOfEverySweepGroupInEveryShape) {
  char tmpl[] = "/tmp/disc_cuda_host_XXXXXX";
  ASSERT_TRUE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  std::mt19937 rng(7);
  size_t checked = 0, launches = 0;
  std::map<std::string, HostKernel> built;  // by kernel name: the same text at both scales
  // Small, then rows of 73 (more than two warps of columns), 9 to 81 of them.
  for (auto [scale, last_scale] : {std::pair<int64_t, int64_t>{1, 0}, {2, 12}}) {
    for (disc::testing::Trial& t : disc::testing::sweep_trials(scale, rng, last_scale)) {
      HostKernel& h = built[t.cuda.name];
      if (!h.fn) h = build_on_host(t.cuda, dir);
      ASSERT_TRUE(h.fn && h.launch);
      // The picked shape's count of partial rows is the one the kernel writes.
      const Shape picked = shapes(t)[0];
      EXPECT_EQ(cuda_launch_shape(t.cuda, t.sizes, 1).partial_rows,
                has_partials(t) ? partial_rows(t, picked) : 0u) << t.name;
      for (const Shape& s : shapes(t)) {
        // NaN, not zeros: a kernel must write (or clear) all that is read back.
        std::vector<std::vector<char>> outs;
        for (size_t k = 0; k < t.expected.size(); ++k) {
          const bool partials = t.cuda.outputs[k].extent == KernelOutput::Extent::kPerColumn;
          const int64_t n = t.sizes.back();
          outs.push_back(nan_buffer(partials && !t.cuda.per_outer ? partial_rows(t, s) * n : t.out_count[k],
                                    t.out_bf16[k]));
        }
        std::vector<void*> ptrs;
        for (auto& in : t.inputs) ptrs.push_back(in.data());
        for (auto& o : outs) ptrs.push_back(o.data());
        ptrs.push_back(t.sizes.data());
        ptrs.push_back(t.strides.data());
        ptrs.push_back(t.scalars.data());
        h.launch(s.gx, s.gy, s.bx, s.reversed, h.fn, ptrs.data(), static_cast<unsigned>(ptrs.size()),
                 t.cuda.launch == CudaKernel::Launch::kElements ? t.total : t.rows);
        ++launches;
        for (size_t k = 0; k < outs.size(); ++k) {
          const std::vector<float> got = combined(t, k, outs[k], s);
          for (int64_t i = 0; i < t.out_count[k]; ++i) {
            const float want = disc::testing::element(t.expected[k], t.out_bf16[k], i);
            if (std::isnan(want)) {
              EXPECT_TRUE(std::isnan(got[i])) << t.name << " output " << k << " at " << i;
              continue;
            }
            // Sums over a block or over chunks add in another order than
            // the CPU kernel's: a few ulps of the terms' size more.
            const float tol = t.out_bf16[k] ? 1e-2f * std::fabs(want) : 2e-6f * std::fabs(want) + 1e-5f;
            ASSERT_NEAR(got[i], want, tol) << t.name << " x" << scale << " output " << k << " at " << i
                                           << " (grid " << s.gx << "x" << s.gy << ", block " << s.bx << ")";
          }
        }
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 76u);  // the sweep's 38 groups at both sizes
  std::filesystem::remove_all(dir);
}

// Every op the codegen emits (ops.def's kEmit rows) is in some sweep group,
// so the test above compares each op's CUDA formula with its CPU one: a new
// op cannot be generated on one target and missing or different on the other.
TEST(CudaKernelsOnHost, TheSweepHasEveryOpTheCodegenEmits) {
  std::set<std::string> swept;
  for (const disc::testing::Case& c : disc::testing::sweep()) {
    disc::testing::GraphBuilder b;
    const ir::Value root = c.build(b);
    std::vector<const ir::Node*> todo{root.node.get()};
    while (!todo.empty()) {
      const ir::Node* n = todo.back();
      todo.pop_back();
      swept.insert(ir::op_name(n->op));
      for (const ir::Value& in : n->inputs) todo.push_back(in.node.get());
    }
  }
  std::vector<std::string> missing;
#define DISC_OP(id, name, cls, codegen) \
  if (codegen == kEmit && !swept.count(name)) missing.push_back(name);
  // kEmitCpu: generated on the CPU only; CUDA graphs run it on ATen.
  constexpr int kNone = 0, kEmit = 1, kEmitCpu = 2;
  (void)kNone, (void)kEmitCpu;
#include "lowering/ops.def"
#undef DISC_OP
  EXPECT_TRUE(missing.empty()) << ::testing::PrintToString(missing);
}
