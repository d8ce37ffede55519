// Which optional back ends this build has (runtime/CMakeLists.txt). A
// build without one still runs every graph, on ATen: the backend counts
// what it sends there and says so once.
#pragma once

namespace disc::runtime {

// MLIR 15 / LLVM: the CPU code generator. Without it, graphs run on the
// reference executor.
bool has_cpu_codegen();

// oneDNN: GEMMs (with pre-packed weights) and convolutions. Without it they
// run on ATen's kernels.
bool has_onednn();

}  // namespace disc::runtime
