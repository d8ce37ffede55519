// Reading a value that a few ops compute without waiting for the step's
// graph (read_alone, launch.h).
#include <unordered_set>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/sync/launch.h"
#include "lazy_backend/sync/launches.h"
#include "lazy_backend/trace/node_builder.h"
#include "lazy_backend/trace/tensor_data.h"
#include "lowering/ops.h"

namespace disc {

namespace {

constexpr size_t kMaxOpsReadAlone = 64;  // a conv stack's output-length formula
constexpr int64_t kMaxElementsReadAlone = int64_t{1} << 16;

// Whether at most `max_ops` ops compute `v`: a walk that stops as soon as
// it meets one more, so reading a large pending trace (a loss read before
// the optimizer step) looks at a few nodes here before it syncs, instead
// of building its whole graph twice.
bool at_most_ops(const ir::Value& v, size_t max_ops) {
  std::unordered_set<const ir::Node*> seen{v.node.get()};
  std::vector<const ir::Node*> work{v.node.get()};
  size_t ops = 0;
  while (!work.empty()) {
    const ir::Node* n = work.back();
    work.pop_back();
    if (n->is_data()) continue;
    if (++ops > max_ops) return false;
    for (const ir::Value& in : n->inputs)
      if (seen.insert(in.node.get()).second) work.push_back(in.node.get());
  }
  return true;
}

// Whether node `n` writes one of the graph's inputs. Writing a buffer the
// graph made itself (ones_like: a fill_ of a fresh tensor) changes nothing
// outside it.
bool writes_an_input(const ir::Graph& g, const ir::GraphNode& n) {
  for (uint32_t m : n.node->mutated)
    if (g.nodes[n.inputs[m].node].param >= 0) return true;
  return false;
}

// Whether graph `g`, a few ops (at_most_ops), may run on its own, now, on
// the reading thread: its tensors are small (computing them again in the
// next sync's graph costs nothing worth counting; a model's forward, read
// before its backward, is not that), no op writes an input, draws random
// numbers or exchanges data with other processes (which expect it once),
// and all of its inputs are delivered and none is one that a graph in
// flight may update in place (an input it only reads, such as a batch
// every step reads, is no obstacle).
bool computable_alone(const ir::Graph& g) {
  std::unordered_set<const ir::Node*> inputs;
  for (const ir::GraphNode& n : g.nodes) {
    for (const ir::TensorType& t : n.node->outputs)
      if (t.numel() > kMaxElementsReadAlone) return false;
    if (n.param >= 0) {
      const TensorData* d = payload_of(*n.node);
      if (!d || !d->ready()) return false;
      inputs.insert(n.node);
    } else if (writes_an_input(g, n) || n.node->rng_runtime >= 0 ||
               lowering::is_collective(n.node->op)) {
      return false;
    }
  }
  for (const auto& l : in_flight()) {
    const ir::Graph& running = l->graph;
    for (size_t k = 0; k < running.params.size(); ++k) {
      const bool read_only = running.read_only_params.empty() || running.read_only_params[k];
      if (!read_only && inputs.count(running.nodes[running.params[k]].node)) return false;
    }
  }
  return true;
}

}  // namespace

bool read_alone(LazyStorage& s, const std::string& cause) {
  TraceLock lock;
  if (!s.pending() || !at_most_ops(s.value(), kMaxOpsReadAlone)) return false;
  const ir::Graph g = ir::build_graph({s.value()});
  if (!computable_alone(g)) return false;
  // Every pending buffer whose value this graph computes anyway (the other
  // results of a layer norm's backward, the mask a model reads later) gets
  // it too: read one by one, each would compute the graph again.
  std::unordered_set<const ir::Node*> computed;
  for (const ir::GraphNode& n : g.nodes) computed.insert(n.node);
  std::vector<LazyStorage*> storages{&s};
  std::vector<ir::Value> roots{s.value()};
  bool rest_pending = false;
  for (LazyStorage* o : live_storages()) {
    if (o == &s || !o->pending()) continue;
    if (!computed.count(o->value().node.get())) {
      rest_pending = true;
      continue;
    }
    storages.push_back(o);
    roots.push_back(o->value());
  }
  if (!rest_pending) return false;  // a sync computes the same graph
  std::vector<at::Tensor> values;
  try {
    values = run_now(roots);
  } catch (...) {
    return false;  // the sync fails as it would have, and recovers the step
  }
  for (size_t k = 0; k < storages.size(); ++k) storages[k]->bind(make_data(std::move(values[k])));
  metrics::bump("read_alone." + cause);
  return true;
}

}  // namespace disc
