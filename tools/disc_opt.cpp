// disc-opt: runs compiler passes on graph text and prints the program.
//
//   $ disc-opt --until=fusion-plan tests/ir/fusion-plan/softmax_is_one_stitch.txt
//   $ DISC_DUMP_IR=/tmp/dump python train.py; disc-opt --all /tmp/dump/<hash>.0.input.txt
//
// Errors (options, parse errors, CompileErrors naming the node) go to stderr,
// exit code 1. Torch-free: links disc_lowering only.
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "tools/opt_driver.h"

int main(int argc, char** argv) {
  using namespace disc::tools;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args)
    if (a == "-h" || a == "--help") {
      std::cout << kOptUsage;
      return 0;
    }
  std::string where = "disc-opt: ";
  try {
    OptOptions options = parse_opt_args(args);
    if (options.list_passes) {
      std::cout << list_passes_text();
      if (options.file.empty()) return 0;
    }
    if (options.file.empty()) throw std::invalid_argument("no input file (use - for stdin)");
    std::ostringstream text;
    if (options.file == "-") {
      text << std::cin.rdbuf();
    } else {
      std::ifstream in(options.file);
      if (!in) throw std::invalid_argument("cannot read '" + options.file + "'");
      text << in.rdbuf();
    }
    where += (options.file == "-" ? "<stdin>" : options.file) + ": ";
    std::cout << run_opt(options, text.str());
    return 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << where << e.what() << "\n";
    if (where == "disc-opt: ") std::cerr << kOptUsage;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << where << e.what() << "\n";
    return 1;
  }
}
