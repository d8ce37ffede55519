// The "disc" c10d backend (collectives.h): records collectives on disc
// tensors, hands those on CPU tensors to the transport.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <mutex>

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
  ~DiscBackend() override { unregister_group(id_); }

  const std::string getBackendName() const override { return "disc"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<Tensor>& ts,
                                           const c10d::AllreduceOptions& o) override {
    if (on_host(ts, "all_reduce")) return transport().allreduce(ts, o);
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
    if (on_host(ts, "all_reduce_coalesced")) return transport().allreduce_coalesced(ts, o);
    c10d::AllreduceOptions each;
    each.reduceOp = o.reduceOp;
    return allreduce(ts, each);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<Tensor>& ts,
                                           const c10d::BroadcastOptions& o) override {
    if (on_host(ts, "broadcast")) return transport().broadcast(ts, o);
    TORCH_CHECK(ts.size() == 1 && o.rootTensor == 0,
                "disc: dist.broadcast takes one tensor per process");
    TORCH_CHECK(o.rootRank >= 0 && o.rootRank < size_, "disc: dist.broadcast from rank ", o.rootRank,
                " in a group of ", size_);
    at::NoGradGuard no_grad;
    record([&](const auto& after) -> Tensor { return dist::broadcast_(ts[0], after, o.rootRank, id_); });
    return done(ts, c10d::OpType::BROADCAST);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<Tensor>>& outs,
                                           std::vector<Tensor>& ins,
                                           const c10d::AllgatherOptions& o) override {
    if (on_host(ins, "all_gather")) return transport().allgather(outs, ins, o);
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
    if (on_host(both, "all_gather_into_tensor")) return transport()._allgather_base(out, in, o);
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
    if (on_host(both, "reduce_scatter_tensor")) return transport()._reduce_scatter_base(out, in, o);
    check_numel(in, out.numel() * size_, "reduce_scatter_tensor");
    const RedOp op = checked_reduce_op(o.reduceOp, both, "reduce_scatter_tensor");
    at::NoGradGuard no_grad;
    Tensor r = record([&](const auto& after) {
      return dist::reduce_scatter(in.reshape({size_, -1}), after, on_wire(op), id_);
    });
    out.copy_((op == RedOp::AVG ? r / size_ : r).view(out.sizes()));
    return done({out}, c10d::OpType::_REDUCE_SCATTER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<Tensor>& outs,
                                                std::vector<std::vector<Tensor>>& ins,
                                                const c10d::ReduceScatterOptions& o) override {
    if (on_host(outs, "reduce_scatter")) return transport().reduce_scatter(outs, ins, o);
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

  // A barrier is passed once every collective recorded before it has run:
  // the pending graphs run first.
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& o) override {
    if (recorded_any()) {
      disc::sync("dist_barrier");
      disc::wait();
    }
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

  // Every rank's `in` as one row of a [size, numel] tensor, recorded.
  Tensor gathered_rows(const Tensor& in) {
    return record(
        [&](const auto& after) { return dist::all_gather(in.reshape({1, -1}), after, id_); });
  }

  // The operator the transport runs: Gloo has no AVG, so the sum, divided
  // by the group's size after.
  static RedOp on_wire(RedOp op) { return op == RedOp::AVG ? RedOp::SUM : op; }

  bool recorded_any() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_.has_value();
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
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_backend(c10::intrusive_ptr<c10d::Backend> transport, int rank,
                                               int size) {
  TORCH_CHECK(transport, "disc: the disc backend needs a transport backend");
  return c10::make_intrusive<DiscBackend>(std::move(transport), rank, size);
}

}  // namespace disc::dist
