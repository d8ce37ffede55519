// buffer-plan: a value is released after the step that reads it last (never
// a graph output); an in-place op may write an input it reads last and
// once; a loads-before-stores kernel may write into inputs it reads last.
#include <gtest/gtest.h>

#include "graph_builder.h"

using namespace disc;
using namespace disc::lowering;
using disc::testing::compiled;
using disc::testing::GraphBuilder;
using disc::testing::index_of;

namespace {

// The step whose op (or kernel's first op) is `op`.
const Step& step_running(const Program& p, uint32_t op) {
  for (const Step& s : p.plan.steps)
    if (s.op == op) return s;
  ADD_FAILURE() << "no step runs %" << op;
  return p.plan.steps.front();
}

bool releases(const Step& s, uint32_t op) {
  for (const ir::GraphRef& r : s.release)
    if (r.node == op) return true;
  return false;
}

}  // namespace

TEST(BufferPlan, AValueIsReleasedAfterItsLastReaderAndOutputsNever) {
  GraphBuilder b;
  auto x = b.param({8, 16}), w = b.param({16, 16});
  auto h = b.op("aten::mm", {x, w}, {8, 16});
  auto y = b.op("aten::mm", {h, w}, {8, 16});
  Program p = compiled({y});
  EXPECT_TRUE(releases(step_running(p, index_of(p, y)), index_of(p, h)));
  EXPECT_TRUE(releases(step_running(p, index_of(p, y)), index_of(p, w)));  // read by both, last here
  EXPECT_FALSE(releases(step_running(p, index_of(p, h)), index_of(p, w)));
  for (const Step& s : p.plan.steps) EXPECT_FALSE(releases(s, index_of(p, y)));
}

TEST(BufferPlan, AnInPlaceUpdateWritesAnInputItReadsLast) {
  // param.add_(grad): the parameter's buffer takes the update.
  GraphBuilder b;
  auto param = b.param({16}), grad = b.param({16});
  auto upd = b.op_mutating("aten::add_.Tensor", {param, grad}, 0, {16}, {GraphBuilder::scalar(1)});
  Program p = compiled({upd});
  EXPECT_EQ(step_running(p, index_of(p, upd)).last_read, std::vector<bool>{true});
}

TEST(BufferPlan, AnInputReadAfterTheUpdateIsNotWrittenInPlace) {
  GraphBuilder b;
  auto param = b.param({16}), grad = b.param({16});
  auto upd = b.op_mutating("aten::add_.Tensor", {param, grad}, 0, {16}, {GraphBuilder::scalar(1)});
  Program p = compiled({upd, param});  // the old value is returned too
  EXPECT_TRUE(step_running(p, index_of(p, upd)).last_read.empty());
}

TEST(BufferPlan, ALoopKernelMayWriteIntoInputsItReadsLast) {
  // An SGD update: w - g * lr, w and g read by nothing else.
  GraphBuilder b;
  auto w = b.param({64}), g = b.param({64}), lr = b.param({64}), keep = b.param({64});
  auto scaled = b.op("aten::mul.Tensor", {g, lr}, {64});
  auto updated = b.op("aten::sub.Tensor", {w, scaled}, {64}, {GraphBuilder::scalar(1)});
  auto other = b.op("aten::add.Tensor", {keep, updated}, {64}, {GraphBuilder::scalar(1)});
  Program p = compiled({other, keep, lr});
  ASSERT_EQ(p.plan.kernels.size(), 1u);
  const Step& s = step_running(p, index_of(p, scaled));
  ASSERT_EQ(s.kind, Step::Kind::kKernel);
  const KernelInterface& k = p.plan.kernels[s.kernel];
  ASSERT_EQ(s.last_read.size(), k.inputs.size());
  for (size_t i = 0; i < k.inputs.size(); ++i) {  // graph outputs are not reusable
    const uint32_t in = k.inputs[i].node;
    EXPECT_EQ(s.last_read[i], in != index_of(p, keep) && in != index_of(p, lr)) << i;
  }
}

TEST(BufferPlan, NoParameterIsWrittenBeforeTheLastStepThatMayFailOnItsData) {
  // An SGD update of w that does not depend on an index op scheduled after
  // it: the update must not take w's buffer, or a bad index would leave w
  // updated after the graph failed. Traced the other way round, it may.
  for (const bool index_first : {false, true}) {
    GraphBuilder b;
    auto w = b.param({64}), g = b.param({64}), table = b.param({10}), ids = b.param({4});
    auto rows = b.op("aten::index_select", {table, ids}, {4});
    auto upd = b.op_mutating("aten::add_.Tensor", {w, g}, 0, {64}, {GraphBuilder::scalar(1)});
    Program p = compiled(index_first ? std::vector{rows, upd} : std::vector{upd, rows});
    const Step& update = step_running(p, index_of(p, upd));
    EXPECT_EQ(&update < &step_running(p, index_of(p, rows)), !index_first);
    EXPECT_EQ(update.last_read.empty(), !index_first) << index_first;
  }
}
