// CUDA C++ to GPU code with NVRTC, for the CUDA target's generated kernels.
// Compiling needs no GPU: the toolkit's NVRTC library targets any
// architecture it knows (sm_80, sm_90, ...), which is how CI checks every
// generated kernel compiles and what it costs in registers, spills and
// shared memory. Built where CMake finds the CUDA toolkit (DISC_HAVE_NVRTC).
#pragma once
#include <string>
#include <vector>

#include "runtime/disk_cache.h"

namespace disc::runtime::nvrtc {

// What ptxas reported for one kernel.
struct Resources {
  int registers = -1;
  int spill_store_bytes = 0, spill_load_bytes = 0;
  int shared_bytes = 0;  // static shared memory
  int stack_bytes = 0;   // stack frame
};

struct Compiled {
  std::string arch;           // "sm_90"
  std::vector<char> cubin;    // loadable with cuModuleLoadData on that architecture
  Resources resources;        // of the kernel named at compile()
  std::string log;            // NVRTC's and ptxas's messages
};

// Whether this build has NVRTC (false: compile() throws).
bool available();

// Compiles `source` (extern "C" __global__ kernels) for `arch` and reads
// kernel `kernel`'s resource use from ptxas. Throws std::runtime_error with
// the compiler's log when the source does not compile.
Compiled compile(const std::string& source, const std::string& kernel, const std::string& arch);

// NVRTC's version ("nvrtc-13.0"), or "no-nvrtc": what a cache of its
// cubins depends on (the DiskCache's version).
std::string version();

// compile(), with the cubin and its resources kept in `cache`: one entry per
// kernel text and architecture, holding the text it was compiled from, so a
// second process compiles nothing. `hit` (if set) says whether it came from
// disk (then `log` is empty); an entry of another text, damaged or of
// another NVRTC is compiled again and replaced.
Compiled compile_cached(const DiskCache& cache, const std::string& source, const std::string& kernel,
                        const std::string& arch, bool* hit = nullptr);

// The numbers of one kernel in ptxas's verbose output (exposed for tests).
Resources parse_resources(const std::string& log, const std::string& kernel);

}  // namespace disc::runtime::nvrtc
