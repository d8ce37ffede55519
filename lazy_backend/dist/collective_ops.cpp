#include "lazy_backend/dist/collective_ops.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

#include "lazy_backend/base/metrics.h"
#include "lazy_backend/dist/groups.h"
#include "runtime/options.h"

namespace disc::dist {

namespace {

using at::Tensor;
using std::optional;
using RedOp = c10d::ReduceOp::RedOpType;

enum class Kind : int64_t {
  kAllReduce = 1, kBroadcast, kAllGather, kReduceScatter, kScatter, kGather, kAllToAll
};

const char* kind_name(int64_t k) {
  switch (static_cast<Kind>(k)) {
    case Kind::kAllReduce: return "all_reduce";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kAllGather: return "all_gather";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kScatter: return "scatter";
    case Kind::kGather: return "gather";
    case Kind::kAllToAll: return "all_to_all";
  }
  return "an unknown collective";
}

bool has_root(int64_t k) {
  const Kind kind = static_cast<Kind>(k);
  return kind == Kind::kBroadcast || kind == Kind::kScatter || kind == Kind::kGather;
}

const char* reduce_op_name(int64_t op) {
  switch (static_cast<RedOp>(op)) {
    case RedOp::SUM: return "sum";
    case RedOp::AVG: return "avg";
    case RedOp::PRODUCT: return "product";
    case RedOp::MIN: return "min";
    case RedOp::MAX: return "max";
    case RedOp::BAND: return "band";
    case RedOp::BOR: return "bor";
    case RedOp::BXOR: return "bxor";
    default: return "an unsupported operator";
  }
}

// One rank's account of a collective: [number on the group, kind, elements,
// dtype, reduce operator or root].
std::string describe(const int64_t* s) {
  const bool reduces = s[1] == static_cast<int64_t>(Kind::kAllReduce) ||
                       s[1] == static_cast<int64_t>(Kind::kReduceScatter);
  const std::string arg = has_root(s[1]) ? "root " + std::to_string(s[4])
                          : reduces      ? std::string(reduce_op_name(s[4]))
                                         : std::string("");
  return std::string(kind_name(s[1])) + (arg.empty() ? "" : " (" + arg + ")") + " of " +
         std::to_string(s[2]) + " " +
         std::string(c10::toString(static_cast<at::ScalarType>(s[3]))) + " elements as collective #" +
         std::to_string(s[0]);
}

// Waits for the transport's work; its error names the collective.
void finish(const c10::intrusive_ptr<c10d::Work>& work, const char* what, const Group& g) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "disc: ", what, " on a process group of ", g.size, " ranks failed on rank ",
                g.rank, ": ", e.what());
  }
}

// Every rank says what it is about to run; a rank that runs something else
// (another branch, a skipped step) fails on every rank, naming both,
// instead of leaving the others waiting in a collective that never comes.
void agree(Group& g, Kind kind, const Tensor& t, int64_t arg) {
  const int64_t number = g.ran.fetch_add(1);
  if (!options::flag(options::Id::kDistCheck)) return;
  static metrics::Named checks("dist.checks");
  ++checks;
  Tensor mine = at::tensor({number, static_cast<int64_t>(kind), t.numel(),
                            static_cast<int64_t>(t.scalar_type()), arg},
                           at::kLong);
  std::vector<Tensor> in{mine};
  std::vector<std::vector<Tensor>> out(1);
  for (int r = 0; r < g.size; ++r) out[0].push_back(at::empty_like(mine));
  const std::string what = std::string(kind_name(static_cast<int64_t>(kind))) +
                           " (comparing what every rank runs first)";
  finish(g.transport->allgather(out, in), what.c_str(), g);
  for (int r = 0; r < g.size; ++r) {
    if (at::equal(out[0][r], mine)) continue;
    TORCH_CHECK(false, "disc: ranks disagree on the collectives of a process group: rank ", g.rank,
                " runs ", describe(mine.data_ptr<int64_t>()), ", rank ", r, " runs ",
                describe(out[0][r].data_ptr<int64_t>()),
                ". Every rank must call the same collectives, with the same sizes, in the same order.");
  }
}

c10d::ReduceOp reduce_op(int64_t op) { return c10d::ReduceOp(static_cast<RedOp>(op)); }

// CPU kernels: what the executors run.

// The transport works on dense buffers: `self` itself when it is one (a
// DDP bucket), else a dense copy written back after.
template <class Run>
Tensor& in_place(Tensor& self, Run&& run) {
  std::vector<Tensor> ts{self.is_contiguous() ? self : self.contiguous()};
  run(ts);
  if (!ts[0].is_same(self)) self.copy_(ts[0]);
  return self;
}

