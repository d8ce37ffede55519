// The compiler pipeline: one ordered list of passes (lowering/pipeline.cpp).
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "lowering/program.h"

namespace disc::lowering {

struct PassTiming {
  const char* pass;
  double ms;
};

struct CompileResult {
  Program program;
  std::vector<PassTiming> timings;
};

// Runs every pass on `graph`. With DISC_DUMP_IR=<dir>, writes the program
// after each pass to <dir>/<hash>.<n>.<pass>.txt. Throws CompileError.
CompileResult compile(const ir::Graph& graph);

// The pass names, in order (for tools and docs).
std::vector<std::string> pass_names();

}  // namespace disc::lowering
