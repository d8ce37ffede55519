// attention-pattern: scaled dot-product attention written out by hand runs as one
// fused attention call, which never writes the [B, H, Lq, Lk] scores.
//
//   %4 = bmm(%q, %kt)            [BH, Lq, Lk]
//   %5 = reshape(%4)             [B, H, Lq, Lk]
//   %6 = mul.Tensor(%5, %scale)  (or div, or by a constant; optional)
//   %7 = add.Tensor(%6, %mask)   (optional)
//   %8 = _softmax(%7, -1)
//   %9 = reshape(%8)             [BH, Lq, Lk]
//   %10 = bmm(%9, %v)            -> %10 = bmm(%q, %kt, %v, %scale, %mask)  attention 0
//
// %4 .. %9 are erased; the last bmm keeps its value's identity and runs as
// the library call the library-calls pass gives it. Only where nothing
// else reads the scores or the probabilities (no backward keeps them, no
// output_attentions), in float32, on the CPU target, unless
// DISC_ATTENTION=cpu. Decided on symbols:
// the reshapes keep Lq and Lk as they are, so B * H is the bmm's batch for
// every binding, and the executor reads B and H from the softmax's sizes.
#include <optional>

#include "lowering/passes/passes.h"
#include "runtime/options.h"

namespace disc::lowering {

namespace {

class Matcher {
 public:
  explicit Matcher(Program& p) : p_(p), users_(users_of(p)), output_(p.ops.size(), false) {
    for (const ir::GraphRef& r : p.outputs) output_[r.node] = true;
  }

  void run() {
    for (uint32_t i = 0; i < p_.ops.size(); ++i)
      if (std::optional<Match> m = match(i)) rewrite(i, *m);
  }

 private:
  struct Match {
    AttentionCall call;
    std::vector<ir::GraphRef> inputs;  // q, k^T, v, [scale], [mask]
    std::vector<uint32_t> chain;       // the ops the call replaces
  };

  const ProgramOp& op(uint32_t i) const { return p_.ops[i]; }
  Op kind(uint32_t i) const { return op_of(op(i).node->op); }
  const ir::TensorType& type(const ir::GraphRef& r) const { return op(r.node).node->outputs[r.index]; }
  const std::vector<uint32_t>& dims(uint32_t i) const { return op(i).dims.at(0); }
  bool f32(uint32_t i) const { return op(i).node->outputs[0].dtype == ir::DType::kFloat32; }

  // An op of the chain: live, float32, one output read by exactly one op
  // and by no one outside the program, writing no input.
  bool inner(uint32_t i) const {
    const ProgramOp& o = op(i);
    return !o.erased && o.node->outputs.size() == 1 && users_[i].size() == 1 && !output_[i] &&
           o.node->mutated.empty() && f32(i);
  }

  // The one input an inner op reads the chain through, when it is `expected`.
  std::optional<uint32_t> source(uint32_t i, Op expected) const {
    if (kind(i) != expected || !inner(i) || op(i).inputs.empty() || op(i).inputs[0].index != 0)
      return std::nullopt;
    return op(i).inputs[0].node;
  }

