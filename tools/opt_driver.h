// What disc-opt does, apart from reading files: options -> passes -> text.
// Shared by tools/disc_opt.cpp and tests/cpp/test_ir_files.cpp, so an IR
// test file's "# RUN:" line means exactly what it means on the command line.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "lowering/plan.h"

namespace disc::tools {

struct OptOptions {
  std::vector<std::string> passes;  // to run (run_passes keeps pipeline order)
  bool list_passes = false;
  bool print_graph = false;         // print the parsed graph, run nothing
  std::string file;                 // "-" is stdin; empty when none was given
  lowering::Target target = lowering::Target::kCpu;  // whose code the codegen pass writes
};

// disc-opt's command line, without argv[0]. Throws std::invalid_argument.
OptOptions parse_opt_args(const std::vector<std::string>& args);

// The text disc-opt prints for graph `text`: Program::to_string() after the
// passes. Throws ir::ParseError, lowering::CompileError, std::invalid_argument.
std::string run_opt(const OptOptions& options, std::string_view text);

// One line per pass: its name and why it runs where it does.
std::string list_passes_text();

constexpr const char* kOptUsage =
    "usage: disc-opt [--pass=<name>[,<name>...] | --until=<name> | --all] [--print-graph]\n"
    "                [--target=cpu|cuda] [--list-passes] <file.txt | ->\n"
    "Parses graph text (Graph::to_string(), a DISC_DUMP_IR *.0.input.txt), runs the chosen\n"
    "passes in pipeline order (default --all) and prints the program after them; the\n"
    "codegen pass prints each kernel's code for the target (MLIR for cpu, CUDA C++).\n";

}  // namespace disc::tools
