// The reference executor: replays each node with the ATen kernel of the op
// it recorded (CPU, or CUDA on the CUDA target). Values are immutable: ops that write in place run on a
// clone of their input, so one value can feed any number of users.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/exec/executor.h"
#include "lazy_backend/exec/replay.h"
#include "runtime/options.h"

namespace disc {

namespace {

class ReferenceExecutable final : public Executable {
 public:
  explicit ReferenceExecutable(const ir::Graph& g) : outputs_of_(g.nodes.size()) {
    ops_.reserve(g.nodes.size());
    for (const ir::GraphNode& gn : g.nodes)
      ops_.push_back(gn.param >= 0 ? std::nullopt : std::optional(resolve_op(gn.node->op)));
    for (size_t k = 0; k < g.outputs.size(); ++k) outputs_of_[g.outputs[k].node].push_back(k);
  }

  // Inputs are cloned before an op writes them: a failed run leaves them as
  // they were (RunFailure stays clear).
  std::vector<at::Tensor> run(const ir::Graph& g, const PublishFn& publish, RunFailure*) override {
    std::vector<std::vector<at::Tensor>> values(g.nodes.size());
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      const ir::GraphNode& gn = g.nodes[k];
      if (gn.param >= 0) {
        values[k] = {param_tensor(*gn.node)};
      } else {
        std::vector<at::Tensor> ins;
        ins.reserve(gn.inputs.size());
        for (const ir::GraphRef& r : gn.inputs) ins.push_back(values[r.node][r.index]);
        try {
          values[k] = replay(*ops_[k], *gn.node, std::move(ins));
        } catch (...) {
          rethrow_naming(*gn.node);
        }
      }
      // Inputs are cloned before an op writes them, so a value is final as
      // soon as its node has run.
      if (publish)
        for (size_t o : outputs_of_[k]) publish(o, values[k][g.outputs[o].index]);
    }
    metrics::bump("kernels_launched", static_cast<int64_t>(g.num_ops()));
    std::vector<at::Tensor> out;
    out.reserve(g.outputs.size());
    for (const ir::GraphRef& r : g.outputs) out.push_back(values[r.node][r.index]);
    return out;
  }

 private:
  std::vector<std::optional<c10::OperatorHandle>> ops_;
  std::vector<std::vector<size_t>> outputs_of_;  // per node: the graph outputs it makes
};

class ReferenceExecutor final : public Executor {
 public:
  const char* name() const override { return "reference"; }
  std::unique_ptr<Executable> compile(const ir::Graph& g, const lowering::Program*) override {
    return std::make_unique<ReferenceExecutable>(g);
  }
};

}  // namespace

Executor& reference_executor() {
  static ReferenceExecutor e;
  return e;
}

Executor& active_executor() {
  // The index of DISC_EXECUTOR's value in "compiled|reference".
  return options::choice(options::Id::kExecutor) == 1 ? reference_executor() : compiled_executor();
}

void set_active_executor(const std::string& name) { options::set(options::Id::kExecutor, name); }

bool fault_injected(const char* stage) { return options::text(options::Id::kInjectFault) == stage; }

}  // namespace disc
