// The compiler pipeline: one ordered list of passes (lowering/passes/pipeline.cpp).
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
// compile(g) is write_code(plan(g)): the sync's compile step plans first and
// writes code only for a plan no cached executable has (a new size pattern
// of a known structure usually plans the same).
CompileResult compile(const ir::Graph& graph);
// Every pass before codegen: the plan and its signature, no code.
CompileResult plan(const ir::Graph& graph);
// The passes plan() left out, on its result.
void write_code(CompileResult& r, const ir::Graph& graph);

// The pass names, in order (for tools and docs).
std::vector<std::string> pass_names();

// A pass and why it runs where it does (disc-opt --list-passes).
struct PassInfo {
  std::string name;
  std::string why;
};
std::vector<PassInfo> pass_infos();

// The passes up to and including `last`, in order (disc-opt --until).
// Throws std::invalid_argument for an unknown name.
std::vector<std::string> passes_until(const std::string& last);

// Runs the named passes on `p` in pipeline order, whatever the order of
// `names` (tools/disc_opt.cpp, tests/ir/). Throws std::invalid_argument for
// an unknown name or a pass that needs the symbolic dims no selected pass
// computes, and CompileError from the passes.
void run_passes(Program& p, const std::vector<std::string>& names);

}  // namespace disc::lowering
