// shape_constraints: every dim gets a symbol; ops make symbols equal.
//
//   %0 = param [s1, s2]          %1 = param [s3, s4]     (fresh per input dim)
//   %2 = aten::mm(%0, %1)        s2 == s3, out [s1, s4]
//   %3 = aten::relu(%2)          out [s1, s4]
//   %4 = aten::reshape(%3, ..)   [s1, s4] -> [s5]: product s1*s4 == s5
//
// Size-1 dims are the constant symbol 0 (specialized, as broadcasting
// depends on them). Fusion uses the symbols to decide which ops iterate the
// same space; a shape-generic kernel takes one runtime size per symbol.
#include <numeric>

#include "lowering/passes/passes.h"

namespace disc::lowering {

namespace {

class Dims {
 public:
  explicit Dims(const Program& p) : base_(p.ops.size()) {
    uint32_t next = 1;  // slot 0: the constant 1
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      for (const ir::TensorType& t : p.ops[i].node->outputs) {
        base_[i].push_back(next);
        next += static_cast<uint32_t>(t.sizes.size());
      }
    }
    parent_.resize(next);
    std::iota(parent_.begin(), parent_.end(), 0u);
  }
  uint32_t slot(uint32_t op, uint32_t out, size_t axis) const {
    return base_[op][out] + static_cast<uint32_t>(axis);
  }
  uint32_t find(uint32_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void unite(uint32_t a, uint32_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    if (a > b) std::swap(a, b);  // the constant 1 (slot 0) stays the root
    parent_[b] = a;
  }

 private:
  std::vector<std::vector<uint32_t>> base_;
  std::vector<uint32_t> parent_;
};

class Rules {
 public:
  Rules(Program& p, Dims& d) : p_(p), d_(d) {}

  void apply(uint32_t i) {
    const ProgramOp& op = p_.ops[i];
    const ir::Node& n = *op.node;
    const Op kind = op_of(n.op);
    // An updated input keeps its shape -- unless the op resized it (an out=
    // buffer, often a shared empty one): then old and new dims are unrelated.
    for (size_t j = 0; j < n.mutated.size(); ++j) {
      const Ref before = in(i, n.mutated[j]), after{i, n.num_returns + static_cast<uint32_t>(j)};
      if (sizes(before) == sizes(after)) same_shape(before, after);
    }
    if (n.num_returns == 0 && n.mutated.empty()) return;
    switch (op.cls) {
      case OpClass::kElementwise:
      case OpClass::kBroadcast:
        if (kind == Op::kUnsqueeze) return unsqueeze(i);
        for (uint32_t k = 0; k < op.inputs.size(); ++k) broadcast(in(i, k), {i, 0});
        return;
      case OpClass::kReduction: return reduction(i);
      case OpClass::kStitch: return stitch(i, kind);
      case OpClass::kLibrary: return library(i, kind);
      case OpClass::kLayout: return layout(i, kind);
      default: return;
    }
  }

 private:
  struct Ref { uint32_t op, out; };
  Ref in(uint32_t i, uint32_t k) const {
    const ir::GraphRef& r = p_.ops[i].inputs.at(k);
    return {r.node, r.index};
  }
  const std::vector<int64_t>& sizes(Ref r) const { return p_.ops[r.op].node->outputs[r.out].sizes; }
  size_t rank(Ref r) const { return sizes(r).size(); }
  void eq(Ref a, size_t ax, Ref b, size_t bx) { d_.unite(d_.slot(a.op, a.out, ax), d_.slot(b.op, b.out, bx)); }