Tensor& all_reduce_cpu(Tensor& self, const optional<Tensor>&, int64_t op, int64_t id) {
  std::shared_ptr<Group> g = find_group(id);
  agree(*g, Kind::kAllReduce, self, op);
  return in_place(self, [&](std::vector<Tensor>& ts) {
    c10d::AllreduceOptions o;
    o.reduceOp = reduce_op(op);
    finish(g->transport->allreduce(ts, o), "all_reduce", *g);
  });
}

Tensor& broadcast_cpu(Tensor& self, const optional<Tensor>&, int64_t root, int64_t id) {
  std::shared_ptr<Group> g = find_group(id);
  agree(*g, Kind::kBroadcast, self, root);
  return in_place(self, [&](std::vector<Tensor>& ts) {
    c10d::BroadcastOptions o;
    o.rootRank = root;
    finish(g->transport->broadcast(ts, o), "broadcast", *g);
  });
}

std::vector<int64_t> gathered_sizes(const Tensor& input, int64_t size) {
  std::vector<int64_t> sizes = input.sizes().vec();
  if (sizes.empty()) sizes.push_back(1);
  sizes[0] *= size;
  return sizes;
}

Tensor all_gather_cpu(const Tensor& input, const optional<Tensor>&, int64_t id) {
  std::shared_ptr<Group> g = find_group(id);
  agree(*g, Kind::kAllGather, input, 0);
  Tensor out = at::empty(gathered_sizes(input, g->size), input.options());
  Tensor in = input.contiguous();
  std::vector<Tensor> ins{in};
  std::vector<std::vector<Tensor>> outs(1);
  for (Tensor& chunk : out.reshape({g->size, -1}).unbind(0)) outs[0].push_back(chunk.view(in.sizes()));
  finish(g->transport->allgather(outs, ins), "all_gather", *g);
  return out;
}

Tensor reduce_scatter_cpu(const Tensor& input, const optional<Tensor>&, int64_t op, int64_t id) {
  std::shared_ptr<Group> g = find_group(id);
  agree(*g, Kind::kReduceScatter, input, op);
  // Gloo has no reduce-scatter of its own: the sum over all ranks, then
  // this rank's share.
  std::vector<Tensor> ts{input.clone(at::MemoryFormat::Contiguous)};
  c10d::AllreduceOptions o;
  o.reduceOp = reduce_op(op);
  finish(g->transport->allreduce(ts, o), "reduce_scatter", *g);
  const int64_t share = input.size(0) / g->size;
  return ts[0].narrow(0, g->rank * share, share).clone();
}

// Row r of `input` ([size, ...], read on the root only) to rank r.
Tensor scatter_cpu(const Tensor& input, const optional<Tensor>&, int64_t root, int64_t id) {
  std::shared_ptr<Group> g = find_group(id);
  agree(*g, Kind::kScatter, input, root);
  std::vector<Tensor> outs{at::empty(input.sizes().slice(1), input.options())};
  std::vector<std::vector<Tensor>> ins;
  if (g->rank == root) ins.push_back(input.contiguous().unbind(0));
  c10d::ScatterOptions o;
  o.rootRank = root;
  finish(g->transport->scatter(outs, ins, o), "scatter", *g);
  return outs[0];
}

// Every rank's `input` as the rows of [size, ...] on the root; zeros elsewhere.
Tensor gather_cpu(const Tensor& input, const optional<Tensor>&, int64_t root, int64_t id) {
  std::shared_ptr<Group> g = find_group(id);
  agree(*g, Kind::kGather, input, root);
  Tensor out = at::zeros(gathered_sizes(input, g->size), input.options());
  Tensor in = input.contiguous();
  std::vector<Tensor> ins{in};
  std::vector<std::vector<Tensor>> outs;
  if (g->rank == root) {
    outs.emplace_back();
    for (Tensor& row : out.reshape({g->size, -1}).unbind(0)) outs[0].push_back(row.view(in.sizes()));
  }
  c10d::GatherOptions o;
  o.rootRank = root;
  finish(g->transport->gather(outs, ins, o), "gather", *g);
  return out;
}

// Block r of dim 0 to rank r; block r of the result from rank r.
Tensor all_to_all_cpu(const Tensor& input, const optional<Tensor>&, int64_t id) {
  std::shared_ptr<Group> g = find_group(id);
  agree(*g, Kind::kAllToAll, input, 0);
  Tensor in = input.contiguous();
  Tensor out = at::empty_like(in);
  std::vector<int64_t> even;  // empty splits: dim 0 in equal blocks
  finish(g->transport->alltoall_base(out, in, even, even), "all_to_all", *g);
  return out;
}

// Meta kernels: the shapes the trace records.

Tensor& self_meta(Tensor& self, const optional<Tensor>&, int64_t, int64_t) { return self; }

