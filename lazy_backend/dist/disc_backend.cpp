// The "disc" c10d backend (collectives.h): records collectives on disc
// tensors, hands those on CPU tensors to the transport.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <mutex>

#include "lazy_backend/base/graph_worker.h"
#include "lazy_backend/base/metrics.h"
#include "lazy_backend/dist/collective_ops.h"
#include "lazy_backend/dist/collectives.h"
#include "lazy_backend/dist/groups.h"
#include "lazy_backend/sync/sync.h"

namespace disc::dist {

namespace {

using at::Tensor;
using RedOp = c10d::ReduceOp::RedOpType;

// A recorded collective's work: done as far as the caller can tell, since
// its results are tensors of the graph (reading one waits for it).
class RecordedWork final : public c10d::Work {
 public:
  RecordedWork(std::vector<Tensor> results, c10d::OpType type)
      : Work(-1, type), results_(std::move(results)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())) {
    future_->markCompleted(c10::IValue(results_));
    finish();
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
  std::vector<Tensor> result() override { return results_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<Tensor> results_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A receive into disc tensors: the transport receives into host buffers,
// copied into the caller's tensors once it is waited on (c10d's contract:
// a received tensor is read after wait()).
class ReceiveWork final : public c10d::Work {
 public:
  ReceiveWork(c10::intrusive_ptr<c10d::Work> host_work, std::vector<Tensor> host, std::vector<Tensor> dest)
      : Work(-1, c10d::OpType::RECV), host_work_(std::move(host_work)), host_(std::move(host)),
        dest_(std::move(dest)) {}
  bool isCompleted() override { return copied_; }
  bool isSuccess() const override { return copied_; }
  bool wait(std::chrono::milliseconds timeout) override {
    if (copied_) return true;
    host_work_->wait(timeout);
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < dest_.size(); ++i) dest_[i].copy_(host_[i].view(dest_[i].sizes()));
    copied_ = true;
    finish();
    return true;
  }
  int sourceRank() const override { return host_work_->sourceRank(); }
  std::vector<Tensor> result() override { return dest_; }

 private:
  c10::intrusive_ptr<c10d::Work> host_work_;
  std::vector<Tensor> host_, dest_;
  bool copied_ = false;
};

bool is_disc(const Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// The dtypes the transport reduces and moves.
bool supported(at::ScalarType s) {
  switch (s) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16:
    case at::kChar: case at::kByte: case at::kInt: case at::kLong:
      return true;
    default:
      return false;
  }
}

// true: every tensor is on the CPU (the transport's); false: every one is a
// disc tensor the transport can carry. Anything else is the caller's error.
bool on_host(at::ArrayRef<Tensor> ts, const char* what) {
  size_t disc = 0;
  for (const Tensor& t : ts) {
    TORCH_CHECK(t.defined(), "disc: dist.", what, " got an undefined tensor");
    TORCH_CHECK(is_disc(t) || t.device().is_cpu(), "disc: dist.", what, " got a tensor on ",
                t.device(), "; the disc backend serves disc and cpu tensors");
    if (!is_disc(t)) continue;
    ++disc;
    TORCH_CHECK(supported(t.scalar_type()), "disc: dist.", what, " does not support dtype ",
                t.scalar_type(), " (float, double, half, bfloat16 and 8, 32, 64-bit integers do)");
    TORCH_CHECK(t.layout() == at::kStrided, "disc: dist.", what, " needs dense tensors, got ",
                t.layout());
  }
  TORCH_CHECK(disc == 0 || disc == ts.size(), "disc: dist.", what,
              " got tensors on cpu and disc; one collective's tensors must all be on one device");
  return disc == 0;
}

class DiscBackend final : public c10d::Backend {
 public:
  DiscBackend(c10::intrusive_ptr<c10d::Backend> transport, int rank, int size)
      : Backend(rank, size), group_(std::make_shared<Group>()) {
    group_->transport = std::move(transport);
    group_->rank = rank;
    group_->size = size;
    id_ = register_group(group_);
  }
  // destroy_process_group: the group's recorded collectives run, and the
  // graphs in flight finish, before the group goes. A peer may be waiting
  // in a collective this rank recorded but never read (the copies a full
  // state dict gathers on ranks other than 0), and a graph still running
  // (the step a loss.item() returned early from) needs the group.
  void shutdown() override { drain(); }
  ~DiscBackend() override {
    try {
      drain();
    } catch (const std::exception& e) {
      TORCH_WARN("disc: the process group's last collectives failed as it was destroyed: ", e.what());
    }
    unregister_group(id_);
  }

  const std::string getBackendName() const override { return "disc"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<Tensor>& ts,
                                           const c10d::AllreduceOptions& o) override {
    if (host_path(ts, "all_reduce")) return transport().allreduce(ts, o);
    const RedOp op = checked_reduce_op(o.reduceOp, ts, "all_reduce");
    at::NoGradGuard no_grad;
    for (Tensor& t : ts) {
      record([&](const auto& after) -> Tensor { return dist::all_reduce_(t, after, on_wire(op), id_); });
      if (op == RedOp::AVG) t.div_(size_);
    }
    return done(ts, c10d::OpType::ALLREDUCE);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<Tensor>& ts, const c10d::AllreduceCoalescedOptions& o) override {
    if (host_path(ts, "all_reduce_coalesced")) return transport().allreduce_coalesced(ts, o);
    c10d::AllreduceOptions each;
    each.reduceOp = o.reduceOp;
    return allreduce(ts, each);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<Tensor>& ts,
                                           const c10d::BroadcastOptions& o) override {
    if (host_path(ts, "broadcast")) return transport().broadcast(ts, o);
    TORCH_CHECK(ts.size() == 1 && o.rootTensor == 0,
                "disc: dist.broadcast takes one tensor per process");
    check_root(o.rootRank, "broadcast");
    at::NoGradGuard no_grad;
    record([&](const auto& after) -> Tensor { return dist::broadcast_(ts[0], after, o.rootRank, id_); });
    return done(ts, c10d::OpType::BROADCAST);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<Tensor>>& outs,
                                           std::vector<Tensor>& ins,
                                           const c10d::AllgatherOptions& o) override {
    if (host_path(ins, "all_gather")) return transport().allgather(outs, ins, o);
    TORCH_CHECK(outs.size() == ins.size(), "disc: dist.all_gather: one output list per input");
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < ins.size(); ++i) {
      TORCH_CHECK(!on_host(outs[i], "all_gather"),
                  "disc: dist.all_gather of disc tensors needs disc output tensors");
      TORCH_CHECK(static_cast<int>(outs[i].size()) == size_, "disc: dist.all_gather needs ", size_,
                  " output tensors (one per rank), got ", outs[i].size());
      Tensor rows = gathered_rows(ins[i]);
      for (int r = 0; r < size_; ++r) {
        check_numel(outs[i][r], ins[i].numel(), "all_gather");
        outs[i][r].copy_(rows[r].view(outs[i][r].sizes()));
      }
    }
    std::vector<Tensor> flat;
    for (auto& list : outs) flat.insert(flat.end(), list.begin(), list.end());
    return done(flat, c10d::OpType::ALLGATHER);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(Tensor& out, Tensor& in,
                                                 const c10d::AllgatherOptions& o) override {
    std::vector<Tensor> both{out, in};
    if (host_path(both, "all_gather_into_tensor")) return transport()._allgather_base(out, in, o);
    check_numel(out, in.numel() * size_, "all_gather_into_tensor");
    at::NoGradGuard no_grad;
    out.copy_(gathered_rows(in).view(out.sizes()));
    return done({out}, c10d::OpType::_ALLGATHER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<Tensor>& outs, std::vector<Tensor>& ins, const c10d::AllgatherOptions& o) override {
    TORCH_CHECK(outs.size() == ins.size(), "disc: dist.all_gather_into_tensor: one output per input");
    for (size_t i = 0; i < ins.size(); ++i) _allgather_base(outs[i], ins[i], o);
    return done(outs, c10d::OpType::COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(Tensor& out, Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    std::vector<Tensor> both{out, in};
    if (host_path(both, "reduce_scatter_tensor")) return transport()._reduce_scatter_base(out, in, o);
    check_numel(in, out.numel() * size_, "reduce_scatter_tensor");
    const RedOp op = checked_reduce_op(o.reduceOp, both, "reduce_scatter_tensor");
    at::NoGradGuard no_grad;
    Tensor r = record([&](const auto& after) {
      return dist::reduce_scatter(in.reshape(per_rank(out.sizes())), after, on_wire(op), id_);
    });
    out.copy_((op == RedOp::AVG ? r / size_ : r).view(out.sizes()));
    return done({out}, c10d::OpType::_REDUCE_SCATTER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<Tensor>& outs,
                                                std::vector<std::vector<Tensor>>& ins,
                                                const c10d::ReduceScatterOptions& o) override {
    if (host_path(outs, "reduce_scatter")) return transport().reduce_scatter(outs, ins, o);
    TORCH_CHECK(outs.size() == ins.size(), "disc: dist.reduce_scatter: one input list per output");
    for (size_t i = 0; i < outs.size(); ++i) {
      TORCH_CHECK(static_cast<int>(ins[i].size()) == size_, "disc: dist.reduce_scatter needs ", size_,
                  " input tensors (one per rank), got ", ins[i].size());
      TORCH_CHECK(!on_host(ins[i], "reduce_scatter"),
                  "disc: dist.reduce_scatter into disc tensors needs disc input tensors");
      std::vector<Tensor> rows;
      for (const Tensor& t : ins[i]) rows.push_back(t.reshape({-1}));
      Tensor stacked = at::stack(rows);
      _reduce_scatter_base(outs[i], stacked, o);
    }
    return done(outs, c10d::OpType::REDUCE_SCATTER);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<Tensor>& outs, std::vector<Tensor>& ins, const c10d::ReduceScatterOptions& o) override {
    TORCH_CHECK(outs.size() == ins.size(), "disc: dist.reduce_scatter_tensor: one input per output");
    for (size_t i = 0; i < outs.size(); ++i) _reduce_scatter_base(outs[i], ins[i], o);
    return done(outs, c10d::OpType::COALESCED);
  }

  // Row r of the root's [size, ...] stack to rank r. The other ranks record
  // the same op on zeros of that shape: every rank's graph is the same.
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<Tensor>& outs,
                                         std::vector<std::vector<Tensor>>& ins,
                                         const c10d::ScatterOptions& o) override {
    if (host_path(outs, "scatter")) return transport().scatter(outs, ins, o);
    TORCH_CHECK(outs.size() == 1, "disc: dist.scatter takes one output tensor per process");
    check_root(o.rootRank, "scatter");
    at::NoGradGuard no_grad;
    Tensor& out = outs[0];
    Tensor rows;
    if (rank_ == o.rootRank) {
      TORCH_CHECK(ins.size() == 1 && static_cast<int>(ins[0].size()) == size_,
                  "disc: dist.scatter needs ", size_, " input tensors (one per rank) on the source rank");
      TORCH_CHECK(!on_host(ins[0], "scatter"), "disc: dist.scatter into disc tensors needs disc inputs");
      std::vector<Tensor> shaped;
      for (const Tensor& t : ins[0]) {
        check_numel(t, out.numel(), "scatter");
        shaped.push_back(t.reshape(out.sizes()));
      }
      rows = at::stack(shaped);
    } else {
      rows = at::zeros(per_rank(out.sizes()), out.options());
    }
    Tensor r = record([&](const auto& after) { return dist::scatter(rows, after, o.rootRank, id_); });
    out.copy_(r.view(out.sizes()));
    return done(outs, c10d::OpType::SCATTER);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<Tensor>>& outs, std::vector<Tensor>& ins,
                                        const c10d::GatherOptions& o) override {
    if (host_path(ins, "gather")) return transport().gather(outs, ins, o);
    TORCH_CHECK(ins.size() == 1, "disc: dist.gather takes one input tensor per process");
    check_root(o.rootRank, "gather");
    at::NoGradGuard no_grad;
    Tensor rows = record(
        [&](const auto& after) { return dist::gather(ins[0].unsqueeze(0), after, o.rootRank, id_); });
    // The other ranks read nothing of the gather's result, so no later read
    // of theirs would run it while the root waits: it runs now, everywhere.
    run_recorded("dist_gather");
    std::vector<Tensor> flat;
    if (rank_ == o.rootRank) {
      TORCH_CHECK(outs.size() == 1 && static_cast<int>(outs[0].size()) == size_,
                  "disc: dist.gather needs ", size_, " output tensors (one per rank) on the destination rank");
      TORCH_CHECK(!on_host(outs[0], "gather"), "disc: dist.gather of disc tensors needs disc outputs");
      for (int r = 0; r < size_; ++r) {
        check_numel(outs[0][r], ins[0].numel(), "gather");
        outs[0][r].copy_(rows[r].view(outs[0][r].sizes()));
        flat.push_back(outs[0][r]);
      }
    }
    return done(flat, c10d::OpType::GATHER);
  }

  // in_splits[r] rows of dim 0 to rank r, out_splits[r] from it; no splits:
  // dim 0 in equal blocks.
  c10::intrusive_ptr<c10d::Work> alltoall_base(Tensor& out, Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& o) override {
    std::vector<Tensor> both{out, in};
    if (host_path(both, "all_to_all_single"))
      return transport().alltoall_base(out, in, out_splits, in_splits, o);
    const std::vector<int64_t> ins = rows_per_rank(in_splits, in, "input"),
                               outs = rows_per_rank(out_splits, out, "output");
    TORCH_CHECK(in.sizes().slice(1) == out.sizes().slice(1),
                "disc: dist.all_to_all_single needs input and output rows of one shape, got ",
                in.sizes(), " and ", out.sizes());
    at::NoGradGuard no_grad;
    Tensor r = record([&](const auto& after) { return dist::all_to_all(in, after, ins, outs, id_); });
    out.copy_(r);
    return done({out}, c10d::OpType::ALLTOALL_BASE);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<Tensor>& outs, std::vector<Tensor>& ins,
                                          const c10d::AllToAllOptions& o) override {
    if (host_path(ins, "all_to_all")) return transport().alltoall(outs, ins, o);
    TORCH_CHECK(static_cast<int>(ins.size()) == size_ && static_cast<int>(outs.size()) == size_,
                "disc: dist.all_to_all needs ", size_, " input and output tensors (one per rank)");
    TORCH_CHECK(!on_host(outs, "all_to_all"), "disc: dist.all_to_all of disc tensors needs disc outputs");
    std::vector<Tensor> flat;
    for (const Tensor& t : ins) {
      check_numel(t, ins[0].numel(), "all_to_all");
      flat.push_back(t.reshape({-1}));
    }
    at::NoGradGuard no_grad;
    const std::vector<int64_t> one_row_each(size_, 1);
    Tensor r = record([&](const auto& after) {
      return dist::all_to_all(at::stack(flat), after, one_row_each, one_row_each, id_);
    });
    for (int k = 0; k < size_; ++k) {
      check_numel(outs[k], ins[0].numel(), "all_to_all");
      outs[k].copy_(r[k].view(outs[k].sizes()));
    }
    return done(outs, c10d::OpType::ALLTOALL);
  }

  // Point to point on disc tensors runs now, on host copies: only two ranks
  // take part, so it cannot join the group's recorded order. Both sides
  // first run the collectives recorded so far, which the peer's graphs
  // wait for (a send reads its tensors: a sync; a receive runs them too).
  c10::intrusive_ptr<c10d::Work> send(std::vector<Tensor>& ts, int dst, int tag) override {
    if (host_path(ts, "send")) return transport().send(ts, dst, tag);
    run_recorded("dist_p2p");
    std::vector<Tensor> host;
    for (const Tensor& t : ts) host.push_back(t.cpu().contiguous());
    return transport().send(host, dst, tag);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<Tensor>& ts, int src, int tag) override {
    if (host_path(ts, "recv")) return transport().recv(ts, src, tag);
    run_recorded("dist_p2p");
    std::vector<Tensor> host;
    for (const Tensor& t : ts) host.push_back(at::empty(t.sizes(), t.options().device(at::kCPU)));
    return c10::make_intrusive<ReceiveWork>(transport().recv(host, src, tag), host, ts);
  }

  // A barrier is passed once every collective recorded before it has run:
  // the pending graphs run first.
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& o) override {
    run_recorded("dist_barrier");
    return transport().barrier(o);
  }

 private:
  c10d::Backend& transport() { return *group_->transport; }

  // Records one collective after the group's previous one; the newest is
  // held so that the next sync runs every collective recorded so far.
  template <class Record>
  Tensor record(Record&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    Tensor r = make(last_);
    last_ = r;
    static metrics::Named recorded("dist.recorded");
    ++recorded;
    return r;
  }

  // Every rank's `in` as row r of a [size, in's shape...] tensor, recorded.
  Tensor gathered_rows(const Tensor& in) {
    return record([&](const auto& after) { return dist::all_gather(in.unsqueeze(0), after, id_); });
  }

  // [size, each rank's shape...]: the collectives' inputs keep the caller's
  // shape, which the ranks' agreement check compares.
  std::vector<int64_t> per_rank(at::IntArrayRef shape) const {
    std::vector<int64_t> sizes{size_};
    sizes.insert(sizes.end(), shape.begin(), shape.end());
    return sizes;
  }

  // The operator the transport runs: Gloo has no AVG, so the sum, divided
  // by the group's size after.
  static RedOp on_wire(RedOp op) { return op == RedOp::AVG ? RedOp::SUM : op; }

  bool recorded_any() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_.has_value();
  }

  // Whether the collective's tensors are on the CPU: then the transport runs
  // it now, after the collectives recorded before it, so that every rank
  // runs the group's collectives in the order they were called.
  bool host_path(at::ArrayRef<Tensor> ts, const char* what) {
    if (!on_host(ts, what)) return false;
    run_recorded("dist_host_collective");
    return true;
  }

  // Runs the pending graphs when a collective of this group is among them.
  void run_recorded(const char* cause) {
    if (!recorded_any()) return;
    disc::sync(cause);
    disc::wait();
  }

  void drain() {
    if (drained_ || on_graph_worker()) return;  // the worker cannot wait for itself
    drained_ = true;
    run_recorded("dist_shutdown");
  }

  RedOp checked_reduce_op(const c10d::ReduceOp& r, at::ArrayRef<Tensor> ts, const char* what) const {
    const RedOp op = r.op_;
    TORCH_CHECK(op != RedOp::PREMUL_SUM, "disc: dist.", what, " does not support ReduceOp.PREMUL_SUM");
    const bool floating = at::isFloatingType(ts[0].scalar_type());
    TORCH_CHECK(op != RedOp::AVG || floating, "disc: dist.", what,
                " with ReduceOp.AVG needs a floating dtype, got ", ts[0].scalar_type());
    const bool bitwise = op == RedOp::BAND || op == RedOp::BOR || op == RedOp::BXOR;
    TORCH_CHECK(!bitwise || !floating, "disc: dist.", what, " with a bitwise ReduceOp needs an integer dtype, got ",
                ts[0].scalar_type());
    return op;
  }

  void check_root(int64_t root, const char* what) const {
    TORCH_CHECK(root >= 0 && root < size_, "disc: dist.", what, " with root rank ", root, " in a group of ",
                size_);
  }

  // The rows of dim 0 of t each rank sends or receives: the split sizes
  // given, or (none given) equal blocks.
  std::vector<int64_t> rows_per_rank(const std::vector<int64_t>& splits, const Tensor& t,
                                     const char* which) const {
    TORCH_CHECK(t.dim() > 0, "disc: dist.all_to_all_single needs an ", which, " of at least one dim");
    const int64_t rows = t.size(0);
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "disc: dist.all_to_all_single without split sizes needs dim 0 of the ",
                  which, " (", rows, ") divisible by the group's ", size_, " ranks");
      return std::vector<int64_t>(size_, rows / size_);
    }
    TORCH_CHECK(static_cast<int>(splits.size()) == size_, "disc: dist.all_to_all_single needs ", size_,
                " ", which, " split sizes (one per rank), got ", splits.size());
    int64_t sum = 0;
    for (int64_t s : splits) {
      TORCH_CHECK(s >= 0, "disc: dist.all_to_all_single got a negative ", which, " split size ", s);
      sum += s;
    }
    TORCH_CHECK(sum == rows, "disc: dist.all_to_all_single: the ", which, " split sizes add up to ", sum,
                " rows, the ", which, " has ", rows);
    return splits;
  }

  static void check_numel(const Tensor& t, int64_t want, const char* what) {
    TORCH_CHECK(t.numel() == want, "disc: dist.", what, " needs a tensor of ", want, " elements here, got ",
                t.sizes());
  }

  static c10::intrusive_ptr<c10d::Work> done(std::vector<Tensor> results, c10d::OpType type) {
    return c10::make_intrusive<RecordedWork>(std::move(results), type);
  }

  std::shared_ptr<Group> group_;
  int64_t id_ = 0;
  std::mutex mu_;
  std::optional<Tensor> last_;
  bool drained_ = false;
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_backend(c10::intrusive_ptr<c10d::Backend> transport, int rank,
                                               int size) {
  TORCH_CHECK(transport, "disc: the disc backend needs a transport backend");
  return c10::make_intrusive<DiscBackend>(std::move(transport), rank, size);
}

}  // namespace disc::dist