  void same_shape(Ref a, Ref b) {
    if (rank(a) != rank(b)) return;
    for (size_t k = 0; k < rank(a); ++k) eq(a, k, b, k);
  }
  // Right-aligned broadcasting: a non-1 input dim equals the output dim.
  void broadcast(Ref from, Ref to) {
    size_t r = rank(to), k = rank(from);
    if (k > r) return;
    for (size_t a = 0; a < k; ++a)
      if (sizes(from)[a] != 1) eq(from, a, to, a + r - k);
  }
  void unsqueeze(uint32_t i) {
    Ref src = in(i, 0), out{i, 0};
    int64_t dim = wrap_dim(p_.ops[i].node->attr_operand(1)->i, rank(out));
    for (size_t a = 0, b = 0; b < rank(out); ++b)
      if (static_cast<int64_t>(b) != dim) eq(src, a++, out, b);
  }
  void reduction(uint32_t i) {
    const ir::Node& n = *p_.ops[i].node;
    Ref src = in(i, 0), out{i, 0};
    const ir::Attr* dims = n.attr_operand(1);
    if (!dims || dims->kind != ir::Attr::Kind::kIntList) return;  // full reduction
    if (rank(src) == 0) return;  // sum(scalar, 0): dim 0 / -1 name the scalar itself
    std::vector<bool> reduced(rank(src), dims->ints.empty());
    for (int64_t d : dims->ints) reduced[wrap_dim(d, rank(src))] = true;
    const bool keepdim = rank(out) == rank(src);
    for (size_t a = 0, b = 0; a < rank(src); ++a) {
      if (!reduced[a]) eq(src, a, out, b);
      if (!reduced[a] || keepdim) ++b;
    }
  }
  void stitch(uint32_t i, Op kind) {
    Ref out{i, 0};
    same_shape(in(i, 0), out);
    if (kind == Op::kSoftmaxBackward || kind == Op::kLogSoftmaxBackward) same_shape(in(i, 1), out);
    if (kind == Op::kLayerNormBackward) same_shape(in(i, 1), out);
    if (kind == Op::kLayerNorm) {
      // mean and rstd keep the leading (batch) dims of the input.
      for (uint32_t o = 1; o < 3; ++o)
        for (size_t a = 0; a < rank({i, o}) && a < rank(in(i, 0)); ++a)
          if (sizes({i, o})[a] != 1) eq(in(i, 0), a, {i, o}, a);
    }
  }
  void library(uint32_t i, Op kind) {
    Ref out{i, 0};
    if (kind == Op::kMm || kind == Op::kAddmm || kind == Op::kBmm) {
      uint32_t first = kind == Op::kAddmm ? 1 : 0;
      Ref a = in(i, first), b = in(i, first + 1);
      size_t r = rank(out);
      if (rank(a) != r || rank(b) != r) return;
      for (size_t k = 0; k + 2 < r; ++k) { eq(a, k, out, k); eq(b, k, out, k); }
      eq(a, r - 2, out, r - 2);
      eq(b, r - 1, out, r - 1);
      eq(a, r - 1, b, r - 2);
      if (first == 1) broadcast(in(i, 0), out);
    } else if (kind == Op::kConvolution) {
      conv(i);
    } else if (kind == Op::kConvolutionBackward) {
      same_shape(in(i, 1), {i, 0});  // grad_input ~ input
      same_shape(in(i, 2), {i, 1});  // grad_weight ~ weight
    }
  }
  // convolution(input, weight, bias?, stride, padding, dilation, transposed,
  // output_padding, groups). The weight is [out, in / groups, ...], or
  // [in, out / groups, ...] when transposed: a channel count equals a weight
  // dim only where no group divides it. A depthwise conv's weight dim 1 is
  // 1: equating the input's channels with it would make them "size 1", and
  // a kernel producing them would read its rows as broadcast.
  void conv(uint32_t i) {
    const ir::Node& n = *p_.ops[i].node;
    const Ref input = in(i, 0), weight = in(i, 1), out{i, 0};
    const ir::Attr* transposed = n.attr_operand(6);
    const ir::Attr* groups = n.attr_operand(8);
    if (!transposed || !groups) return;
    eq(input, 0, out, 0);  // batch
    const bool ungrouped = groups->i == 1;
    if (transposed->i) {
      eq(input, 1, weight, 0);
      if (ungrouped) eq(weight, 1, out, 1);
    } else {
      eq(weight, 0, out, 1);
      if (ungrouped) eq(input, 1, weight, 1);
    }
  }
  void layout(uint32_t i, Op kind) {
    const ir::Node& n = *p_.ops[i].node;
    Ref src = in(i, 0), out{i, 0};
    if (rank(src) == 0) return;  // a scalar has no dims to relate (dim 0 / -1 name it)
    if (kind == Op::kAlias) return same_shape(src, out);
    if (kind == Op::kTranspose) {
      int64_t a = wrap_dim(n.attr_operand(1)->i, rank(src));
      int64_t b = wrap_dim(n.attr_operand(2)->i, rank(src));
      for (size_t k = 0; k < rank(src); ++k)
        eq(src, k, out, static_cast<int64_t>(k) == a ? b : static_cast<int64_t>(k) == b ? a : k);
      return;
    }
    if (kind == Op::kPermute) {
      const auto& perm = n.attr_operand(1)->ints;
      for (size_t k = 0; k < perm.size(); ++k) eq(src, wrap_dim(perm[k], rank(src)), out, k);
      return;
    }
    if (kind == Op::kReshape) return reshape(src, out);
    std::vector<bool> dropped(rank(src), false);
    if (kind == Op::kSelect || kind == Op::kSqueezeDim) {
      dropped[wrap_dim(n.attr_operand(1)->i, rank(src))] = rank(out) < rank(src);
    } else if (kind == Op::kSqueezeDims) {
      for (int64_t dim : n.attr_operand(1)->ints)
        dropped[wrap_dim(dim, rank(src))] = sizes(src)[wrap_dim(dim, rank(src))] == 1;
    } else if (kind == Op::kSqueeze) {
      for (size_t a = 0; a < rank(src); ++a) dropped[a] = sizes(src)[a] == 1;
    } else if (kind == Op::kSlice) {
      // The sliced dim gets its own symbol; the others are unchanged.
      int64_t dim = wrap_dim(n.attr_operand(1)->i, rank(src));
      for (size_t a = 0; a < rank(src); ++a)
        if (static_cast<int64_t>(a) != dim) eq(src, a, out, a);
      return;
    } else {
      return;  // as_strided: no relation known
    }
    for (size_t a = 0, b = 0; a < rank(src); ++a)
      if (!dropped[a]) eq(src, a, out, b++);
  }
  // Equal dims at both ends are the same symbol; the middle is a product.
  void reshape(Ref src, Ref out) {
    const auto& a = sizes(src);
    const auto& b = sizes(out);
    size_t lo = 0;
    while (lo < a.size() && lo < b.size() && a[lo] == b[lo] && a[lo] != 1) { eq(src, lo, out, lo); ++lo; }
    size_t ha = a.size(), hb = b.size();
    while (ha > lo && hb > lo && a[ha - 1] == b[hb - 1] && a[ha - 1] != 1) { --ha; --hb; eq(src, ha, out, hb); }
    ProductConstraint c;
    for (size_t k = lo; k < ha; ++k) if (a[k] != 1) c.lhs.push_back(d_.slot(src.op, src.out, k));
    for (size_t k = lo; k < hb; ++k) if (b[k] != 1) c.rhs.push_back(d_.slot(out.op, out.out, k));
    if (c.lhs.size() == 1 && c.rhs.size() == 1) {
      d_.unite(c.lhs[0], c.rhs[0]);
    } else if (!c.lhs.empty() || !c.rhs.empty()) {
      products_.push_back(std::move(c));
    }
  }