Tensor all_gather_meta(const Tensor& input, const optional<Tensor>&, int64_t id) {
  return at::empty(gathered_sizes(input, find_group(id)->size), input.options());
}

Tensor reduce_scatter_meta(const Tensor& input, const optional<Tensor>&, int64_t, int64_t id) {
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes[0] /= find_group(id)->size;
  return at::empty(sizes, input.options());
}

Tensor scatter_meta(const Tensor& input, const optional<Tensor>&, int64_t, int64_t) {
  return at::empty(input.sizes().slice(1), input.options());
}

Tensor gather_meta(const Tensor& input, const optional<Tensor>&, int64_t, int64_t id) {
  return all_gather_meta(input, std::nullopt, id);
}

Tensor all_to_all_meta(const Tensor& input, const optional<Tensor>&, int64_t) {
  return at::empty(input.sizes(), input.options());
}

template <class Fn>
c10::TypedOperatorHandle<Fn> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
}

using InPlaceFn = Tensor&(Tensor&, const optional<Tensor>&, int64_t, int64_t);
using ReduceFn = Tensor(const Tensor&, const optional<Tensor>&, int64_t, int64_t);
using GatherFn = Tensor(const Tensor&, const optional<Tensor>&, int64_t);
using RootedFn = Tensor(const Tensor&, const optional<Tensor>&, int64_t, int64_t);

}  // namespace

Tensor& all_reduce_(Tensor& self, const optional<Tensor>& after, int64_t op, int64_t group) {
  static auto h = handle<InPlaceFn>("disc::all_reduce_");
  return h.call(self, after, op, group);
}

Tensor& broadcast_(Tensor& self, const optional<Tensor>& after, int64_t root, int64_t group) {
  static auto h = handle<InPlaceFn>("disc::broadcast_");
  return h.call(self, after, root, group);
}

Tensor all_gather(const Tensor& input, const optional<Tensor>& after, int64_t group) {
  static auto h = handle<GatherFn>("disc::all_gather");
  return h.call(input, after, group);
}

Tensor reduce_scatter(const Tensor& input, const optional<Tensor>& after, int64_t op,
                      int64_t group) {
  static auto h = handle<ReduceFn>("disc::reduce_scatter");
  return h.call(input, after, op, group);
}

Tensor scatter(const Tensor& input, const optional<Tensor>& after, int64_t root, int64_t group) {
  static auto h = handle<RootedFn>("disc::scatter");
  return h.call(input, after, root, group);
}

Tensor gather(const Tensor& input, const optional<Tensor>& after, int64_t root, int64_t group) {
  static auto h = handle<RootedFn>("disc::gather");
  return h.call(input, after, root, group);
}

Tensor all_to_all(const Tensor& input, const optional<Tensor>& after, int64_t group) {
  static auto h = handle<GatherFn>("disc::all_to_all");
  return h.call(input, after, group);
}

TORCH_LIBRARY_FRAGMENT(disc, m) {
  m.def("all_reduce_(Tensor(a!) self, Tensor? after, int reduce_op, int group) -> Tensor(a!)");
  m.def("broadcast_(Tensor(a!) self, Tensor? after, int root, int group) -> Tensor(a!)");
  m.def("all_gather(Tensor input, Tensor? after, int group) -> Tensor");
  m.def("reduce_scatter(Tensor input, Tensor? after, int reduce_op, int group) -> Tensor");
  m.def("scatter(Tensor input, Tensor? after, int root, int group) -> Tensor");
  m.def("gather(Tensor input, Tensor? after, int root, int group) -> Tensor");
  m.def("all_to_all(Tensor input, Tensor? after, int group) -> Tensor");
}

TORCH_LIBRARY_IMPL(disc, CPU, m) {
  m.impl("all_reduce_", TORCH_FN(all_reduce_cpu));
  m.impl("broadcast_", TORCH_FN(broadcast_cpu));
  m.impl("all_gather", TORCH_FN(all_gather_cpu));
  m.impl("reduce_scatter", TORCH_FN(reduce_scatter_cpu));
  m.impl("scatter", TORCH_FN(scatter_cpu));
  m.impl("gather", TORCH_FN(gather_cpu));
  m.impl("all_to_all", TORCH_FN(all_to_all_cpu));
}

TORCH_LIBRARY_IMPL(disc, Meta, m) {
  m.impl("all_reduce_", TORCH_FN(self_meta));
  m.impl("broadcast_", TORCH_FN(self_meta));
  m.impl("all_gather", TORCH_FN(all_gather_meta));
  m.impl("reduce_scatter", TORCH_FN(reduce_scatter_meta));
  m.impl("scatter", TORCH_FN(scatter_meta));
  m.impl("gather", TORCH_FN(gather_meta));
  m.impl("all_to_all", TORCH_FN(all_to_all_meta));
}

}  // namespace disc::dist
