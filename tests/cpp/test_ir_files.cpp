// Pass tests as text: every tests/ir/<pass>/*.txt is one test case.
//
//   # RUN: --until=canonicalize          disc-opt's options (tools/opt_driver.h)
//   # CSE: two equal exps become one     what the file shows
//   graph ...  return (...)              the input graph
//   # CHECK: program(ops=2, ...)         the expected output, line by line
//   # ERROR: verify: node %1 (...): ...  or the expected error instead
//
// The file itself is disc-opt's input (comments are skipped), so
// `disc-opt <RUN options> <file>` reproduces a failure. On a mismatch the
// test prints a diff; DISC_UPDATE_IR_TESTS=1 rewrites the CHECK / ERROR
// lines with what the passes print now (review the diff before committing).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/options.h"
#include "tools/opt_driver.h"

namespace fs = std::filesystem;

namespace {

struct IrFile {
  std::vector<std::string> run_args;
  std::vector<std::string> expected;  // CHECK lines, or the one ERROR line
  bool expects_error = false;
  std::vector<std::string> lines;     // the whole file
};

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// "# CHECK: text" -> "text"; "# CHECK:" alone is an empty line.
std::string after(const std::string& line, const std::string& tag) {
  std::string rest = line.substr(tag.size());
  return rest.empty() ? rest : rest.substr(1);
}

IrFile read_ir_file(const fs::path& path) {
  IrFile f;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    f.lines.push_back(line);
    if (starts_with(line, "# RUN:")) {
      std::istringstream words(after(line, "# RUN:"));
      for (std::string w; words >> w;) f.run_args.push_back(w);
    } else if (starts_with(line, "# CHECK:")) {
      f.expected.push_back(after(line, "# CHECK:"));
    } else if (starts_with(line, "# ERROR:")) {
      f.expected.push_back(after(line, "# ERROR:"));
      f.expects_error = true;
    }
  }
  return f;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A line diff (longest common subsequence): " " both, "-" expected only,
// "+" actual only. Files are small, so the quadratic table is fine.
std::string diff(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::vector<size_t>> lcs(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = a.size(); i-- > 0;)
    for (size_t j = b.size(); j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::ostringstream os;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && j < b.size() && a[i] == b[j]) {
      os << "  " << a[i++] << "\n";
      ++j;
    } else if (i < a.size() && (j == b.size() || lcs[i + 1][j] >= lcs[i][j + 1])) {
      os << "- " << a[i++] << "\n";
    } else {
      os << "+ " << b[j++] << "\n";
    }
  }
  return os.str();
}

// Keeps every other line where it is and puts the new expectation last.
void update(const fs::path& path, const IrFile& f, const std::vector<std::string>& actual, bool error) {
  std::ofstream out(path);
  for (const std::string& line : f.lines)
    if (!starts_with(line, "# CHECK:") && !starts_with(line, "# ERROR:")) out << line << "\n";
  for (const std::string& line : actual)
    out << (error ? "# ERROR:" : "# CHECK:") << (line.empty() ? "" : " ") << line << "\n";
}

std::vector<fs::path> ir_files() {
  std::vector<fs::path> files;
  for (const auto& dir : fs::directory_iterator(DISC_IR_TEST_DIR)) {
    if (!dir.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(dir.path()))
      if (f.path().extension() == ".txt") files.push_back(f.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class IrFileTest : public ::testing::TestWithParam<fs::path> {};

}  // namespace

TEST_P(IrFileTest, PassesPrintTheExpectedIr) {
  const fs::path& path = GetParam();
  IrFile f = read_ir_file(path);
  ASSERT_FALSE(f.run_args.empty()) << path << ": no '# RUN:' line";
  std::ostringstream text;
  text << std::ifstream(path).rdbuf();
  std::vector<std::string> actual;
  bool error = false;
  try {
    actual = split_lines(disc::tools::run_opt(disc::tools::parse_opt_args(f.run_args), text.str()));
  } catch (const std::exception& e) {
    actual = {e.what()};
    error = true;
  }
  if (disc::options::flag(disc::options::Id::kUpdateIrTests)) {
    update(path, f, actual, error);
    return;
  }
  ASSERT_FALSE(f.expected.empty()) << path << ": no '# CHECK:' or '# ERROR:' lines";
  EXPECT_EQ(error, f.expects_error) << path << (error ? ": unexpected error: " : ": expected an error, got:\n")
                                    << diff({}, actual);
  EXPECT_TRUE(actual == f.expected) << path << " (- expected, + actual):\n" << diff(f.expected, actual);
}

INSTANTIATE_TEST_SUITE_P(
    IrFiles, IrFileTest, ::testing::ValuesIn(ir_files()),
    [](const ::testing::TestParamInfo<fs::path>& info) {
      // "<pass>/<file>.txt" -> "pass_file": gtest names are [A-Za-z0-9_].
      std::string name = info.param.parent_path().filename().string() + "_" + info.param.stem().string();
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return name;
    });
