#include "tools/opt_driver.h"

#include <sstream>
#include <stdexcept>

#include "lowering/ir/parse.h"
#include "lowering/passes/pipeline.h"

namespace disc::tools {

namespace {
std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}
}  // namespace

OptOptions parse_opt_args(const std::vector<std::string>& args) {
  OptOptions o;
  int selections = 0;  // --pass, --until, --all
  for (const std::string& a : args) {
    std::string_view v(a);
    if (v.substr(0, 7) == "--pass=") {
      o.passes = split_commas(v.substr(7));
      if (o.passes.empty()) throw std::invalid_argument("--pass= names no pass");
      // Unknown names fail here, before any file is read; run_passes
      // runs the rest in pipeline order.
      for (const std::string& p : o.passes) lowering::passes_until(p);
      ++selections;
    } else if (v.substr(0, 8) == "--until=") {
      o.passes = lowering::passes_until(std::string(v.substr(8)));
      ++selections;
    } else if (v == "--all") {
      o.passes = lowering::pass_names();
      ++selections;
    } else if (v.substr(0, 9) == "--target=") {
      if (v.substr(9) == "cpu") o.target = lowering::Target::kCpu;
      else if (v.substr(9) == "cuda") o.target = lowering::Target::kCuda;
      else throw std::invalid_argument("--target= takes cpu or cuda, not '" + std::string(v.substr(9)) + "'");
    } else if (v == "--list-passes") {
      o.list_passes = true;
    } else if (v == "--print-graph") {
      o.print_graph = true;
    } else if (v == "-" || v.substr(0, 1) != "-") {
      if (!o.file.empty()) throw std::invalid_argument("more than one input file: '" + a + "'");
      o.file = a;
    } else {
      throw std::invalid_argument("unknown option '" + a + "'");
    }
  }
  if (selections > 1) throw std::invalid_argument("choose one of --pass, --until and --all");
  if (selections && o.print_graph) throw std::invalid_argument("--print-graph runs no passes");
  if (!selections) o.passes = lowering::pass_names();
  return o;
}

std::string run_opt(const OptOptions& options, std::string_view text) {
  ir::ParsedGraph parsed = ir::parse_graph(text);
  if (options.print_graph) return parsed.graph.to_string();
  lowering::Program p = lowering::make_program(parsed.graph);
  p.target = options.target;
  lowering::run_passes(p, options.passes);
  return p.to_string();
}

std::string list_passes_text() {
  std::ostringstream os;
  for (const lowering::PassInfo& pass : lowering::pass_infos()) {
    os << pass.name;
    for (size_t k = pass.name.size(); k < 20; ++k) os << ' ';
    os << pass.why << "\n";
  }
  return os.str();
}

}  // namespace disc::tools
