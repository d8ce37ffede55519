#include "lowering/codegen/cuda/launch.h"

#include <algorithm>

namespace disc::lowering {

namespace {

constexpr int64_t kWarp = 32, kMaxBlock = 1024, kThreadsPerSm = 2048, kMaxGridY = 65535;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool has_per_column_output(const CudaKernel& k) {
  return std::any_of(k.outputs.begin(), k.outputs.end(),
                     [](const KernelOutput& o) { return o.extent == KernelOutput::Extent::kPerColumn; });
}

}  // namespace

CudaLaunchShape cuda_launch_shape(const CudaKernel& k, const std::vector<int64_t>& sizes, int multiprocessors) {
  const int64_t sms = std::max(multiprocessors, 1);
  int64_t total = 1;
  for (int64_t d : sizes) total *= d;
  const int64_t n = sizes.empty() ? 1 : sizes.back();
  const int64_t rows = n > 0 ? total / n : 0;
  CudaLaunchShape s;
  switch (k.launch) {
    case CudaKernel::Launch::kElements:
      s.block_x = 256;
      s.grid_x = static_cast<unsigned>(std::clamp<int64_t>(ceil_div(total, 256), 1, sms * 8));
      break;
    case CudaKernel::Launch::kRows: {
      const int64_t threads = std::clamp<int64_t>(ceil_div(ceil_div(n, 4), kWarp) * kWarp, kWarp, kMaxBlock);
      s.block_x = static_cast<unsigned>(threads);
      s.grid_x = static_cast<unsigned>(std::clamp<int64_t>(rows, 1, sms * (kThreadsPerSm / threads)));
      if (has_per_column_output(k)) s.partial_rows = s.grid_x;
      break;
    }
    case CudaKernel::Launch::kColumns: {
      s.block_x = 128;
      const int64_t column_blocks = std::max<int64_t>(ceil_div(n, 128), 1);
      s.grid_x = static_cast<unsigned>(column_blocks);
      const int64_t chunks = k.per_outer ? std::max<int64_t>(sizes.at(0), 1)
                                         : std::clamp<int64_t>(sms * 4 / column_blocks, 1, std::max<int64_t>(rows, 1));
      s.grid_y = static_cast<unsigned>(std::min(chunks, kMaxGridY));
      s.partial_rows = static_cast<unsigned>(k.per_outer ? chunks : s.grid_y);
      break;
    }
  }
  return s;
}

}  // namespace disc::lowering
