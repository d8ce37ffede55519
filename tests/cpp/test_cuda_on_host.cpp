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
#include <utility>

#include "cuda_sweep_trials.h"
#include "lowering/codegen/cuda_launch.h"

using namespace disc;
using namespace disc::lowering;

namespace {

constexpr const char* kHostShim = R"(#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
struct disc_dim3 { unsigned x = 0, y = 0, z = 0; };
static disc_dim3 gridDim, blockDim, blockIdx;  // one block runs at a time
static thread_local disc_dim3 threadIdx;
static const int warpSize = 32;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static
// A barrier of the block's threads.
static std::mutex disc_mu;
static std::condition_variable disc_cv;
static unsigned disc_waiting = 0, disc_generation = 0;
static void __syncthreads() {
  std::unique_lock<std::mutex> lock(disc_mu);
  const unsigned generation = disc_generation;
  if (++disc_waiting == blockDim.x) {
    disc_waiting = 0;
    ++disc_generation;
    disc_cv.notify_all();
  } else {
    disc_cv.wait(lock, [&] { return disc_generation != generation; });
  }
}
// Every lane posts its value, then reads its partner's. The kernels shuffle
// in control flow uniform over the block, so block barriers bracket it.
static float disc_lanes[1024];
static float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  disc_lanes[threadIdx.x] = v;
  __syncthreads();
  const float other = disc_lanes[threadIdx.x ^ lane_mask];
  __syncthreads();
  return other;
}
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
// Runs kernel(ctx) on a grid of gx x gy blocks of bx threads, the blocks
// in order or last to first.
extern "C" void disc_host_grid(unsigned gx, unsigned gy, unsigned bx, bool reversed, void (*kernel)(void*),
                               void* ctx) {
  gridDim = {gx, gy, 1};
  blockDim = {bx, 1, 1};
  for (unsigned b = 0; b < gx * gy; ++b) {
    const unsigned i = reversed ? gx * gy - 1 - b : b;
    blockIdx = {i % gx, i / gx, 0};
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < bx; ++t) threads.emplace_back([=] { threadIdx = {t, 0, 0}; kernel(ctx); });
    for (std::thread& th : threads) th.join();
  }
}
)";

// A kernel built as a host shared library: its entry point and the grid
// runner of its shim.
struct HostKernel {
  void* fn = nullptr;
  void (*grid)(unsigned, unsigned, unsigned, bool, void (*)(void*), void*) = nullptr;
};

HostKernel build_on_host(const CudaKernel& k, const std::string& dir) {
  const std::string src = dir + "/" + k.name + ".cpp", lib = dir + "/" + k.name + ".so";
  std::ofstream(src) << kHostShim << k.source;
  const std::string cmd = std::string(DISC_HOST_CXX) + " -std=c++17 -O1 -pthread -shared -fPIC -o " + lib +
                          " " + src + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << k.source;
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_TRUE(handle) << dlerror();
  if (!handle) return {};
  HostKernel h;
  h.fn = dlsym(handle, k.name.c_str());
  h.grid = reinterpret_cast<decltype(h.grid)>(dlsym(handle, "disc_host_grid"));
  return h;
}

// Calls a kernel whose arguments are all pointers but the last (a long
// long): on x86-64 both go in integer registers, then on the stack alike.
template <size_t... I>
void call_with(void* fn, const std::vector<void*>& ptrs, long long last, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(decltype((void)I, static_cast<void*>(nullptr))..., long long)>(fn)(ptrs[I]..., last);
}

template <size_t N = 4>
void call(void* fn, const std::vector<void*>& ptrs, long long last) {
  if constexpr (N > 16) {
    FAIL() << "no caller for " << ptrs.size() << " pointer arguments";
  } else if (ptrs.size() == N) {
    call_with(fn, ptrs, last, std::make_index_sequence<N>());
  } else {
    call<N + 1>(fn, ptrs, last);
  }
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

// What every emulated thread runs: the kernel with the launch's arguments.
struct Launch {
  void* fn;
  std::vector<void*> ptrs;
  long long last;
};

void run_kernel(void* launch) {
  const Launch& l = *static_cast<const Launch*>(launch);
  call(l.fn, l.ptrs, l.last);
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
      ASSERT_TRUE(h.fn && h.grid);
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
        Launch l{h.fn, {}, t.cuda.launch == CudaKernel::Launch::kElements ? t.total : t.rows};
        for (auto& in : t.inputs) l.ptrs.push_back(in.data());
        for (auto& o : outs) l.ptrs.push_back(o.data());
        l.ptrs.push_back(t.sizes.data());
        l.ptrs.push_back(t.strides.data());
        l.ptrs.push_back(t.scalars.data());
        h.grid(s.gx, s.gy, s.bx, s.reversed, &run_kernel, &l);
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
  EXPECT_EQ(checked, 62u);  // the sweep's 31 groups at both sizes
  std::filesystem::remove_all(dir);
}
