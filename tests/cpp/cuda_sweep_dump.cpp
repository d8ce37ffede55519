// Writes the CUDA sweep's trials (cuda_sweep_trials.h) for a GPU check:
// per kernel k<i>.cu (its CUDA C++), k<i>.json (name, kind, sizes,
// strides, scalars, buffers, which outputs are per row or per-column
// partials and whether those combine by max) and the raw input and
// expected-output buffers, which tools/gpu_check.py reads on a machine
// with a GPU (scripts/gpu_check.sh). The expected outputs are the CPU
// kernels'.
//
//   cuda_sweep_dump DIR [SCALE]
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cuda_sweep_trials.h"

namespace {

const char* numpy_dtype(disc::ir::DType t) {
  switch (t) {
    case disc::ir::DType::kFloat32: return "float32";
    case disc::ir::DType::kFloat64: return "float64";
    case disc::ir::DType::kInt64: return "int64";
    case disc::ir::DType::kInt32: return "int32";
    case disc::ir::DType::kBool: return "bool";
    case disc::ir::DType::kBFloat16: return "bfloat16";
    default: return "unknown";
  }
}

template <class T>
std::string list(const std::vector<T>& v) {
  std::ostringstream os;
  os.precision(17);
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

void write(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: cuda_sweep_dump DIR [SCALE]\n";
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t scale = argc > 2 ? std::stoll(argv[2]) : 20;
  std::filesystem::create_directories(dir);
  std::mt19937 rng(11);
  std::vector<disc::testing::Trial> trials = disc::testing::sweep_trials(scale, rng);
  for (size_t i = 0; i < trials.size(); ++i) {
    const disc::testing::Trial& t = trials[i];
    const std::string stem = dir + "/k" + std::to_string(i);
    std::ofstream(stem + ".cu") << t.cuda.source;
    std::ostringstream json;
    using Launch = disc::lowering::CudaKernel::Launch;
    const Launch launch = t.cuda.launch;
    json << "{\"name\": \"" << t.cuda.name << "\", \"case\": \"" << t.name << "\", \"kind\": \""
         << (launch == Launch::kElements ? "loop" : launch == Launch::kRows ? "row" : "column")
         << "\", \"per_outer\": " << (t.cuda.per_outer ? "true" : "false") << ", \"source\": \"k"
         << i << ".cu\", \"sizes\": " << list(t.sizes) << ", \"strides\": " << list(t.strides)
         << ", \"scalars\": " << list(t.scalars) << ", \"total\": " << t.total << ", \"rows\": " << t.rows
         << ", \"inputs\": [";
    for (size_t k = 0; k < t.inputs.size(); ++k) {
      const std::string file = "k" + std::to_string(i) + ".in" + std::to_string(k) + ".bin";
      write(dir + "/" + file, t.inputs[k]);
      json << (k ? ", " : "") << "{\"file\": \"" << file << "\", \"dtype\": \""
           << numpy_dtype(t.cuda.input_dtypes[k]) << "\"}";
    }
    json << "], \"outputs\": [";
    for (size_t k = 0; k < t.expected.size(); ++k) {
      const std::string file = "k" + std::to_string(i) + ".out" + std::to_string(k) + ".bin";
      write(dir + "/" + file, t.expected[k]);
      json << (k ? ", " : "") << "{\"file\": \"" << file << "\", \"bf16\": " << (t.out_bf16[k] ? "true" : "false")
           << ", \"count\": " << t.out_count[k] << ", \"per_column\": "
           << (t.cuda.outputs[k].extent == disc::lowering::KernelOutput::Extent::kPerColumn ? "true" : "false")
           << ", \"per_row\": "
           << (t.cuda.outputs[k].extent == disc::lowering::KernelOutput::Extent::kPerRow ? "true" : "false")
           << ", \"max\": "
           << (t.cuda.outputs[k].combine == disc::lowering::KernelOutput::Combine::kMax ? "true" : "false")
           << "}";
    }
    json << "]}\n";
    std::ofstream(stem + ".json") << json.str();
  }
  std::cout << trials.size() << " kernels written to " << dir << "\n";
  return ::testing::Test::HasFailure() ? 1 : 0;
}
