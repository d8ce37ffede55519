// attention-pattern: scaled dot-product attention written out by hand runs as one
// fused attention call, which never writes the [B, H, Lq, Lk] scores.
//
//   %4 = bmm(%q, %kt)            [BH, Lq, Lk]
//   %5 = reshape(%4)             [B, H, Lq, Lk]
//   %6 = mul.Tensor(%5, %scale)  (or div, or by a constant; optional)
//   %7 = add.Tensor(%6, %mask)   (optional)
//   %8 = _softmax(%7, -1)
//   %d = native_dropout(%8)      (optional)
//   %9 = reshape(%8 or %d.0)     [BH, Lq, Lk]
//   %10 = bmm(%9, %v)            -> %10 = bmm(%q, %kt, %v, %scale, %mask)  attention 0
//
// %4 .. %9 are erased; the last bmm keeps its value's identity and runs as
// the library call the library-calls pass gives it. In inference nothing
// else may read the scores or the probabilities (output_attentions does).
// In training autograd's backward of the chain reads them:
//
//   %11 = bmm(transpose(%9), %go)            grad v
//   %12 = bmm(%go, transpose(%v))            -> reshape [B, H, Lq, Lk]
//         (native_dropout_backward(., %d.1))
//   %13 = _softmax_backward_data(., %8)      (scaled as the forward scaled)
//   %14 = reshape(.)                         [BH, Lq, Lk]
//   %15 = bmm(%14, transpose(%kt))           grad q
//   %16 = bmm(transpose(%q), %14)            grad k^T
//
// and %11, %15, %16 become one kAttentionBackward GEMM group: one fused
// backward (reading %q, %kt, %v, %10, %go, the scales, the mask) that
// recomputes the probabilities and the dropout mask, so neither is kept
// between the forward and the backward; the rest is erased. Anything else
// reading a value of the chain keeps it as written.
//
// q, k and v share a dtype, float32, bf16 or f16, which the call returns;
// casts between floating dtypes may stand anywhere on the chain and its
// backward (autocast's bf16 products around a float32 softmax). The call
// computes in float32, widening half inputs and rounding its outputs once,
// where the ops as written round at every step: it agrees with them to
// their rounding, and is nearer the exact result. On the CPU target,
// unless DISC_ATTENTION=cpu. Decided on symbols: the reshapes keep
// Lq and Lk as they are, so B * H is the bmm's batch for every binding, and
// the executor reads B and H from the softmax's sizes.
#include <algorithm>
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
  struct Backward {
    uint32_t grad_q = 0, grad_kt = 0, grad_v = 0;
    std::vector<ir::GraphRef> inputs;  // q, k^T, v, out, grad out, [scale, grad scale], [mask]
  };
  struct Match {
    AttentionCall call;
    std::vector<ir::GraphRef> inputs;  // q, k^T, v, [scale], [mask]
    std::vector<uint32_t> chain;       // the ops the calls replace
    ir::DType dtype = ir::DType::kFloat32;  // q's, k's, v's and the output's
    std::optional<Backward> backward;
  };
  // Readers of the forward's values besides the chain: autograd's backward.
  struct Readers {
    std::optional<uint32_t> probs_t;       // transpose(probs) for grad v
    std::optional<uint32_t> softmax_grad;  // _softmax_backward_data
    std::optional<uint32_t> dropout_grad;  // native_dropout_backward
  };

  const ProgramOp& op(uint32_t i) const { return p_.ops[i]; }
  Op kind(uint32_t i) const { return op_of(op(i).node->op); }
  const ir::TensorType& type(const ir::GraphRef& r) const { return op(r.node).node->outputs[r.index]; }
  const std::vector<uint32_t>& dims(uint32_t i) const { return op(i).dims.at(0); }
  ir::DType dtype(uint32_t i) const { return op(i).node->outputs[0].dtype; }
  // The dtypes the fused kernel computes (float32 inside, half types
  // widened on entry and rounded once on exit).
  static bool computed(ir::DType t) {
    return t == ir::DType::kFloat32 || t == ir::DType::kBFloat16 || t == ir::DType::kFloat16;
  }
  static bool same(const ir::GraphRef& a, uint32_t node, uint32_t index = 0) {
    return a.node == node && a.index == index;
  }
  static bool same(const ir::GraphRef& a, const ir::GraphRef& b) { return same(a, b.node, b.index); }

  // An op whose values a call may stand for: live, floating, read by no one
  // outside the program, writing no input.
  bool replaceable(uint32_t i) const {
    const ProgramOp& o = op(i);
    return !o.erased && !output_[i] && o.node->mutated.empty() && computed(dtype(i));
  }

  // A cast between floating dtypes on the chain: autocast's (bf16 products,
  // float32 softmax) and a model's own (softmax(x, dtype=float32).to(x.dtype)).
  // The call computes the chain in float32, so a cast moves only where the
  // eager ops round.
  bool cast(uint32_t i) const {
    return kind(i) == Op::kToCopy && inner(i) && op(i).inputs.size() == 1 &&
           computed(type(op(i).inputs[0]).dtype);
  }

  // Up the chain from x through its casts, which join `chain`: the op that
  // reads the value returned is then chain.back().
  uint32_t up_casts(uint32_t x, std::vector<uint32_t>& chain) const {
    while (cast(x) && op(x).inputs[0].index == 0) {
      chain.push_back(x);
      x = op(x).inputs[0].node;
    }
    return x;
  }

  // Down the chain from y (read by `from`) through its casts, which join
  // `chain`; `from` becomes the op that y, the op returned, reads.
  uint32_t down_casts(uint32_t y, uint32_t& from, std::vector<uint32_t>& chain) const {
    while (cast(y) && same(op(y).inputs[0], from)) {
      chain.push_back(y);
      from = y;
      y = users_[y][0];
    }
    return y;
  }

  // An op of the chain: replaceable, one output read by exactly one op.
  bool inner(uint32_t i) const {
    return replaceable(i) && op(i).node->outputs.size() == 1 && users_[i].size() == 1;
  }

  // Whether i's readers are `known` and at most one other, which `other`
  // then names.
  bool read_by(uint32_t i, uint32_t known, std::optional<uint32_t>& other) const {
    const std::vector<uint32_t>& us = users_[i];
    if (us.empty() || us.size() > 2 || std::find(us.begin(), us.end(), known) == us.end()) return false;
    if (us.size() == 2) other = us[0] == known ? us[1] : us[0];
    return true;
  }

  // The one input an inner op reads the chain through, when it is `expected`.
  std::optional<uint32_t> source(uint32_t i, Op expected) const {
    if (kind(i) != expected || !inner(i) || op(i).inputs.empty() || op(i).inputs[0].index != 0)
      return std::nullopt;
    return op(i).inputs[0].node;
  }

  // transpose(x, 1, 2) of a [N, R, C] value, read only by the op it feeds.
  bool transposes(uint32_t t, const ir::GraphRef& x) const {
    if (kind(t) != Op::kTranspose || !inner(t) || op(t).inputs.size() != 1 || !same(op(t).inputs[0], x))
      return false;
    const ir::Attr* a = op(t).node->attr_operand(1);
    const ir::Attr* b = op(t).node->attr_operand(2);
    if (!a || !b || dims(t).size() != 3) return false;
    const int64_t d0 = wrap_dim(a->i, 3), d1 = wrap_dim(b->i, 3);
    return std::min(d0, d1) == 1 && std::max(d0, d1) == 2;
  }

  // A bmm the fused backward may compute: of the call's dtype, in no group
  // or call.
  bool backward_bmm(uint32_t i, ir::DType t) const {
    const ProgramOp& o = op(i);
    return !o.erased && kind(i) == Op::kBmm && dtype(i) == t && o.inputs.size() == 2 && o.group < 0 &&
           o.gemm_group < 0 && o.attention < 0 && o.node->mutated.empty();
  }

  std::optional<Match> match(uint32_t out) const {
    const ProgramOp& bmm2 = op(out);
    if (bmm2.erased || kind(out) != Op::kBmm || !computed(dtype(out)) || bmm2.group >= 0 ||
        bmm2.gemm_group >= 0 || bmm2.attention >= 0)
      return std::nullopt;
    Match m;
    Readers readers;
    // probs viewed [BH, Lq, Lk]
    const uint32_t probs3 = bmm2.inputs[0].node;
    if (bmm2.inputs[0].index != 0 || kind(probs3) != Op::kReshape || !replaceable(probs3) ||
        op(probs3).inputs.empty() || !read_by(probs3, out, readers.probs_t))
      return std::nullopt;
    m.chain.push_back(probs3);
    if (op(probs3).inputs[0].index != 0) return std::nullopt;
    uint32_t x = up_casts(op(probs3).inputs[0].node, m.chain);
    std::optional<uint32_t> dropout;
    if (kind(x) == Op::kNativeDropout) {
      if (!dropped_out(x, m.call) || !read_by(x, m.chain.back(), readers.dropout_grad)) return std::nullopt;
      dropout = x;
      m.chain.push_back(x);
      x = up_casts(op(x).inputs[0].node, m.chain);
    }
    const uint32_t sm = x;
    if (kind(sm) != Op::kSoftmax && kind(sm) != Op::kSafeSoftmax) return std::nullopt;
    const ir::Node& smn = *op(sm).node;
    const ir::Attr* dim = smn.attr_operand(1);
    if (!replaceable(sm) || smn.outputs.size() != 1 || dims(sm).size() != 4 || !dim || (dim->i != -1 && dim->i != 3) ||
        op(sm).inputs.empty() || !read_by(sm, m.chain.back(), readers.softmax_grad))
      return std::nullopt;
    if (const ir::Attr* half = smn.attr_operand(2); half && half->i) return std::nullopt;
    const std::vector<uint32_t>& s4 = dims(sm);
    if (dims(probs3).size() != 3 || dims(probs3)[1] != s4[2] || dims(probs3)[2] != s4[3]) return std::nullopt;
    m.call.scores = sm;
    m.call.nan_when_all_masked = kind(sm) == Op::kSoftmax;
    m.chain.push_back(sm);
    if (op(sm).inputs[0].index != 0) return std::nullopt;
    x = up_casts(op(sm).inputs[0].node, m.chain);
    std::optional<ir::GraphRef> mask, scale;
    if (kind(x) == Op::kAdd) {  // scores + mask
      const ProgramOp& add = op(x);
      const ir::Attr* alpha = add.node->attr_operand(2);
      if (!inner(x) || !alpha || !alpha->is_one() || dims(x) != s4 || add.inputs[0].index != 0)
        return std::nullopt;
      if (!computed(type(add.inputs[1]).dtype) || type(add.inputs[1]).sizes.size() > 4) return std::nullopt;
      mask = add.inputs[1];
      m.chain.push_back(x);
      x = up_casts(add.inputs[0].node, m.chain);
    }
    if (std::optional<uint32_t> y = scaled(x, m.call, scale)) {
      m.chain.push_back(x);
      x = up_casts(*y, m.chain);
    }
    // scores viewed [B, H, Lq, Lk] from bmm(q, k^T) [BH, Lq, Lk]
    std::optional<uint32_t> bmm1 = source(x, Op::kReshape);
    if (!bmm1 || dims(x) != s4 || kind(*bmm1) != Op::kBmm || !inner(*bmm1)) return std::nullopt;
    const std::vector<uint32_t>& s3 = dims(*bmm1);
    if (s3.size() != 3 || s3[1] != s4[2] || s3[2] != s4[3]) return std::nullopt;
    m.chain.push_back(x);
    m.chain.push_back(*bmm1);
    const ir::GraphRef q = op(*bmm1).inputs[0], kt = op(*bmm1).inputs[1], v = bmm2.inputs[1];
    // The call reads q, k and v in one dtype and returns the bmm's.
    m.dtype = dtype(out);
    for (const ir::GraphRef& r : {q, kt, v})
      if (type(r).dtype != m.dtype) return std::nullopt;
    // The mask is float32 or the call's dtype (a half mask is widened).
    if (mask && type(*mask).dtype != ir::DType::kFloat32 && type(*mask).dtype != m.dtype) return std::nullopt;
    m.inputs = {q, kt, v};
    if (scale) m.inputs.push_back(*scale);
    if (mask) m.inputs.push_back(*mask);
    m.call.mask = mask.has_value();
    if (readers.probs_t || readers.softmax_grad || readers.dropout_grad) {
      m.backward = match_backward(out, probs3, dropout, sm, readers, m);
      if (!m.backward) return std::nullopt;
      if (mask) m.backward->inputs.push_back(*mask);
    }
    return m;
  }

  // native_dropout(x, p, train) of the probabilities: p in (0, 1), training.
  bool dropped_out(uint32_t d, AttentionCall& call) const {
    const ProgramOp& o = op(d);
    const ir::Attr* p = o.node->attr_operand(1);
    const ir::Attr* train = o.node->attr_operand(2);
    if (!replaceable(d) || o.node->outputs.size() != 2 || o.inputs.size() != 1 || o.inputs[0].index != 0 ||
        o.node->rng_runtime < 0)
      return false;
    if (!p || p->kind != ir::Attr::Kind::kDouble || !(p->d > 0 && p->d < 1)) return false;
    if (train && train->kind == ir::Attr::Kind::kBool && !train->i) return false;
    call.dropout = static_cast<int32_t>(d);
    call.dropout_p = p->d;
    return true;
  }

  // Autograd's backward of the chain (the file's comment), or nullopt
  // where anything differs.
  std::optional<Backward> match_backward(uint32_t out, uint32_t probs3, std::optional<uint32_t> dropout,
                                         uint32_t sm, const Readers& r, Match& m) const {
    if (!r.probs_t || !r.softmax_grad || dropout.has_value() != r.dropout_grad.has_value()) return std::nullopt;
    const ir::GraphRef q = m.inputs[0], kt = m.inputs[1], v = m.inputs[2];
    Backward b;
    std::vector<uint32_t> erased;
    // grad v = bmm(probs^T, grad out)
    if (!transposes(*r.probs_t, {probs3, 0})) return std::nullopt;
    b.grad_v = users_[*r.probs_t][0];
    if (!backward_bmm(b.grad_v, m.dtype) || !same(op(b.grad_v).inputs[0], *r.probs_t)) return std::nullopt;
    const ir::GraphRef go = op(b.grad_v).inputs[1];
    if (type(go).dtype != m.dtype) return std::nullopt;
    erased.push_back(*r.probs_t);
    // grad probs = bmm(grad out, v^T) viewed [B, H, Lq, Lk], through the
    // dropout's backward, into the softmax's
    const uint32_t sb = *r.softmax_grad;
    const ProgramOp& sbo = op(sb);
    const ir::Attr* sb_dim = sbo.node->attr_operand(2);
    if (kind(sb) != Op::kSoftmaxBackward || !inner(sb) || sbo.inputs.size() != 2 || !same(sbo.inputs[1], sm) ||
        sbo.inputs[0].index != 0 || dims(sb) != dims(sm) || !sb_dim || (sb_dim->i != -1 && sb_dim->i != 3))
      return std::nullopt;
    erased.push_back(sb);
    uint32_t g = up_casts(sbo.inputs[0].node, erased);
    if (dropout) {
      const ProgramOp& db = op(g);
      const ir::Attr* scale = db.node->attr_operand(2);
      if (g != *r.dropout_grad || kind(g) != Op::kNativeDropoutBackward || !inner(g) || db.inputs.size() != 2 ||
          !same(db.inputs[1], *dropout, 1) || db.inputs[0].index != 0 || !scale ||
          scale->kind != ir::Attr::Kind::kDouble || scale->d != 1.0 / (1.0 - m.call.dropout_p))
        return std::nullopt;
      erased.push_back(g);
      g = up_casts(db.inputs[0].node, erased);
    }
    std::optional<uint32_t> dp = source(g, Op::kReshape);
    if (!dp || dims(g) != dims(sm) || !inner(*dp) || kind(*dp) != Op::kBmm || op(*dp).inputs.size() != 2 ||
        !same(op(*dp).inputs[0], go) || !transposes(op(*dp).inputs[1].node, v) ||
        op(*dp).inputs[1].index != 0)
      return std::nullopt;
    erased.insert(erased.end(), {g, *dp, op(*dp).inputs[1].node});
    // grad scores, scaled as the forward scaled them, viewed [BH, Lq, Lk]
    uint32_t from = sb;
    uint32_t y = down_casts(users_[sb][0], from, erased);
    std::optional<ir::GraphRef> grad_scale;
    if (m.call.scale != AttentionCall::Scale::kNone) {
      if (!scales_back(y, from, m.call, grad_scale)) return std::nullopt;
      erased.push_back(y);
      from = y;
      y = down_casts(users_[y][0], from, erased);
    }
    // (B * H may be another symbol here: its product is not tracked.)
    const uint32_t gs3 = y;
    if (kind(gs3) != Op::kReshape || !replaceable(gs3) || op(gs3).node->outputs.size() != 1 ||
        users_[gs3].size() != 2 || dims(gs3).size() != 3 || dims(gs3)[1] != dims(probs3)[1] ||
        dims(gs3)[2] != dims(probs3)[2])
      return std::nullopt;
    erased.push_back(gs3);
    std::optional<uint32_t> grad_q, grad_kt;
    for (uint32_t u : users_[gs3]) {
      if (!backward_bmm(u, m.dtype)) return std::nullopt;
      const ProgramOp& uo = op(u);
      if (same(uo.inputs[0], gs3) && transposes(uo.inputs[1].node, kt) && uo.inputs[1].index == 0) {
        grad_q = u;
        erased.push_back(uo.inputs[1].node);
      } else if (same(uo.inputs[1], gs3) && transposes(uo.inputs[0].node, q) && uo.inputs[0].index == 0) {
        grad_kt = u;
        erased.push_back(uo.inputs[0].node);
      }
    }
    if (!grad_q || !grad_kt) return std::nullopt;
    b.grad_q = *grad_q, b.grad_kt = *grad_kt;
    b.inputs = {q, kt, v, {out, 0}, go};
    if (m.call.scale == AttentionCall::Scale::kMulTensor || m.call.scale == AttentionCall::Scale::kDivTensor)
      b.inputs.insert(b.inputs.end(), {m.inputs[3], *grad_scale});
    m.chain.insert(m.chain.end(), erased.begin(), erased.end());
    return b;
  }

  // i's second input where it is a 0-dim floating tensor: a scale.
  std::optional<ir::GraphRef> scale_operand(uint32_t i) const {
    const ProgramOp& o = op(i);
    if (o.inputs.size() != 2 || !type(o.inputs[1]).sizes.empty()) return std::nullopt;
    const ir::DType t = type(o.inputs[1]).dtype;
    if (!computed(t) && t != ir::DType::kFloat64) return std::nullopt;
    return o.inputs[1];
  }

  // i's scalar attribute (operand 1), a double or an int; a runtime scalar
  // (not an attribute) is not matched.
  std::optional<double> scale_constant(uint32_t i) const {
    const ir::Attr* c = op(i).node->attr_operand(1);
    if (!c) return std::nullopt;
    if (c->kind == ir::Attr::Kind::kScalarDouble) return c->d;
    if (c->kind == ir::Attr::Kind::kScalarInt) return static_cast<double>(c->i);
    return std::nullopt;
  }

  // Whether y scales the softmax's gradient (`g`: it, or a cast of it) as
  // `call` scales the scores (mul or div by a scalar tensor, which
  // `grad_scale` then names, or by the same constant).
  bool scales_back(uint32_t y, uint32_t g, const AttentionCall& call, std::optional<ir::GraphRef>& grad_scale) const {
    const ProgramOp& o = op(y);
    if (!inner(y) || o.inputs.empty() || !same(o.inputs[0], g) || dims(y) != dims(g)) return false;
    switch (call.scale) {
      case AttentionCall::Scale::kMulTensor:
      case AttentionCall::Scale::kDivTensor: {
        const Op want = call.scale == AttentionCall::Scale::kMulTensor ? Op::kMul : Op::kDiv;
        if (kind(y) != want) return false;
        grad_scale = scale_operand(y);
        return grad_scale.has_value();
      }
      case AttentionCall::Scale::kMulConstant:
      case AttentionCall::Scale::kDivConstant: {
        const Op want = call.scale == AttentionCall::Scale::kMulConstant ? Op::kMulScalar : Op::kDivScalar;
        return kind(y) == want && scale_constant(y) == call.constant;
      }
      case AttentionCall::Scale::kNone: return false;
    }
    return false;
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
      scale = scale_operand(x);
      if (!scale) return std::nullopt;
      call.scale = k == Op::kMul ? AttentionCall::Scale::kMulTensor : AttentionCall::Scale::kDivTensor;
      return o.inputs[0].node;
    }
    const std::optional<double> c = scale_constant(x);
    if (!c) return std::nullopt;
    call.constant = *c;
    call.scale = k == Op::kMulScalar ? AttentionCall::Scale::kMulConstant : AttentionCall::Scale::kDivConstant;
    return o.inputs[0].node;
  }

  void rewrite(uint32_t out, Match& m) {
    const int32_t index = static_cast<int32_t>(p_.attentions.size());
    ProgramOp& bmm2 = p_.ops[out];
    bmm2.inputs = std::move(m.inputs);
    bmm2.attention = index;
    if (m.backward) {
      const Backward& b = *m.backward;
      m.call.grad_q = static_cast<int32_t>(b.grad_q);
      m.call.grad_kt = static_cast<int32_t>(b.grad_kt);
      m.call.grad_v = static_cast<int32_t>(b.grad_v);
      std::vector<uint32_t> members{b.grad_q, b.grad_kt, b.grad_v};
      std::sort(members.begin(), members.end());
      for (uint32_t g : members) {
        p_.ops[g].inputs = b.inputs;
        p_.ops[g].attention = index;
        p_.ops[g].gemm_group = static_cast<int32_t>(p_.gemm_groups.size());
      }
      p_.gemm_groups.push_back({GemmMergeKind::kAttentionBackward, members, index});
    }
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
  drop_gemm_groups(p, true);
  for (ProgramOp& op : p.ops) op.attention = -1;
  if (p.target != Target::kCpu) return;  // the fused kernel is the CPU's
  if (options::text(options::Id::kAttention) != "fused") return;
  Matcher(p).run();
}

}  // namespace disc::lowering
