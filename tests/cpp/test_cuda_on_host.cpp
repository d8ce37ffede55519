// The CUDA kLoop kernels' arithmetic, checked without a GPU: each sweep
// kernel's CUDA C++ is compiled by the host C++ compiler with a few
// definitions standing in for CUDA's (one block of one thread, which the
// grid-stride loop then walks over every element), run on the CPU, and
// compared with the CPU target's MLIR kernel for the same group on the same
// inputs -- broadcast strides, runtime scalars, bf16 bits and bool masks
// included; row kernels run as one block of one thread walking every row,
// column kernels as one thread walking every column of one chunk of rows
// (or of each index of dim 0), their partial rows then the sums themselves.
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
#include <utility>

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
  EXPECT_EQ(checked, 62u);  // the sweep's 31 groups at both scales
  std::filesystem::remove_all(dir);
}