 public:
  std::vector<ProductConstraint> products_;

 private:
  Program& p_;
  Dims& d_;
};

}  // namespace

void shape_constraints(Program& p) {
  Dims d(p);
  Rules rules(p, d);
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const ProgramOp& op = p.ops[i];
    for (uint32_t o = 0; o < op.node->outputs.size(); ++o) {
      const auto& sizes = op.node->outputs[o].sizes;
      for (size_t a = 0; a < sizes.size(); ++a)
        if (sizes[a] == 1) d.unite(0, d.slot(i, o, a));
    }
    if (!op.erased) rules.apply(i);
  }
  // Dense symbol numbers in order of first appearance; 0 stays "size 1".
  std::vector<int64_t> dense;
  auto symbol = [&](uint32_t slot) {
    uint32_t root = d.find(slot);
    if (root == 0) return 0u;
    if (root >= dense.size()) dense.resize(root + 1, -1);
    if (dense[root] < 0) dense[root] = p.num_symbols++;
    return static_cast<uint32_t>(dense[root]);
  };
  p.num_symbols = 1;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    ProgramOp& op = p.ops[i];
    op.dims.clear();
    for (uint32_t o = 0; o < op.node->outputs.size(); ++o) {
      op.dims.emplace_back();
      for (size_t a = 0; a < op.node->outputs[o].sizes.size(); ++a)
        op.dims.back().push_back(symbol(d.slot(i, o, a)));
    }
  }
  p.products.clear();
  for (ProductConstraint& c : rules.products_) {
    for (uint32_t& s : c.lhs) s = symbol(s);
    for (uint32_t& s : c.rhs) s = symbol(s);
    p.products.push_back(std::move(c));
  }
}

}  // namespace disc::lowering
