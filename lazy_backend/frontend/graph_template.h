// A traced graph kept to run again, at other sizes and on other inputs,
// without tracing: the compile-once front end (torch.compile(backend="disc"),
// torch_disc.export). The front end traces a captured FX graph on disc
// tensors once -- the capture is the translation from ATen to our IR -- and
// keeps the graph of its outputs. A call then copies that graph with the
// call's sizes and inputs and runs it through the same compile cache and
// executor as a lazy graph: no dispatcher, no Meta kernels, one hash.
//
// Sizes: the caller ties each dim of the graph (Graph::dims) that is not a
// literal of its size pattern to one of a list of values it computes per
// call (the front end knows them as expressions in the call's input sizes).
#pragma once
#include <ATen/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "lowering/ir/graph.h"

namespace disc {

class GraphTemplate {
 public:
  // What the front end's inputs hold before its trace: data leaves.
  static std::vector<ir::Value> leaves_of(const std::vector<at::Tensor>& inputs);

  // The graph computing `outputs` (disc tensors a trace made) from `inputs`
  // (leaves_of() the disc tensors it started from). Leaves that are no
  // input are constants of the template. The graph is a function of its
  // leaves: what the trace wrote into an input is not kept (the front end
  // runs functional graphs, where an op the capture records as writing an
  // input writes the value it had). Null, with the reason in
  // `why_not`, when an input is no data leaf (a view). Random ops draw
  // their (seed, offset) from the disc generator at each run.
  static std::shared_ptr<GraphTemplate> make(const std::vector<at::Tensor>& outputs,
                                             const std::vector<ir::Value>& inputs, std::string* why_not);

  const ir::Graph& graph() const { return graph_; }
  // Node index and output index of the graph value a disc tensor holds, or
  // (-1, 0) when it is no node of the graph.
  std::pair<int64_t, int64_t> node_of(const at::Tensor& t) const;

  // This template with each dim of a run taken from `sources`: sources[k]
  // indexes the values given to run(), or is -1 for a dim that keeps its
  // traced size (a literal). A copy sharing the nodes, so that runs of the
  // old binding on other threads go on undisturbed.
  std::shared_ptr<GraphTemplate> with_sources(std::vector<int32_t> sources) const;

  // Runs the graph with dims from `values` (set_sources) on CPU tensors
  // `inputs` (one per input of make()); returns the outputs as CPU
  // tensors. An input whose sizes are not the ones the values give is an
  // error naming it.
  std::vector<at::Tensor> run(const std::vector<int64_t>& values, const std::vector<at::Tensor>& inputs) const;

  // The structure hash and dims of the graph traced for `outputs` (the same
  // program at other sizes, to check or narrow the sources against).
  std::pair<uint64_t, std::vector<int64_t>> traced(const std::vector<at::Tensor>& outputs) const;

  // Whether the graph traced for `outputs` from `inputs` (leaves_of) at new sizes is
  // this template at `values`: same structure, attributes, runtime scalars,
  // sizes and inputs. "" when it is, else what differs.
  std::string mismatch(const std::vector<at::Tensor>& outputs, const std::vector<ir::Value>& inputs,
                       const std::vector<int64_t>& values) const;

 private:
  ir::Graph instantiate(const std::vector<int64_t>& values, const std::vector<at::Tensor>& inputs,
                        std::vector<ir::NodePtr>& keep, bool draw) const;
  std::vector<int64_t> dims_at(const std::vector<int64_t>& values) const;

  ir::Graph graph_;
  std::vector<ir::NodePtr> nodes_;     // graph_.nodes, owned: keeps them alive
  std::vector<int32_t> param_input_;  // per graph parameter: its input, or -1 (a constant)
  std::vector<int32_t> sources_;      // per dim: see set_sources
};

}  // namespace disc
