// Stand-ins for CUDA's built-ins, so that a generated CUDA kernel's text
// compiles with the host C++ compiler (-pthread) and runs on the CPU as a
// grid: blocks one after another, a block's threads as host threads
// meeting at __syncthreads, a warp shuffle as an exchange between them,
// __shared__ arrays shared by the block, warps of 32. Included before a
// kernel's text by tests/cpp/test_cuda_on_host.cpp and by the emulated
// CuPy of tests/python/test_gpu_check.py.
#pragma once
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
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
// Calls kernel `fn`, whose arguments are `n` pointers then a long long: on
// x86-64 both go in integer registers, then on the stack alike.
template <unsigned... I>
static void disc_call(void* fn, void** args, long long last, std::integer_sequence<unsigned, I...>) {
  reinterpret_cast<void (*)(decltype((void)I, static_cast<void*>(nullptr))..., long long)>(fn)(args[I]..., last);
}
template <unsigned N = 1>
static void disc_call_n(void* fn, void** args, unsigned n, long long last) {
  if constexpr (N <= 24) {
    if (n == N) disc_call(fn, args, last, std::make_integer_sequence<unsigned, N>());
    else disc_call_n<N + 1>(fn, args, n, last);
  } else {
    std::abort();  // more arguments than any generated kernel has
  }
}
// Runs kernel `fn` (`n` pointer arguments, then `last`) on a grid of
// gx x gy blocks of bx threads, the blocks in order or last to first.
extern "C" void disc_host_launch(unsigned gx, unsigned gy, unsigned bx, bool reversed, void* fn, void** args,
                                 unsigned n, long long last) {
  gridDim = {gx, gy, 1};
  blockDim = {bx, 1, 1};
  for (unsigned b = 0; b < gx * gy; ++b) {
    const unsigned i = reversed ? gx * gy - 1 - b : b;
    blockIdx = {i % gx, i / gx, 0};
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < bx; ++t)
      threads.emplace_back([=] {
        threadIdx = {t, 0, 0};
        disc_call_n(fn, args, n, last);
      });
    for (std::thread& th : threads) th.join();
  }
}
