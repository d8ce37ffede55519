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
#include <random>

#include "cuda_sweep.h"
#include "graph_builder.h"
#include "lowering/codegen/cuda_kernels.h"
#include "lowering/codegen/fused_kernel.h"
#include "runtime/mlir_jit.h"

using namespace disc;
using namespace disc::lowering;
using disc::runtime::MemRef1D;
using disc::testing::GraphBuilder;

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
#undef DISC_CALL
    default: FAIL() << "no caller for " << ptrs.size() << " pointer arguments";
  }
}

size_t elem_size(ir::DType t) {
  switch (t) {
    case ir::DType::kBool: return 1;
    case ir::DType::kBFloat16: return 2;
    case ir::DType::kFloat64: case ir::DType::kInt64: return 8;
    default: return 4;
  }
}

// A buffer of `n` elements of `t` with values in [0.1, 2) (bool: 0 or 1;
// bf16: those values' bits).
std::vector<char> random_buffer(ir::DType t, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.1f, 2.0f);
  std::vector<char> out(n * elem_size(t));
  for (int64_t i = 0; i < n; ++i) {
    const float v = u(rng);
    if (t == ir::DType::kBool) {
      out[i] = (rng() & 1) ? 1 : 0;
    } else if (t == ir::DType::kBFloat16) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t b = static_cast<uint16_t>(bits >> 16);
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(out.data() + 4 * i, &v, 4);
    }
  }
  return out;
}

float element(const std::vector<char>& buf, bool bf16, int64_t i) {
  if (!bf16) {
    float f;
    std::memcpy(&f, buf.data() + 4 * i, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, buf.data() + 2 * i, 2);
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

TEST(CudaKernelsOnHost, MatchTheCpuKernelsOfEverySweepGroup) {
  char tmpl[] = "/tmp/disc_cuda_host_XXXXXX";
  ASSERT_TRUE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  std::mt19937 rng(7);
  size_t checked = 0;
  for (const disc::testing::Case& c : disc::testing::sweep()) {
    GraphBuilder b;
    Program p = disc::testing::compiled({c.build(b)});
    for (uint32_t g = 0; g < p.groups.size(); ++g) {
      std::string why;
      std::optional<CudaKernel> cuda = emit_cuda_kernel(p, g, &why);
      std::optional<FusedKernel> cpu = emit_fused_kernel(p, g, &why);
      ASSERT_TRUE(cuda && cpu) << c.name << ": " << why;
      void* fn = build_on_host(*cuda, dir);
      ASSERT_TRUE(fn);
      auto jit = runtime::JitModule::compile(cpu->mlir);

      // The space, each input's buffer and its (right-aligned, broadcast) strides.
      std::vector<int64_t> space = p.ops[cuda->space.node].node->outputs[cuda->space.index].sizes;
      const uint32_t R = cuda->rank;
      space.insert(space.begin(), R - space.size(), 1);  // row kernels: at least 2-D
      int64_t total = 1;
      for (int64_t d : space) total *= d;
      const int64_t rows = total / space.back();
      std::vector<std::vector<char>> ins;
      std::vector<int64_t> strides;
      for (size_t k = 0; k < cuda->inputs.size(); ++k) {
        const ir::GraphRef& in = cuda->inputs[k];
        const std::vector<int64_t>& sizes = p.ops[in.node].node->outputs[in.index].sizes;
        int64_t n = 1;
        for (int64_t d : sizes) n *= d;
        ins.push_back(random_buffer(cuda->input_dtypes[k], n, rng));
        std::vector<int64_t> s(R, 0);
        int64_t step = 1;
        for (size_t a = sizes.size(); a-- > 0;) {
          const size_t axis = R - sizes.size() + a;
          s[axis] = sizes[a] == 1 ? 0 : step;
          step *= sizes[a];
        }
        strides.insert(strides.end(), s.begin(), s.end());
      }
      std::vector<double> scalars;
      for (const auto& [op, slot] : cuda->runtime)
        scalars.push_back(p.ops[op].node->runtime.at(slot).d);
      std::vector<int64_t> sizes = space;

      // The CUDA kernel on the host.
      std::vector<std::vector<char>> outs_cuda, outs_cpu;
      std::vector<bool> bf16;
      std::vector<int64_t> count;
      for (const KernelOutput& o : cuda->outputs) {
        bf16.push_back(p.ops[o.op].node->outputs[o.index].dtype == ir::DType::kBFloat16);
        count.push_back(o.extent == KernelOutput::Extent::kPerRow ? rows : total);
        outs_cuda.emplace_back(count.back() * (bf16.back() ? 2 : 4));
        outs_cpu.emplace_back(count.back() * (bf16.back() ? 2 : 4));
      }
      std::vector<void*> ptrs;
      for (auto& in : ins) ptrs.push_back(in.data());
      for (auto& o : outs_cuda) ptrs.push_back(o.data());
      ptrs.push_back(sizes.data());
      ptrs.push_back(strides.data());
      ptrs.push_back(scalars.data());
      call(fn, ptrs, cuda->kind == FusionKind::kLoop ? total : rows);

      // The CPU kernel: memrefs of the same buffers, rows [0, space[0]).
      std::vector<void*> args;
      std::vector<MemRef1D<char>> refs;
      refs.reserve(ins.size() + outs_cpu.size());
      auto ref = [&](std::vector<char>& buf, size_t elem) {
        refs.push_back({buf.data(), buf.data(), 0, static_cast<int64_t>(buf.size() / elem), 1});
        refs.back().pack(args);
      };
      for (size_t k = 0; k < ins.size(); ++k) ref(ins[k], elem_size(cuda->input_dtypes[k]));
      for (size_t k = 0; k < outs_cpu.size(); ++k) ref(outs_cpu[k], bf16[k] ? 2 : 4);
      MemRef1D<int64_t> ms{sizes.data(), sizes.data(), 0, static_cast<int64_t>(sizes.size()), 1};
      MemRef1D<int64_t> mst{strides.data(), strides.data(), 0, static_cast<int64_t>(strides.size()), 1};
      MemRef1D<double> msc{scalars.data(), scalars.data(), 0, static_cast<int64_t>(scalars.size()), 1};
      ms.pack(args);
      mst.pack(args);
      msc.pack(args);
      int64_t begin = 0, end = space[0], chunk = 0;
      args.push_back(&begin);
      args.push_back(&end);
      args.push_back(&chunk);
      jit->invoke_packed(cpu->name, args);

      for (size_t k = 0; k < outs_cpu.size(); ++k)
        for (int64_t i = 0; i < count[k]; ++i) {
          const float want = element(outs_cpu[k], bf16[k], i), got = element(outs_cuda[k], bf16[k], i);
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << c.name << " output " << k << " at " << i;
            continue;
          }
          const float tol = bf16[k] ? 1e-2f * std::fabs(want) : 2e-6f * std::fabs(want) + 1e-6f;
          EXPECT_NEAR(got, want, tol) << c.name << " output " << k << " at " << i;
        }
      ++checked;
    }
  }
  EXPECT_GE(checked, 24u);
  std::filesystem::remove_all(dir);
}