  std::optional<Match> match(uint32_t out) const {
    const ProgramOp& bmm2 = op(out);
    if (bmm2.erased || kind(out) != Op::kBmm || !f32(out) || bmm2.group >= 0 || bmm2.gemm_group >= 0)
      return std::nullopt;
    Match m;
    // probs viewed [BH, Lq, Lk]
    const uint32_t probs3 = bmm2.inputs[0].node;
    std::optional<uint32_t> sm = source(probs3, Op::kReshape);
    if (!sm || bmm2.inputs[0].index != 0) return std::nullopt;
    const Op softmax = kind(*sm);
    if (softmax != Op::kSoftmax && softmax != Op::kSafeSoftmax) return std::nullopt;
    const ir::Node& smn = *op(*sm).node;
    const ir::Attr* dim = smn.attr_operand(1);
    if (!inner(*sm) || dims(*sm).size() != 4 || !dim || (dim->i != -1 && dim->i != 3)) return std::nullopt;
    if (const ir::Attr* half = smn.attr_operand(2); half && half->i) return std::nullopt;
    const std::vector<uint32_t>& s4 = dims(*sm);
    if (dims(probs3).size() != 3 || dims(probs3)[1] != s4[2] || dims(probs3)[2] != s4[3]) return std::nullopt;
    m.call.scores = *sm;
    m.call.nan_when_all_masked = softmax == Op::kSoftmax;
    m.chain = {probs3, *sm};
    uint32_t x = op(*sm).inputs[0].node;
    if (op(*sm).inputs[0].index != 0) return std::nullopt;
    std::optional<ir::GraphRef> mask, scale;
    if (kind(x) == Op::kAdd) {  // scores + mask
      const ProgramOp& add = op(x);
      const ir::Attr* alpha = add.node->attr_operand(2);
      if (!inner(x) || !alpha || !alpha->is_one() || dims(x) != s4 || add.inputs[0].index != 0)
        return std::nullopt;
      if (type(add.inputs[1]).dtype != ir::DType::kFloat32 || type(add.inputs[1]).sizes.size() > 4)
        return std::nullopt;
      mask = add.inputs[1];
      m.chain.push_back(x);
      x = add.inputs[0].node;
    }
    if (std::optional<uint32_t> y = scaled(x, m.call, scale)) {
      m.chain.push_back(x);
      x = *y;
    }
    // scores viewed [B, H, Lq, Lk] from bmm(q, k^T) [BH, Lq, Lk]
    std::optional<uint32_t> bmm1 = source(x, Op::kReshape);
    if (!bmm1 || dims(x) != s4 || kind(*bmm1) != Op::kBmm || !inner(*bmm1)) return std::nullopt;
    const std::vector<uint32_t>& s3 = dims(*bmm1);
    if (s3.size() != 3 || s3[1] != s4[2] || s3[2] != s4[3]) return std::nullopt;
    m.chain.push_back(x);
    m.chain.push_back(*bmm1);
    const ir::GraphRef q = op(*bmm1).inputs[0], kt = op(*bmm1).inputs[1], v = bmm2.inputs[1];
    for (const ir::GraphRef& r : {q, kt, v})
      if (type(r).dtype != ir::DType::kFloat32) return std::nullopt;
    m.inputs = {q, kt, v};
    if (scale) m.inputs.push_back(*scale);
    if (mask) m.inputs.push_back(*mask);
    m.call.mask = mask.has_value();
    return m;
  }

  // x's scaling of the scores: its input, with the call's scale set, or
  // nullopt (x scales nothing).
  std::optional<uint32_t> scaled(uint32_t x, AttentionCall& call, std::optional<ir::GraphRef>& scale) const {
    const Op k = kind(x);
    if (k != Op::kMul && k != Op::kDiv && k != Op::kMulScalar && k != Op::kDivScalar) return std::nullopt;
    const ProgramOp& o = op(x);
    if (!inner(x) || o.inputs.empty() || o.inputs[0].index != 0 || dims(x) != dims(o.inputs[0].node))
      return std::nullopt;
    if (k == Op::kMul || k == Op::kDiv) {
      if (o.inputs.size() != 2 || !type(o.inputs[1]).sizes.empty()) return std::nullopt;
      const ir::DType t = type(o.inputs[1]).dtype;
      if (t != ir::DType::kFloat32 && t != ir::DType::kFloat64) return std::nullopt;
      scale = o.inputs[1];
      call.scale = k == Op::kMul ? AttentionCall::Scale::kMulTensor : AttentionCall::Scale::kDivTensor;
      return o.inputs[0].node;
    }
    const ir::Attr* c = o.node->attr_operand(1);
    if (!c || (c->kind != ir::Attr::Kind::kScalarDouble && c->kind != ir::Attr::Kind::kScalarInt))
      return std::nullopt;  // a runtime scalar (not an attr) is not matched
    call.constant = c->kind == ir::Attr::Kind::kScalarDouble ? c->d : static_cast<double>(c->i);
    call.scale = k == Op::kMulScalar ? AttentionCall::Scale::kMulConstant : AttentionCall::Scale::kDivConstant;
    return o.inputs[0].node;
  }

  void rewrite(uint32_t out, Match& m) {
    ProgramOp& bmm2 = p_.ops[out];
    bmm2.inputs = std::move(m.inputs);
    bmm2.attention = static_cast<int32_t>(p_.attentions.size());
    p_.attentions.push_back(m.call);
    for (uint32_t c : m.chain) p_.ops[c].erased = true;
    users_ = users_of(p_);
  }

  Program& p_;
  std::vector<std::vector<uint32_t>> users_;
  std::vector<bool> output_;
};

}  // namespace

void fuse_attention(Program& p) {
  p.attentions.clear();
  for (ProgramOp& op : p.ops) op.attention = -1;
  if (p.target != Target::kCpu) return;  // the fused kernel is the CPU's
  if (options::text(options::Id::kAttention) != "fused") return;
  Matcher(p).run();
}

}  // namespace disc::lowering
