#include "lazy_backend/frontend/graph_template.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/base/python_location.h"
#include "lazy_backend/cache/compile_cache.h"
#include "lazy_backend/device/rng.h"
#include "lazy_backend/device/target.h"
#include "lazy_backend/sync/pending.h"
#include "lazy_backend/sync/sync.h"
#include "lazy_backend/trace/lazy_storage.h"
#include "lazy_backend/trace/tensor_data.h"

namespace disc {

namespace {

// The graph's nodes as owned pointers, in graph order (build_graph keeps
// only raw pointers; a copy's inputs must own theirs).
std::vector<ir::NodePtr> owned_nodes(const ir::Graph& g, const std::vector<ir::Value>& roots) {
  std::unordered_map<const ir::Node*, ir::NodePtr> owner;
  std::vector<ir::NodePtr> stack;
  for (const ir::Value& r : roots) stack.push_back(r.node);
  while (!stack.empty()) {
    ir::NodePtr n = std::move(stack.back());
    stack.pop_back();
    if (!owner.emplace(n.get(), n).second) continue;
    for (const ir::Value& v : n->inputs) stack.push_back(v.node);
  }
  std::vector<ir::NodePtr> nodes;
  nodes.reserve(g.nodes.size());
  for (const ir::GraphNode& gn : g.nodes) nodes.push_back(owner.at(gn.node));
  return nodes;
}

// A copy of `n` reading `inputs`; sizes and symbolic attributes are set by
// the caller.
ir::NodePtr copy_node(const ir::Node& n, std::vector<ir::Value> inputs) {
  auto c = std::make_shared<ir::Node>();
  c->op = n.op;
  c->inputs = std::move(inputs);
  c->operands = n.operands;
  c->attrs = n.attrs;
  c->runtime = n.runtime;
  c->outputs = n.outputs;
  c->num_returns = n.num_returns;
  c->mutated = n.mutated;
  c->rng_runtime = n.rng_runtime;
  c->origin = n.origin;
  c->local_hash = n.local_hash;
  return c;
}

std::string sizes_text(c10::IntArrayRef s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// A node's runtime scalars but the (seed, offset) of a random op, which
// each run draws anew.
std::vector<ir::Attr> runtime_scalars(const ir::Node& n) {
  std::vector<ir::Attr> scalars = n.runtime;
  if (n.rng_runtime >= 0) scalars.erase(scalars.begin() + n.rng_runtime, scalars.begin() + n.rng_runtime + 2);
  return scalars;
}

// The first node where graph `a` (traced) and `b` (the template's copy)
// differ, said for a person.
std::string structure_difference(const ir::Graph& a, const ir::Graph& b) {
  for (size_t i = 0; i < std::min(a.nodes.size(), b.nodes.size()); ++i) {
    const ir::Node& x = *a.nodes[i].node;
    const ir::Node& y = *b.nodes[i].node;
    if (x.local_hash != y.local_hash || !(a.nodes[i].inputs == b.nodes[i].inputs))
      return "node %" + std::to_string(i) + " traced as " + x.to_string() + ", the template has " + y.to_string();
  }
  return "the traced graph has " + std::to_string(a.nodes.size()) + " nodes, the template " +
         std::to_string(b.nodes.size());
}

}  // namespace

std::vector<ir::Value> GraphTemplate::leaves_of(const std::vector<at::Tensor>& inputs) {
  std::vector<ir::Value> leaves;
  for (const at::Tensor& t : inputs) leaves.push_back(read_value(t));
  return leaves;
}

std::shared_ptr<GraphTemplate> GraphTemplate::make(const std::vector<at::Tensor>& outputs,
                                                   const std::vector<ir::Value>& inputs,
                                                   std::string* why_not) {
  TraceLock lock;
  auto t = std::shared_ptr<GraphTemplate>(new GraphTemplate());
  std::unordered_map<const ir::Node*, int32_t> input_of;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ir::Value& v = inputs[k];
    if (!v.node->is_data() || v.index != 0) {
      *why_not = "input " + std::to_string(k) + " is a view";
      return nullptr;
    }
    input_of.emplace(v.node.get(), static_cast<int32_t>(k));
  }
  std::vector<ir::Value> roots;
  for (const at::Tensor& o : outputs) roots.push_back(read_value(o));
  t->graph_ = ir::build_graph(roots);
  t->nodes_ = owned_nodes(t->graph_, roots);
  for (const ir::GraphNode& gn : t->graph_.nodes) {
    if (gn.param < 0) continue;
    auto it = input_of.find(gn.node);
    t->param_input_.push_back(it == input_of.end() ? -1 : it->second);
  }
  t->sources_.assign(t->graph_.dims.size(), -1);
  return t;
}

std::pair<int64_t, int64_t> GraphTemplate::node_of(const at::Tensor& t) const {
  const ir::Value v = read_value(t);
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i] == v.node) return {static_cast<int64_t>(i), v.index};
  return {-1, 0};
}

