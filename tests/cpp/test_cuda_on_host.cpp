// The CUDA kLoop kernels' arithmetic, checked without a GPU: each sweep
// kernel's CUDA C++ is compiled by the host C++ compiler with a few
// definitions standing in for CUDA's (one block of one thread, which the
// grid-stride loop then walks over every element), run on the CPU, and
// compared with the CPU target's MLIR kernel for the same group on the same
// inputs -- broadcast strides, runtime scalars, bf16 bits and bool masks
// included; row kernels run as one block of one thread walking every row.
// What this cannot check (launch configurations, the warp shuffles and
// shared memory of a block's reductions, the device's math functions)
// needs a GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "cuda_sweep_trials.h"

using namespace disc;
using namespace disc::lowering;

namespace {

constexpr const char* kHostShim = R"(#include <cmath>
#include <cstring>
struct disc_dim3 { unsigned x = 0, y = 0, z = 0; };
static const disc_dim3 blockIdx, threadIdx;
static const disc_dim3 gridDim{1, 1, 1}, blockDim{1, 1, 1};
static const int warpSize = 1;  // a warp of the one thread: no shuffle runs
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static
static inline void __syncthreads() {}
static inline float __shfl_xor_sync(unsigned, float v, int) { return v; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
)";

// The kernel's CUDA C++ built as a host shared library; its entry point.
void* build_on_host(const CudaKernel& k, const std::string& dir) {
  const std::string src = dir + "/" + k.name + ".cpp", lib = dir + "/" + k.name + ".so";
  std::ofstream(src) << kHostShim << k.source;
  const std::string cmd = std::string(DISC_HOST_CXX) + " -std=c++17 -O1 -shared -fPIC -o " + lib +
                          " " + src + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << k.source;
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_TRUE(handle) << dlerror();
  return handle ? dlsym(handle, k.name.c_str()) : nullptr;
}

// Calls a kernel whose arguments are all pointers but the last (a long
// long): on x86-64 both go in integer registers, then on the stack alike.
void call(void* fn, std::vector<void*> ptrs, long long total) {
  using A = void*;
  switch (ptrs.size()) {
#define DISC_CALL(N, ...) \
  case N: reinterpret_cast<void (*)(__VA_ARGS__, long long)>(fn)
    DISC_CALL(5, A, A, A, A, A)(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], total); return;
    DISC_CALL(6, A, A, A, A, A, A)(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], total); return;
    DISC_CALL(7, A, A, A, A, A, A, A)(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6],
                                      total); return;
    DISC_CALL(8, A, A, A, A, A, A, A, A)(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6],
                                         ptrs[7], total); return;
    DISC_CALL(9, A, A, A, A, A, A, A, A, A)(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5],
                                            ptrs[6], ptrs[7], ptrs[8], total); return;
    DISC_CALL(10, A, A, A, A, A, A, A, A, A, A)(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5],
                                                ptrs[6], ptrs[7], ptrs[8], ptrs[9], total); return;
    DISC_CALL(11, A, A, A, A, A, A, A, A, A, A, A)(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4],
                                                   ptrs[5], ptrs[6], ptrs[7], ptrs[8], ptrs[9],
                                                   ptrs[10], total); return;
#undef DISC_CALL
    default: FAIL() << "no caller for " << ptrs.size() << " pointer arguments";
  }
}

}  // namespace

TEST(CudaKernelsOnHost, MatchTheCpuKernelsOfEverySweepGroup) {
  char tmpl[] = "/tmp/disc_cuda_host_XXXXXX";
  ASSERT_TRUE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  std::mt19937 rng(7);
  size_t checked = 0;
  std::map<std::string, void*> built;  // by kernel name: the same text at both scales
  for (int64_t scale : {1, 3}) {
    for (disc::testing::Trial& t : disc::testing::sweep_trials(scale, rng)) {
      void*& fn = built[t.cuda.name];
      if (!fn) fn = build_on_host(t.cuda, dir);
      ASSERT_TRUE(fn);
      std::vector<std::vector<char>> outs;
      for (const std::vector<char>& e : t.expected) outs.emplace_back(e.size());
      std::vector<void*> ptrs;
      for (auto& in : t.inputs) ptrs.push_back(in.data());
      for (auto& o : outs) ptrs.push_back(o.data());
      ptrs.push_back(t.sizes.data());
      ptrs.push_back(t.strides.data());
      ptrs.push_back(t.scalars.data());
      call(fn, ptrs, t.cuda.kind == FusionKind::kLoop ? t.total : t.rows);
      for (size_t k = 0; k < outs.size(); ++k)
        for (int64_t i = 0; i < t.out_count[k]; ++i) {
          const float want = disc::testing::element(t.expected[k], t.out_bf16[k], i);
          const float got = disc::testing::element(outs[k], t.out_bf16[k], i);
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << t.name << " output " << k << " at " << i;
            continue;
          }
          const float tol = t.out_bf16[k] ? 1e-2f * std::fabs(want) : 2e-6f * std::fabs(want) + 1e-6f;
          ASSERT_NEAR(got, want, tol) << t.name << " x" << scale << " output " << k << " at " << i;
        }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 52u);  // the sweep's 26 groups at both scales
  std::filesystem::remove_all(dir);
}
