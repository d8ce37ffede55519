// The pipeline: pass order, timings per pass, and IR dumps.
#include <gtest/gtest.h>

#include <filesystem>

#include "graph_builder.h"
#include "lowering/passes/pipeline.h"
#include "runtime/options.h"

using namespace disc;
using disc::testing::GraphBuilder;

TEST(Pipeline, PassesRunInTheDocumentedOrder) {
  EXPECT_EQ(lowering::pass_names(),
            (std::vector<std::string>{"verify", "fold", "canonicalize", "shape-constraints", "attention-pattern",
                                      "library-epilogue", "gemm-merge", "fusion-plan", "verify-plan",
                                      "kernels", "layout-plan", "library-calls", "schedule",
                                      "buffer-plan", "publish-plan", "codegen"}));
}

TEST(Pipeline, TimesEveryPassAndDumpsIrWhenAsked) {
  auto dir = std::filesystem::temp_directory_path() / "disc_dump_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  options::set(options::Id::kDumpIr, dir.string());
  GraphBuilder b;
  auto x = b.param({4});
  auto r = lowering::compile(ir::build_graph({b.op("aten::relu", {x}, {4})}));
  options::reset(options::Id::kDumpIr);
  EXPECT_EQ(r.timings.size(), lowering::pass_names().size());
  size_t files = 0;
  for (auto& f : std::filesystem::directory_iterator(dir)) files += f.is_regular_file();
  EXPECT_EQ(files, 1 + lowering::pass_names().size());  // the input graph + one per pass
}

TEST(Pipeline, NamedPassesRunInPipelineOrderWhateverTheOrderGiven) {
  GraphBuilder b;
  auto x = b.param({4, 8});
  auto g = ir::build_graph({b.op("aten::relu", {b.op("aten::exp", {x}, {4, 8})}, {4, 8})});
  lowering::Program p = lowering::make_program(g);
  lowering::run_passes(p, {"fusion-plan", "shape-constraints"});  // shapes first all the same
  EXPECT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(lowering::passes_until("canonicalize"),
            (std::vector<std::string>{"verify", "fold", "canonicalize"}));
  EXPECT_THROW(lowering::passes_until("cse"), std::invalid_argument);
  lowering::Program q = lowering::make_program(g);
  try {
    lowering::run_passes(q, {"fusion-plan"});
    FAIL() << "fusion-plan ran without symbolic dims";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("needs the symbolic dims of shape-constraints"), std::string::npos);
  }
}
