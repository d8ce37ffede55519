// Emits MLIR text for a kLoop group. Example, relu(x * y) over [s1, s2]:
//
//   scf.for %i0 = %begin to %end step %c1 {          // dim 0: split across threads
//     scf.for %i1 = %c0 to %d1 step %c1 {            // inner dims: full
//       %a = memref.load %in0[%offset_in0]           // offsets from runtime strides
//       %b = memref.load %in1[%offset_in1]
//       %m = arith.mulf %a, %b : f32
//       %r = select(%m > 0 or NaN, %m, 0)
//       memref.store %r, %out0[%offset_out]
//
// Values are computed in f32; inputs of other dtypes (Python scalars arrive
// as f64 / i64) are converted on load, as torch converts wrapped numbers.
#include "lowering/codegen/loop_kernel.h"

#include <map>
#include <sstream>

namespace disc::lowering {

namespace {

const char* memref_elem(ir::DType t) {
  switch (t) {
    case ir::DType::kFloat32: return "f32";
    case ir::DType::kFloat64: return "f64";
    case ir::DType::kInt64: return "i64";
    case ir::DType::kInt32: return "i32";
    default: return nullptr;
  }
}

const ir::Attr* operand_attr(const ir::Node& n, size_t k) {
  if (k >= n.operands.size() || n.operands[k].kind != ir::Operand::Kind::kAttr) return nullptr;
  return &n.attrs[n.operands[k].first];
}

class Emitter {
 public:
  Emitter(const Program& p, uint32_t g, const std::vector<bool>& used_outside)
      : p_(p), group_(p.groups[g]), used_outside_(used_outside) {
    // One name for all: equal groups then give equal text, and the JIT
    // cache compiles each distinct kernel once per process.
    kernel_.name = "loop_kernel";
    (void)g;
    for (uint32_t op : group_.ops) in_group_[op] = true;
  }

  std::optional<LoopKernel> run(std::string* why) {
    const ProgramOp& last = p_.ops[group_.ops.back()];
    kernel_.rank = std::max<uint32_t>(1, static_cast<uint32_t>(last.node->outputs[0].sizes.size()));
    // Collect inputs and check every op first: the signature needs them.
    for (uint32_t op : group_.ops) {
      const ir::Node& n = *p_.ops[op].node;
      if (n.outputs.size() != 1 || n.outputs[0].dtype != ir::DType::kFloat32)
        return fail(why, op, "only single f32 outputs are generated");
      if (!supported(ir::op_name(n.op))) return fail(why, op, "op has no loop codegen");
      for (const ir::GraphRef& r : p_.ops[op].inputs) {
        if (in_group_.count(r.node)) continue;
        if (input_index_.count({r.node, r.index})) continue;
        ir::DType t = p_.ops[r.node].node->outputs[r.index].dtype;
        if (!memref_elem(t)) return fail(why, op, "input dtype has no loop codegen");
        input_index_[{r.node, r.index}] = kernel_.inputs.size();
        kernel_.inputs.push_back(r);
        kernel_.input_dtypes.push_back(t);
      }
      for (uint32_t k = 0; k < n.runtime.size(); ++k) kernel_.runtime.push_back({op, k});
      if (used_outside_[op]) kernel_.outputs.push_back(op);
    }
    emit();
    return kernel_;
  }

 private:
  static bool supported(const std::string& op) {
    static const char* ops[] = {
        "aten::add.Tensor", "aten::add_.Tensor", "aten::sub.Tensor", "aten::sub_.Tensor",
        "aten::mul.Tensor", "aten::mul_.Tensor", "aten::div.Tensor", "aten::div_.Tensor",
        "aten::neg", "aten::exp", "aten::log", "aten::sqrt", "aten::rsqrt", "aten::tanh",
        "aten::sigmoid", "aten::relu", "aten::abs", "aten::threshold_backward",
        "aten::sqrt_", "aten::lerp_.Scalar", "aten::addcmul_", "aten::addcdiv_", "aten::zero_",
        "aten::fill_.Scalar"};
    for (const char* s : ops)
      if (op == s) return true;
    return false;
  }