std::shared_ptr<GraphTemplate> GraphTemplate::with_sources(std::vector<int32_t> sources) const {
  TORCH_CHECK(sources.size() == graph_.dims.size(), "disc: a graph of ", graph_.dims.size(),
              " dims was given ", sources.size(), " sources");
  auto t = std::make_shared<GraphTemplate>(*this);
  t->sources_ = std::move(sources);
  return t;
}

std::vector<int64_t> GraphTemplate::dims_at(const std::vector<int64_t>& values) const {
  std::vector<int64_t> dims(graph_.dims.size());
  for (size_t k = 0; k < dims.size(); ++k) {
    const int32_t s = sources_[k];
    TORCH_CHECK(s < static_cast<int32_t>(values.size()), "disc: dim ", k, " of a compiled graph reads size ",
                s, " of ", values.size());
    dims[k] = s >= 0 ? values[s] : graph_.dims[k];
  }
  return dims;
}

ir::Graph GraphTemplate::instantiate(const std::vector<int64_t>& values,
                                     const std::vector<at::Tensor>& inputs,
                                     std::vector<ir::NodePtr>& keep, bool draw) const {
  const std::vector<int64_t> dims = dims_at(values);
  ir::Graph g;
  g.nodes.reserve(graph_.nodes.size());
  keep.reserve(graph_.nodes.size());
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const ir::GraphNode& tn = graph_.nodes[i];
    if (tn.param >= 0) {
      const int32_t in = param_input_[tn.param];
      TORCH_CHECK(in < 0 || in < static_cast<int32_t>(inputs.size()), "disc: a compiled graph of ",
                  param_input_.size(), " inputs was given ", inputs.size());
      keep.push_back(in < 0 ? nodes_[i] : make_data(on_target(inputs[in])).node);
    } else {
      std::vector<ir::Value> ins;
      ins.reserve(tn.inputs.size());
      for (const ir::GraphRef& r : tn.inputs) ins.push_back({keep[r.node], r.index});
      keep.push_back(copy_node(*tn.node, std::move(ins)));
      // A random op draws from the generator at each call, as its trace would.
      if (ir::Node& n = *keep.back(); draw && n.rng_runtime >= 0) {
        const auto [seed, offset] = next_random_draw();
        n.runtime[n.rng_runtime].i = static_cast<int64_t>(seed);
        n.runtime[n.rng_runtime + 1].i = static_cast<int64_t>(offset);
      }
    }
    g.nodes.push_back({keep.back().get(), tn.inputs, tn.param});
  }
  size_t k = 0;
  ir::for_each_dim(graph_, [&](const ir::DimSite& s, int64_t) {
    const int64_t size = dims[k++];
    ir::Node& n = *keep[s.node];
    const int32_t param = graph_.nodes[s.node].param;
    if (param >= 0) {  // an input or a constant: its size is a check, not a setting
      TORCH_CHECK(n.outputs[0].sizes[s.pos] == size, "disc: input ", param_input_[param],
                  " of the compiled graph has sizes ", sizes_text(n.outputs[0].sizes),
                  ", but its dim ", s.pos, " must be ", size, " here");
    } else if (s.is_attr) {
      ir::Attr& a = n.attrs[s.which];
      (a.kind == ir::Attr::Kind::kIntList ? a.ints[s.pos] : a.i) = size;
    } else {
      n.outputs[s.which].sizes[s.pos] = size;
    }
  });
  g.params = graph_.params;
  g.outputs = graph_.outputs;
  g.read_only_params.assign(g.params.size(), 1);  // the caller's tensors, and constants
  ir::hash_graph(g);
  return g;
}

