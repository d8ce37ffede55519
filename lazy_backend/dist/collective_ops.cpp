#include "lazy_backend/dist/collective_ops.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
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
// dtype, reduce operator or root, rank of its shape, up to kDims dims (more
// are folded into the last)]. Element counts alone would let one rank send
// a [16, 32] block where another expects [32, 16]. An all_to_all accounts
// for one row of dim 0 (its trailing dims), since the rows each rank sends
// differ.
constexpr int64_t kDims = 8;
constexpr int64_t kShapeAt = 5;
constexpr int64_t kAccount = kShapeAt + 1 + kDims;

void put_shape(at::IntArrayRef sizes, int64_t* field) {
  field[0] = static_cast<int64_t>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    const size_t at = std::min<size_t>(d, kDims - 1);
    field[1 + at] = d < kDims ? sizes[d] : field[1 + at] * sizes[d];
  }
}

std::string shape_of(const int64_t* field) {
  std::string s = "[";
  const int64_t rank = std::min(field[0], kDims);
  for (int64_t d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(field[1 + d]);
  return s + (field[0] > kDims ? ", ...]" : "]");
}

std::string describe(const int64_t* s) {
  const bool reduces = s[1] == static_cast<int64_t>(Kind::kAllReduce) ||
                       s[1] == static_cast<int64_t>(Kind::kReduceScatter);
  const std::string arg = has_root(s[1]) ? "root " + std::to_string(s[4])
                          : reduces      ? std::string(reduce_op_name(s[4]))
                                         : std::string("");
  const bool rows = s[1] == static_cast<int64_t>(Kind::kAllToAll);
  return std::string(kind_name(s[1])) + (arg.empty() ? "" : " (" + arg + ")") + " of " +
         (rows ? "rows of " : "") + std::to_string(s[2]) + " " +
         std::string(c10::toString(static_cast<at::ScalarType>(s[3]))) + " elements shaped " +
         shape_of(s + kShapeAt) + ", as collective #" + std::to_string(s[0]);
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

std::string split_list(at::ArrayRef<int64_t> splits) {
  std::string s = "[";
  for (size_t i = 0; i < splits.size(); ++i) s += (i ? ", " : "") + std::to_string(splits[i]);
  return s + "]";
}

// An all_to_all's rows: what rank s sends rank r (its in_splits[r]) is what
// rank r receives from s (its out_splits[s]). Each account ends with the
// rank's in_splits and out_splits; every rank checks every pair, so all of
// them fail alike rather than some waiting for a transfer that never comes.
std::string splits_disagree(const Group& g, const std::vector<Tensor>& accounts) {
  auto splits = [&](int r, int64_t which) {
    const int64_t* a = accounts[r].const_data_ptr<int64_t>() + kAccount + which * g.size;
    return at::ArrayRef<int64_t>(a, g.size);
  };
  for (int s = 0; s < g.size; ++s)
    for (int r = 0; r < g.size; ++r) {
      const int64_t sent = splits(s, 0)[r], expected = splits(r, 1)[s];
      if (sent != expected)
        return c10::str("disc: all_to_all split sizes disagree: rank ", s, " sends rank ", r, " ", sent,
                        " rows (its input_split_sizes ", split_list(splits(s, 0)), "), rank ", r,
                        " expects ", expected, " (its output_split_sizes ", split_list(splits(r, 1)),
                        ")");
    }
  return "";
}

// Every rank finds a disagreement (each compares all accounts); they meet
// once more before raising it, so that none leaves while another still
// reads the accounts (a peer's exit would fail it with "connection closed").
[[noreturn]] void fail_together(const Group& g, const std::string& error) {
  try {
    g.transport->barrier()->wait();
  } catch (const std::exception&) {
    // a peer already gone: the error below says what went wrong
  }
  TORCH_CHECK(false, error);
}

// Every rank says what it is about to run; a rank that runs something else
// (another branch, a skipped step) fails on every rank, naming both,
// instead of leaving the others waiting in a collective that never comes.
// An all_to_all's account also carries its split sizes, and the ranks'
// splits must fit one another.
void agree(Group& g, Kind kind, const Tensor& t, int64_t arg, at::IntArrayRef in_splits = {},
           at::IntArrayRef out_splits = {}) {
  const int64_t number = g.ran.fetch_add(1);
  if (!options::flag(options::Id::kDistCheck)) return;
  static metrics::Named checks("dist.checks");
  ++checks;
  const bool rows = kind == Kind::kAllToAll;
  const at::IntArrayRef shape = rows && t.dim() > 0 ? t.sizes().slice(1) : t.sizes();
  // One length for every kind, so that ranks running different kinds
  // still exchange their accounts and name the difference.
  std::vector<int64_t> account(kAccount + 2 * g.size, 0);
  const int64_t head[kShapeAt] = {number, static_cast<int64_t>(kind), c10::multiply_integers(shape),
                                  static_cast<int64_t>(t.scalar_type()), arg};
  std::copy(head, head + kShapeAt, account.begin());
  put_shape(shape, account.data() + kShapeAt);
  std::copy(in_splits.begin(), in_splits.end(), account.begin() + kAccount);
  std::copy(out_splits.begin(), out_splits.end(), account.begin() + kAccount + g.size);
  Tensor mine = at::tensor(account, at::kLong);
  std::vector<Tensor> in{mine};
  std::vector<std::vector<Tensor>> out(1);
  for (int r = 0; r < g.size; ++r) out[0].push_back(at::empty_like(mine));
  const std::string what = std::string(kind_name(static_cast<int64_t>(kind))) +
                           " (comparing what every rank runs first)";
  finish(g.transport->allgather(out, in), what.c_str(), g);
  for (int r = 0; r < g.size; ++r) {
    if (at::equal(out[0][r].narrow(0, 0, kAccount), mine.narrow(0, 0, kAccount))) continue;
    fail_together(g, c10::str("disc: ranks disagree on the collectives of a process group: rank ", g.rank,
                              " runs ", describe(mine.data_ptr<int64_t>()), ", rank ", r, " runs ",
                              describe(out[0][r].data_ptr<int64_t>()),
                              ". Every rank must call the same collectives, with the same shapes, in "
                              "the same order."));
  }
  if (!rows) return;
  const std::string splits = splits_disagree(g, out[0]);
  if (!splits.empty()) fail_together(g, splits);
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

// The rows of dim 0 sent to each rank (in_splits) and received from each
// (out_splits); rank r's block of the result comes from rank r.
Tensor all_to_all_cpu(const Tensor& input, const optional<Tensor>&, c10::SymIntArrayRef in_splits,
                      c10::SymIntArrayRef out_splits, int64_t id) {
  std::shared_ptr<Group> g = find_group(id);
  std::vector<int64_t> ins = C10_AS_INTARRAYREF_SLOW(in_splits).vec(),
                       outs = C10_AS_INTARRAYREF_SLOW(out_splits).vec();
  agree(*g, Kind::kAllToAll, input, 0, ins, outs);
  Tensor in = input.contiguous();
  std::vector<int64_t> sizes = in.sizes().vec();
  sizes[0] = 0;
  for (int64_t rows : outs) sizes[0] += rows;
  Tensor out = at::empty(sizes, in.options());
  finish(g->transport->alltoall_base(out, in, outs, ins), "all_to_all", *g);
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

Tensor all_to_all_meta(const Tensor& input, const optional<Tensor>&, c10::SymIntArrayRef,
                       c10::SymIntArrayRef out_splits, int64_t) {
  std::vector<c10::SymInt> sizes = input.sym_sizes().vec();
  c10::SymInt rows = 0;
  for (const c10::SymInt& n : out_splits) rows += n;
  sizes[0] = rows;
  return at::empty_symint(sizes, input.options());
}

template <class Fn>
c10::TypedOperatorHandle<Fn> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
}

using InPlaceFn = Tensor&(Tensor&, const optional<Tensor>&, int64_t, int64_t);
using ReduceFn = Tensor(const Tensor&, const optional<Tensor>&, int64_t, int64_t);
using GatherFn = Tensor(const Tensor&, const optional<Tensor>&, int64_t);
using RootedFn = Tensor(const Tensor&, const optional<Tensor>&, int64_t, int64_t);
using AllToAllFn = Tensor(const Tensor&, const optional<Tensor>&, c10::SymIntArrayRef,
                          c10::SymIntArrayRef, int64_t);

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

Tensor all_to_all(const Tensor& input, const optional<Tensor>& after, at::IntArrayRef in_splits,
                  at::IntArrayRef out_splits, int64_t group) {
  static auto h = handle<AllToAllFn>("disc::all_to_all");
  return h.call(input, after, c10::fromIntArrayRefSlow(in_splits), c10::fromIntArrayRefSlow(out_splits),
                group);
}

TORCH_LIBRARY_FRAGMENT(disc, m) {
  m.def("all_reduce_(Tensor(a!) self, Tensor? after, int reduce_op, int group) -> Tensor(a!)");
  m.def("broadcast_(Tensor(a!) self, Tensor? after, int root, int group) -> Tensor(a!)");
  m.def("all_gather(Tensor input, Tensor? after, int group) -> Tensor");
  m.def("reduce_scatter(Tensor input, Tensor? after, int reduce_op, int group) -> Tensor");
  m.def("scatter(Tensor input, Tensor? after, int root, int group) -> Tensor");
  m.def("gather(Tensor input, Tensor? after, int root, int group) -> Tensor");
  m.def("all_to_all(Tensor input, Tensor? after, SymInt[] in_splits, SymInt[] out_splits, "
        "int group) -> Tensor");
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
