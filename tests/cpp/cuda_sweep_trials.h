// Trials of the CUDA sweep's kernels: for every group of cuda_sweep.h, its
// CUDA kernel and CPU (MLIR) kernel, inputs at a given scale (shape-generic
// kernels run at any size), and the CPU kernel's outputs on them: what the
// CUDA kernels' results are compared with, on the host (test_cuda_on_host)
// and on a GPU (cuda_sweep_dump, tools/gpu_check.py).
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_sweep.h"
#include "graph_builder.h"
#include "lowering/codegen/cuda/kernels.h"
#include "lowering/codegen/cpu/fused_kernel.h"
#include "runtime/cpu/mlir_jit.h"

namespace disc::testing {

inline size_t elem_size(ir::DType t) {
  switch (t) {
    case ir::DType::kBool: return 1;
    case ir::DType::kBFloat16: return 2;
    case ir::DType::kFloat64: case ir::DType::kInt64: return 8;
    default: return 4;
  }
}

// A buffer of `n` elements of `t` with values in [0.1, 2) (bool: 0 or 1;
// bf16: those values' bits).
inline std::vector<char> random_buffer(ir::DType t, int64_t n, std::mt19937& rng) {
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

inline float element(const std::vector<char>& buf, bool bf16, int64_t i) {
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


struct Trial {
  std::string name;  // the sweep case
  lowering::CudaKernel cuda;
  std::vector<int64_t> sizes, strides;  // the space; input k's along axis a at k * rank + a
  std::vector<double> scalars;
  int64_t total = 0, rows = 0;  // elements; rows (the last dim is a row)
  std::vector<std::vector<char>> inputs;
  std::vector<bool> out_bf16;
  std::vector<int64_t> out_count;          // elements of each output
  std::vector<std::vector<char>> expected;  // the CPU kernel's outputs
};

// Every sweep group's trial, its space's dims d > 1 made d * scale + 1 (odd
// sizes; inputs broadcast as in the graph), the last dim's by
// `last_scale` where it is given (rows wider than a block, few of them).
inline std::vector<Trial> sweep_trials(int64_t scale, std::mt19937& rng, int64_t last_scale = 0) {
  using namespace lowering;
  std::vector<Trial> out;
  for (const Case& c : sweep()) {
    GraphBuilder b;
    Program p = compiled({c.build(b)});
    for (uint32_t g = 0; g < p.groups.size(); ++g) {
      std::string why;
      std::optional<CudaKernel> cuda = emit_cuda_kernel(p, g, &why);
      std::optional<FusedKernel> cpu = emit_fused_kernel(p, g, &why);
      EXPECT_TRUE(cuda && cpu) << c.name << ": " << why;
      if (!cuda || !cpu) continue;
      Trial t;
      t.name = c.name;
      t.cuda = *cuda;
      const uint32_t R = cuda->rank;
      auto grow = [&](int64_t d, bool last) {
        const int64_t s = last && last_scale ? last_scale : scale;
        return d == 1 ? d : d * s + (s > 1);
      };
      std::vector<int64_t> space = p.ops[cuda->space.node].node->outputs[cuda->space.index].sizes;
      space.insert(space.begin(), R - space.size(), 1);  // row kernels: at least 2-D
      for (size_t a = 0; a < space.size(); ++a) space[a] = grow(space[a], a + 1 == space.size());
      t.sizes = space;
      t.total = 1;
      for (int64_t d : space) t.total *= d;
      t.rows = t.total / space.back();
      for (size_t k = 0; k < cuda->inputs.size(); ++k) {
        const ir::GraphRef& in = cuda->inputs[k];
        std::vector<int64_t> sizes = p.ops[in.node].node->outputs[in.index].sizes;
        int64_t n = 1;
        for (size_t a = 0; a < sizes.size(); ++a) n *= (sizes[a] = grow(sizes[a], a + 1 == sizes.size()));
        t.inputs.push_back(random_buffer(cuda->input_dtypes[k], n, rng));
        std::vector<int64_t> s(R, 0);
        int64_t step = 1;
        for (size_t a = sizes.size(); a-- > 0;) {
          s[R - sizes.size() + a] = sizes[a] == 1 ? 0 : step;
          step *= sizes[a];
        }
        t.strides.insert(t.strides.end(), s.begin(), s.end());
      }
      for (const auto& [op, slot] : cuda->runtime) t.scalars.push_back(p.ops[op].node->runtime.at(slot).d);
      for (const KernelOutput& o : cuda->outputs) {
        t.out_bf16.push_back(p.ops[o.op].node->outputs[o.index].dtype == ir::DType::kBFloat16);
        // Per column: one partial row of n, or one per index of dim 0.
        const int64_t n = space.back(), chunks = cuda->per_outer ? space[0] : 1;
        t.out_count.push_back(o.extent == KernelOutput::Extent::kPerRow      ? t.rows
                              : o.extent == KernelOutput::Extent::kPerColumn ? chunks * n
                                                                             : t.total);
        t.expected.emplace_back(t.out_count.back() * (t.out_bf16.back() ? 2 : 4));
      }
      // The CPU kernel: memrefs of the buffers, rows [0, space[0]) (per
      // index of dim 0, each its own partial row, for a per_outer kernel).
      auto jit = runtime::JitModule::compile(cpu->mlir);
      std::vector<void*> args;
      std::vector<runtime::MemRef1D<char>> refs;
      refs.reserve(t.inputs.size() + t.expected.size());
      auto ref = [&](std::vector<char>& buf, size_t elem) {
        refs.push_back({buf.data(), buf.data(), 0, static_cast<int64_t>(buf.size() / elem), 1});
        refs.back().pack(args);
      };
      for (size_t k = 0; k < t.inputs.size(); ++k) ref(t.inputs[k], elem_size(cuda->input_dtypes[k]));
      for (size_t k = 0; k < t.expected.size(); ++k) ref(t.expected[k], t.out_bf16[k] ? 2 : 4);
      auto ref64 = [](auto& v) {
        using T = typename std::remove_reference_t<decltype(v)>::value_type;
        return runtime::MemRef1D<T>{v.data(), v.data(), 0, static_cast<int64_t>(v.size()), 1};
      };
      auto ms = ref64(t.sizes), mst = ref64(t.strides);
      auto msc = ref64(t.scalars);
      ms.pack(args);
      mst.pack(args);
      msc.pack(args);
      int64_t begin = 0, end = space[0], chunk = 0;
      args.push_back(&begin);
      args.push_back(&end);
      args.push_back(&chunk);
      if (!cpu->per_outer) {
        jit->invoke_packed(cpu->name, args);
      } else {
        for (; chunk < space[0]; ++chunk) {
          begin = chunk, end = chunk + 1;
          jit->invoke_packed(cpu->name, args);
        }
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

}  // namespace disc::testing