  std::optional<LoopKernel> fail(std::string* why, uint32_t op, const std::string& what) {
    if (why) *why = ir::op_name(p_.ops[op].node->op) + ": " + what;
    return std::nullopt;
  }

  std::string fresh() { return "%v" + std::to_string(next_++); }
  std::string line(const std::string& s) { body_ << "    " << s << "\n"; return s; }
  std::string f32_const(double v) {
    std::string name = fresh();
    std::ostringstream os;
    os.precision(17);
    os << name << " = arith.constant " << std::scientific << v << " : f32";
    line(os.str());
    return name;
  }
  std::string op_f(const char* op, const std::string& a, const std::string& b) {
    std::string r = fresh();
    line(r + " = " + op + " " + a + ", " + b + " : f32");
    return r;
  }
  std::string op_u(const char* op, const std::string& a) {
    std::string r = fresh();
    line(r + " = " + op + " " + a + " : f32");
    return r;
  }
  std::string select_f(const std::string& cond, const std::string& a, const std::string& b) {
    std::string r = fresh();
    line(r + " = arith.select " + cond + ", " + a + ", " + b + " : f32");
    return r;
  }
  std::string cmp(const char* pred, const std::string& a, const std::string& b) {
    std::string r = fresh();
    line(r + " = arith.cmpf " + pred + ", " + a + ", " + b + " : f32");
    return r;
  }

  // A Scalar operand (alpha, threshold) as an f32 SSA value.
  std::string scalar_operand(uint32_t op, size_t k) {
    const ir::Node& n = *p_.ops[op].node;
    const ir::Operand& o = n.operands.at(k);
    if (o.kind == ir::Operand::Kind::kRuntime) {
      size_t slot = 0;
      for (; slot < kernel_.runtime.size(); ++slot)
        if (kernel_.runtime[slot] == std::make_pair(op, o.first)) break;
      std::string idx = fresh(), d = fresh(), f = fresh();
      line(idx + " = arith.constant " + std::to_string(slot) + " : index");
      line(d + " = memref.load %scalars[" + idx + "] : memref<?xf64>");
      line(f + " = arith.truncf " + d + " : f64 to f32");
      return f;
    }
    const ir::Attr& a = n.attrs.at(o.first);
    return f32_const(a.kind == ir::Attr::Kind::kScalarDouble ? a.d : static_cast<double>(a.i));
  }

  bool is_one(uint32_t op, size_t k) {
    const ir::Attr* a = operand_attr(*p_.ops[op].node, k);
    return a && ((a->kind == ir::Attr::Kind::kScalarInt && a->i == 1) ||
                 (a->kind == ir::Attr::Kind::kScalarDouble && a->d == 1.0));
  }

  std::string value(const ir::GraphRef& r) {
    if (in_group_.count(r.node)) return result_.at(r.node);
    size_t k = input_index_.at({r.node, r.index});
    return loaded_.at(k);
  }

