// The executor interface the sync runs graphs through. The reference
// executor (ATen kernels, node by node) is the correctness oracle; the
// fusion compiler plugs in as another Executor.
#pragma once
#include <ATen/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lowering/ir/graph.h"
#include "lowering/program.h"

namespace disc {

// Told (output index, value) as soon as an output is final -- no later
// step of the run writes it -- so that the host can read a loss while the
// backward and the update after it still run.
using PublishFn = std::function<void(size_t, const at::Tensor&)>;

// What a run that threw leaves behind besides its error.
struct RunFailure {
  // A step had written into a graph parameter's buffer: the inputs are no
  // longer what the graph started from. The plan writes parameters only
  // after the last step that may fail on its data (buffer-plan), so only
  // a failure such as running out of memory in an optimizer update sets it.
  bool inputs_overwritten = false;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Runs `graph`, which has the structure this was compiled from; data comes
  // from its parameter leaves and runtime scalars from its nodes. Returns one
  // CPU tensor per graph output; `publish`, when set, sees each of them as
  // soon as it is final. When it throws, `failure` (if set) says what the
  // run had done.
  virtual std::vector<at::Tensor> run(const ir::Graph& graph, const PublishFn& publish,
                                      RunFailure* failure) = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual const char* name() const = 0;
  // `plan` is the compiler pipeline's result for `graph`, or null when the
  // pipeline failed (then a compiling executor must fall back).
  virtual std::unique_ptr<Executable> compile(const ir::Graph& graph,
                                              const lowering::Program* plan) = 0;
};

Executor& reference_executor();
Executor& compiled_executor();
// Chosen by DISC_EXECUTOR: "compiled" (default) or "reference".
Executor& active_executor();
// Switches executors (tests comparing the two). Graphs already compiled
// keep their executor: clear the compile cache as well.
void set_active_executor(const std::string& name);

// Tests of the fallback paths: true when DISC_INJECT_FAULT names `stage`
// ("pipeline": the compiler pipeline throws; "codegen": building the
// compiled executable throws). Read at every compile, so a test can set it.
bool fault_injected(const char* stage);

}  // namespace disc