std::vector<at::Tensor> GraphTemplate::run(const std::vector<int64_t>& values,
                                           const std::vector<at::Tensor>& inputs) const {
  std::vector<ir::NodePtr> keep;
  ir::Graph g;
  std::shared_ptr<Executable> exe;
  {
    metrics::ScopedTimer t(metrics::counters().hash_ns);
    g = instantiate(values, inputs, keep, /*draw=*/true);
  }
  const int64_t misses = metrics::counters().cache_misses;
  {
    TraceLock lock;  // the compile cache is the sync's
    exe = lookup_or_compile(g);
  }
  // Say which line compiled it (the location takes the GIL: after the lock).
  if (metrics::counters().cache_misses > misses) compile_cache().locate_last(python_location());
  static metrics::Named runs("template.runs");
  ++runs;
  metrics::counters().graphs_run++;
  metrics::counters().graph_nodes += static_cast<int64_t>(g.nodes.size());
  std::vector<at::Tensor> out;
  {
    metrics::ScopedTimer t(metrics::counters().execute_ns);
    out = exe->run(g, nullptr, nullptr);
  }
  // An output that is an input or a constant (or a view of one) is handed
  // out as a copy: the caller may write it.
  for (at::Tensor& o : out) {
    for (uint32_t p : g.params) {
      const at::Tensor* held = data_of(*g.nodes[p].node);
      if (o.defined() && held && o.storage().is_alias_of(held->storage())) {
        o = o.clone();
        break;
      }
    }
    if (o.defined() && !o.is_cpu()) o = o.cpu();  // the CUDA target's (device/target.h)
  }
  return out;
}

std::pair<uint64_t, std::vector<int64_t>> GraphTemplate::traced(const std::vector<at::Tensor>& outputs) const {
  TraceLock lock;
  std::vector<ir::Value> roots;
  for (const at::Tensor& o : outputs) roots.push_back(read_value(o));
  ir::Graph g = ir::build_graph(roots);
  return {g.structure_hash, std::move(g.dims)};
}

std::string GraphTemplate::mismatch(const std::vector<at::Tensor>& outputs,
                                    const std::vector<ir::Value>& inputs,
                                    const std::vector<int64_t>& values) const {
  TraceLock lock;
  std::vector<ir::Value> roots;
  for (const at::Tensor& o : outputs) roots.push_back(read_value(o));
  const ir::Graph traced = ir::build_graph(roots);
  std::vector<at::Tensor> cpu_inputs;
  for (const ir::Value& v : inputs) {
    if (!v.node->is_data()) return "an input is a view";
    cpu_inputs.push_back(*data_of(*v.node));
  }
  std::vector<ir::NodePtr> keep;
  const ir::Graph mine = instantiate(values, cpu_inputs, keep, /*draw=*/false);
  if (traced.structure_hash != mine.structure_hash) return structure_difference(traced, mine);
  if (traced.dims != mine.dims) {
    for (size_t k = 0; k < mine.dims.size(); ++k)
      if (traced.dims[k] != mine.dims[k])
        return "size " + std::to_string(mine.dims[k]) + " instead of " + std::to_string(traced.dims[k]) +
               " at " + traced.site(k).to_string(traced);
  }
  for (size_t i = 0; i < traced.nodes.size(); ++i) {
    const ir::Node& a = *traced.nodes[i].node;
    if (!(runtime_scalars(a) == runtime_scalars(*mine.nodes[i].node)))
      return "the runtime scalars of %" + std::to_string(i) + " (" + ir::op_name(a.op) + ") differ";
    if (traced.nodes[i].param < 0) continue;
    const int32_t in = param_input_[traced.nodes[i].param];
    const at::Tensor* was = data_of(*nodes_[i]);
    const at::Tensor* now = data_of(a);
    // A constant is the same tensor (a weight), or one of equal value that
    // the trace made again (a scalar operand).
    const bool same = in >= 0 ? now->is_same(cpu_inputs[in])
                              : was && now && (was->is_same(*now) || (was->dtype() == now->dtype() &&
                                                                      was->sizes() == now->sizes() &&
                                                                      was->equal(*now)));
    if (!same) return "parameter " + std::to_string(traced.nodes[i].param) + " is another tensor";
  }
  return "";
}

}  // namespace disc