  std::string compute(uint32_t op) {
    const ProgramOp& po = p_.ops[op];
    const std::string name = ir::op_name(po.node->op);
    auto in = [&](size_t k) { return value(po.inputs.at(k)); };
    if (name == "aten::add.Tensor" || name == "aten::add_.Tensor" || name == "aten::sub.Tensor" ||
        name == "aten::sub_.Tensor") {
      std::string b = in(1);
      if (!is_one(op, 2)) b = op_f("arith.mulf", scalar_operand(op, 2), b);
      return op_f(name.find("add") != std::string::npos ? "arith.addf" : "arith.subf", in(0), b);
    }
    if (name == "aten::mul.Tensor" || name == "aten::mul_.Tensor") return op_f("arith.mulf", in(0), in(1));
    if (name == "aten::div.Tensor" || name == "aten::div_.Tensor") return op_f("arith.divf", in(0), in(1));
    if (name == "aten::neg") return op_u("arith.negf", in(0));
    if (name == "aten::zero_") return f32_const(0.0);
    if (name == "aten::fill_.Scalar") return scalar_operand(op, 1);
    if (name == "aten::sqrt_") return op_u("math.sqrt", in(0));
    if (name == "aten::addcmul_" || name == "aten::addcdiv_") {
      // self + value * (t1 op t2), torch's order of operations.
      std::string t = op_f(name == "aten::addcmul_" ? "arith.mulf" : "arith.divf", in(1), in(2));
      if (!is_one(op, 3)) t = op_f("arith.mulf", scalar_operand(op, 3), t);
      return op_f("arith.addf", in(0), t);
    }
    if (name == "aten::lerp_.Scalar") {
      // As torch: w < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w).
      std::string self = in(0), end = in(1), w = scalar_operand(op, 2);
      std::string diff = op_f("arith.subf", end, self);
      std::string low = op_f("arith.addf", self, op_f("arith.mulf", w, diff));
      std::string high = op_f("arith.subf", end,
                              op_f("arith.mulf", diff, op_f("arith.subf", f32_const(1.0), w)));
      std::string cond = fresh();
      line(cond + " = arith.cmpf olt, " + w + ", " + f32_const(0.5) + " : f32");
      return select_f(cond, low, high);
    }
    if (name == "aten::exp") return op_u("math.exp", in(0));
    if (name == "aten::log") return op_u("math.log", in(0));
    if (name == "aten::sqrt") return op_u("math.sqrt", in(0));
    if (name == "aten::rsqrt") return op_u("math.rsqrt", in(0));
    if (name == "aten::tanh") return op_u("math.tanh", in(0));
    if (name == "aten::abs") return op_u("math.abs", in(0));
    if (name == "aten::sigmoid") {
      std::string e = op_u("math.exp", op_u("arith.negf", in(0)));
      return op_f("arith.divf", f32_const(1.0), op_f("arith.addf", f32_const(1.0), e));
    }
    if (name == "aten::relu") {
      // NaN stays NaN, as in torch: "unordered or greater than zero".
      std::string x = in(0);
      return select_f(cmp("ugt", x, f32_const(0.0)), x, f32_const(0.0));
    }
    if (name == "aten::threshold_backward") {
      // grad where self > threshold, else 0.
      std::string t = scalar_operand(op, 2);
      return select_f(cmp("ole", in(1), t), f32_const(0.0), in(0));
    }
    throw std::logic_error("unsupported op reached codegen: " + name);
  }

  void emit() {
    const uint32_t R = kernel_.rank;
    std::ostringstream sig;
    sig << "func.func @" << kernel_.name << "(";
    for (size_t k = 0; k < kernel_.inputs.size(); ++k)
      sig << "%in" << k << ": memref<?x" << memref_elem(kernel_.input_dtypes[k]) << ">, ";
    for (size_t k = 0; k < kernel_.outputs.size(); ++k) sig << "%out" << k << ": memref<?xf32>, ";
    sig << "%sizes: memref<?xindex>, %strides: memref<?xindex>, %scalars: memref<?xf64>, "
        << "%begin: index, %end: index) {\n";
    std::ostringstream pre;
    pre << "  %c0 = arith.constant 0 : index\n  %c1 = arith.constant 1 : index\n";
    for (uint32_t a = 0; a < R; ++a)
      pre << "  %ca" << a << " = arith.constant " << a << " : index\n"
          << "  %d" << a << " = memref.load %sizes[%ca" << a << "] : memref<?xindex>\n";
    for (size_t k = 0; k < kernel_.inputs.size(); ++k)
      for (uint32_t a = 0; a < R; ++a)
        pre << "  %csi" << k << "_" << a << " = arith.constant " << k * R + a << " : index\n"
            << "  %s" << k << "_" << a << " = memref.load %strides[%csi" << k << "_" << a
            << "] : memref<?xindex>\n";
    // Nested loops; offsets accumulate per level: off = prev + i * stride.
    std::ostringstream loops;
    std::string indent = "  ";
    for (uint32_t a = 0; a < R; ++a) {
      loops << indent << "scf.for %i" << a << " = " << (a == 0 ? "%begin" : "%c0") << " to "
            << (a == 0 ? "%end" : "%d" + std::to_string(a)) << " step %c1 {\n";
      indent += "  ";
      // Output offset: row-major over the loop shape.
      if (a == 0) {
        loops << indent << "%o0 = arith.addi %i0, %c0 : index\n";
      } else {
        loops << indent << "%om" << a << " = arith.muli %o" << a - 1 << ", %d" << a << " : index\n"
              << indent << "%o" << a << " = arith.addi %om" << a << ", %i" << a << " : index\n";
      }
      for (size_t k = 0; k < kernel_.inputs.size(); ++k) {
        loops << indent << "%m" << k << "_" << a << " = arith.muli %i" << a << ", %s" << k << "_"
              << a << " : index\n";
        if (a == 0) {
          loops << indent << "%p" << k << "_0 = arith.addi %m" << k << "_0, %c0 : index\n";
        } else {
          loops << indent << "%p" << k << "_" << a << " = arith.addi %p" << k << "_" << a - 1
                << ", %m" << k << "_" << a << " : index\n";
        }
      }
    }
    // Innermost body: load inputs, compute the group, store outputs.
    for (size_t k = 0; k < kernel_.inputs.size(); ++k) {
      std::string raw = fresh();
      const char* t = memref_elem(kernel_.input_dtypes[k]);
      line(raw + " = memref.load %in" + std::to_string(k) + "[%p" + std::to_string(k) + "_" +
           std::to_string(R - 1) + "] : memref<?x" + t + ">");
      std::string v = raw;
      if (std::string(t) == "f64") {
        v = fresh();
        line(v + " = arith.truncf " + raw + " : f64 to f32");
      } else if (std::string(t) == "i64" || std::string(t) == "i32") {
        v = fresh();
        line(v + " = arith.sitofp " + raw + " : " + t + " to f32");
      }
      loaded_.push_back(v);
    }
    for (uint32_t op : group_.ops) result_[op] = compute(op);
    for (size_t k = 0; k < kernel_.outputs.size(); ++k)
      line("memref.store " + result_.at(kernel_.outputs[k]) + ", %out" + std::to_string(k) +
           "[%o" + std::to_string(R - 1) + "] : memref<?xf32>");
    std::string body = body_.str();
    std::string inner_indent(2 + 2 * R, ' ');
    std::ostringstream indented;
    std::istringstream lines(body);
    for (std::string l; std::getline(lines, l);) indented << inner_indent << l.substr(4) << "\n";
    std::ostringstream close;
    for (uint32_t a = R; a-- > 0;) close << std::string(2 + 2 * a, ' ') << "}\n";
    kernel_.mlir = sig.str() + pre.str() + loops.str() + indented.str() + close.str() + "  return\n}\n";
  }

  const Program& p_;
  const FusionGroup& group_;
  const std::vector<bool>& used_outside_;
  std::map<uint32_t, bool> in_group_;
  std::map<std::pair<uint32_t, uint32_t>, size_t> input_index_;
  std::map<uint32_t, std::string> result_;
  std::vector<std::string> loaded_;
  std::ostringstream body_;
  uint32_t next_ = 0;
  LoopKernel kernel_;
};

}  // namespace

std::optional<LoopKernel> emit_loop_kernel(const Program& p, uint32_t g,
                                           const std::vector<bool>& used_outside,
                                           std::string* why) {
  if (p.groups.at(g).kind != FusionKind::kLoop) {
    if (why) *why = "only kLoop groups are generated";
    return std::nullopt;
  }
  return Emitter(p, g, used_outside).run(why);
}

}  // namespace disc::lowering
