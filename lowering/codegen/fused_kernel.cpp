// Emits MLIR text for a fusion group (see fused_kernel.h). softmax over
// [s1, s2]:
//
//   scf.for %i0 = %begin to %end {                     // rows, split across threads
//     %m = scf.if %contiguous -> f32 {                  // pass 1: max
//       vector<16xf32> loop over [0, n - n % 16), reduce, scalar tail
//     } else { strided scalar loop }
//     %s = ... pass 2: e = exp(x - m), store e, sum e
//     ...      pass 3: out = e / s
//
// The group's element-wise producers are recomputed in every pass that reads
// them: a row is in cache, arithmetic is cheaper than a store and a reload.
#include "lowering/codegen/fused_kernel.h"

#include <functional>
#include <map>

#include "lowering/codegen/math_functions.h"
#include "lowering/codegen/value_emitter.h"

namespace disc::lowering {

namespace {

enum class Acc { kAdd, kMax };
constexpr uint32_t kUnroll = 4;  // independent accumulators per reduction
enum class Mode { kVector, kTail, kStrided };

const ir::Attr* attr_operand(const ir::Node& n, size_t k) {
  if (k >= n.operands.size() || n.operands[k].kind != ir::Operand::Kind::kAttr) return nullptr;
  return &n.attrs[n.operands[k].first];
}

// The tensor input index of schema operand k, or -1 (None / not a tensor).
int tensor_operand(const ir::Node& n, size_t k) {
  if (k >= n.operands.size() || n.operands[k].kind != ir::Operand::Kind::kTensor) return -1;
  return static_cast<int>(n.operands[k].first);
}

// One loop variant of one pass: how it addresses memory, its emitter, and
// the values it has loaded so far.
struct Variant {
  Mode mode;
  std::string j;  // the column index
  ValueEmitter e;
  std::map<size_t, std::string> loads;
};

class Emitter {
 public:
  Emitter(const Program& p, uint32_t g, const std::vector<bool>& used_outside)
      : p_(p), group_(p.groups[g]), used_outside_(used_outside) {
    // One name per kind: equal groups give equal text, and the JIT cache
    // compiles each distinct kernel once per process.
    loop_ = group_.kind == FusionKind::kLoop;
    kernel_.kind = group_.kind;
    kernel_.name = loop_ ? "loop_kernel" : "row_kernel";
    for (uint32_t op : group_.ops) in_group_[op] = true;
    if (!loop_) row_op_ = group_.ops.back();
  }

  std::optional<FusedKernel> run(std::string* why) {
    if (!analyze(why)) return std::nullopt;
    emit();
    return kernel_;
  }

 private:
  bool fail(std::string* why, uint32_t op, const std::string& what) {
    if (why) *why = ir::op_name(p_.ops[op].node->op) + ": " + what;
    return false;
  }

  // --- analysis -----------------------------------------------------------

  bool analyze(std::string* why) {
    if (loop_) {
      // The space a kLoop group iterates: its consumer-most op's output.
      kernel_.space = {group_.ops.back(), 0};
      const uint32_t R = static_cast<uint32_t>(type_of(kernel_.space).sizes.size());
      kernel_.rank = std::max<uint32_t>(R, 1);
      return collect(why);
    }
    const ir::Node& row = *p_.ops[row_op_].node;
    name_ = ir::op_name(row.op);
    static const char* row_ops[] = {
        "aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data",
        "aten::_log_softmax_backward_data", "aten::sum.dim_IntList", "aten::mean.dim",
        "aten::amax", "aten::native_layer_norm", "aten::native_layer_norm_backward"};
    bool known = false;
    for (const char* s : row_ops) known = known || name_ == s;
    if (!known) return fail(why, row_op_, "no row codegen for this op");
    if (row.inputs.empty()) return fail(why, row_op_, "no tensor input");
    kernel_.space = p_.ops[row_op_].inputs[0];
    const ir::TensorType& space = type_of(kernel_.space);
    const uint32_t R = static_cast<uint32_t>(space.sizes.size());
    if (R == 0) return fail(why, row_op_, "0-dim input");
    kernel_.rank = std::max<uint32_t>(R, 2);
    for (const ir::TensorType& t : row.outputs)
      if (t.dtype != ir::DType::kFloat32 && !t.undefined)
        return fail(why, row_op_, "only f32 outputs are generated");
    column_ = leading_dims_only(row, R);
    if (!column_ && !last_dim_only(row, R))
      return fail(why, row_op_, "reduces neither the last dim nor all leading dims");
    if (!collect(why)) return false;
    using Extent = KernelOutput::Extent;
    for (uint32_t k = 0; k < row.num_returns; ++k) {
      if (row.outputs[k].undefined) continue;  // output_mask left it out
      Extent e = Extent::kElements;
      if (column_ || (name_ == "aten::native_layer_norm_backward" && k > 0)) e = Extent::kPerColumn;
      else if (is_reduction() || k > 0) e = Extent::kPerRow;
      kernel_.outputs.push_back({row_op_, k, e});
    }
    return true;
  }

  // sum over every dim but the last: a column sum (nn.Linear's bias grad).
  bool leading_dims_only(const ir::Node& n, uint32_t R) const {
    if (name_ != "aten::sum.dim_IntList" || R < 2) return false;
    const ir::Attr* dims = attr_operand(n, 1);
    const ir::Attr* dtype = attr_operand(n, 3);
    if (!dims || dims->kind != ir::Attr::Kind::kIntList || !dtype ||
        dtype->kind != ir::Attr::Kind::kNone)
      return false;
    std::vector<bool> seen(R, false);
    for (int64_t d : dims->ints) {
      const int64_t a = d < 0 ? d + R : d;
      if (a < 0 || a >= static_cast<int64_t>(R) - 1 || seen[a]) return false;
      seen[a] = true;
    }
    return dims->ints.size() == R - 1;
  }

  // Checks the element-wise ops; collects inputs, outputs, runtime scalars.
  bool collect(std::string* why) {
    for (uint32_t op : group_.ops) {
      const ir::Node& n = *p_.ops[op].node;
      if (loop_ || op != row_op_) {
        if (n.outputs.size() != 1 || n.outputs[0].dtype != ir::DType::kFloat32)
          return fail(why, op, "only single f32 outputs are generated");
        if (!ValueEmitter::supports(ir::op_name(n.op))) return fail(why, op, "op has no codegen");
        if (used_outside_[op]) kernel_.outputs.push_back({op, 0, KernelOutput::Extent::kElements});
      }
      for (const ir::GraphRef& r : p_.ops[op].inputs) {
        if (in_group_.count(r.node) || input_index_.count({r.node, r.index})) continue;
        const ir::TensorType& t = type_of(r);
        if (!memref_elem(t.dtype)) return fail(why, op, "input dtype has no codegen");
        if (t.sizes.size() > kernel_.rank) return fail(why, op, "input of higher rank");
        input_index_[{r.node, r.index}] = kernel_.inputs.size();
        kernel_.inputs.push_back(r);
        kernel_.input_dtypes.push_back(t.dtype);
        // Broadcast along the row: its stride there is 0 (a size-1 or
        // missing dim, which the size pattern fixes at compile time).
        const auto& dims = p_.ops[r.node].dims.at(r.index);
        row_broadcast_.push_back(dims.empty() || dims.back() == 0);
      }
      for (uint32_t k = 0; k < n.runtime.size(); ++k) kernel_.runtime.push_back({op, k});
    }
    return true;
  }

  const ir::TensorType& type_of(const ir::GraphRef& r) const {
    return p_.ops[r.node].node->outputs.at(r.index);
  }

  bool is_reduction() const {
    return name_ == "aten::sum.dim_IntList" || name_ == "aten::mean.dim" || name_ == "aten::amax";
  }

  bool last_dim_only(const ir::Node& n, uint32_t R) const {
    auto is_last = [&](int64_t d) { return d == -1 || d == static_cast<int64_t>(R) - 1; };
    if (is_reduction()) {
      const ir::Attr* dims = attr_operand(n, 1);
      if (!dims || dims->kind != ir::Attr::Kind::kIntList || dims->ints.size() != 1) return false;
      if (name_ != "aten::amax") {  // dtype= must be absent
        const ir::Attr* dtype = attr_operand(n, 3);
        if (!dtype || dtype->kind != ir::Attr::Kind::kNone) return false;
      }
      return is_last(dims->ints[0]);
    }
    if (name_ == "aten::native_layer_norm" || name_ == "aten::native_layer_norm_backward") {
      const ir::Attr* shape = attr_operand(n, name_ == "aten::native_layer_norm" ? 1 : 2);
      return shape && shape->ints.size() == 1;
    }
    const ir::Attr* dim = attr_operand(n, name_.find("backward") != std::string::npos ? 2 : 1);
    if (!dim || dim->kind != ir::Attr::Kind::kInt || !is_last(dim->i)) return false;
    if (name_ == "aten::_softmax" || name_ == "aten::_log_softmax") {
      const ir::Attr* half_to_float = attr_operand(n, 2);
      if (!half_to_float || half_to_float->i != 0) return false;
    }
    return true;
  }

  // --- emission -------------------------------------------------------------

  std::string fresh() { return "%r" + std::to_string(counter_++); }
  void line(const std::string& s) { body_ << indent_ << s << "\n"; }
  ValueEmitter emitter(uint32_t width) {
    return ValueEmitter(p_, body_, indent_, width, kernel_.runtime, counter_);
  }
  const char* elem(size_t k) const { return memref_elem(kernel_.input_dtypes[k]); }
  std::string in_offset(size_t k) const {
    if (kernel_.rank == 1) return "%c0";  // a rank-1 loop: j is the whole index
    return "%p" + std::to_string(k) + "_" + std::to_string(kernel_.rank - 2);
  }
  // The kernel output slot of (op, index), or -1 when the kernel does not
  // write it (an output the op's output_mask left out).
  int find_output(uint32_t op, uint32_t index) const {
    for (size_t k = 0; k < kernel_.outputs.size(); ++k)
      if (kernel_.outputs[k].op == op && kernel_.outputs[k].index == index) return static_cast<int>(k);
    return -1;
  }
  size_t output_slot(uint32_t op, uint32_t index) const {
    const int k = find_output(op, index);
    if (k < 0) throw std::logic_error("row kernel: no such output");
    return static_cast<size_t>(k);
  }

  // Input k at column j, as f32 (or a vector of them).
  std::string load(Variant& v, size_t k) {
    auto it = v.loads.find(k);
    if (it != v.loads.end()) return it->second;
    const std::string t = elem(k), mem = "memref<?x" + t + ">";
    std::string value;
    if (row_broadcast_[k]) {
      std::string raw = fresh();
      line(raw + " = memref.load %in" + std::to_string(k) + "[" + in_offset(k) + "] : " + mem);
      value = raw;
      if (t != "f32") {
        value = fresh();
        line(value + (t == "f64" ? " = arith.truncf " : " = arith.sitofp ") + raw + " : " + t +
             " to f32");
      }
      value = v.e.splat(value);
    } else {
      std::string idx = fresh();
      if (v.mode == Mode::kStrided) {
        std::string m = fresh();
        line(m + " = arith.muli " + v.j + ", %s" + std::to_string(k) + "_" +
             std::to_string(kernel_.rank - 1) + " : index");
        line(idx + " = arith.addi " + in_offset(k) + ", " + m + " : index");
      } else {
        line(idx + " = arith.addi " + in_offset(k) + ", " + v.j + " : index");
      }
      std::string raw = fresh();
      if (v.mode == Mode::kVector)
        line(raw + " = vector.load %in" + std::to_string(k) + "[" + idx + "] : " + mem +
             ", vector<" + std::to_string(kVectorWidth) + "x" + t + ">");
      else
        line(raw + " = memref.load %in" + std::to_string(k) + "[" + idx + "] : " + mem);
      value = v.e.to_f32(raw, kernel_.input_dtypes[k]);
    }
    return v.loads[k] = value;
  }

  // Output slot `k` at column j: store, or load back what a pass stored.
  std::string out_index(Variant& v) {
    std::string idx = fresh();
    line(idx + " = arith.addi %ob, " + v.j + " : index");
    return idx;
  }
  void store(Variant& v, size_t k, const std::string& value) {
    std::string idx = out_index(v), o = "%out" + std::to_string(k);
    if (v.mode == Mode::kVector)
      line("vector.store " + value + ", " + o + "[" + idx + "] : memref<?xf32>, vector<" +
           std::to_string(kVectorWidth) + "xf32>");
    else
      line("memref.store " + value + ", " + o + "[" + idx + "] : memref<?xf32>");
  }
  std::string load_output(Variant& v, size_t k) {
    std::string idx = out_index(v), o = "%out" + std::to_string(k), r = fresh();
    if (v.mode == Mode::kVector)
      line(r + " = vector.load " + o + "[" + idx + "] : memref<?xf32>, vector<" +
           std::to_string(kVectorWidth) + "xf32>");
    else
      line(r + " = memref.load " + o + "[" + idx + "] : memref<?xf32>");
    return r;
  }
  // Adds `value` to this chunk's partial sum of output slot k at column j.
  void accumulate(Variant& v, size_t k, const std::string& value) {
    std::string idx = fresh(), o = "%out" + std::to_string(k), old = fresh();
    line(idx + " = arith.addi %cb, " + v.j + " : index");
    const std::string vt = "vector<" + std::to_string(kVectorWidth) + "xf32>";
    if (v.mode == Mode::kVector)
      line(old + " = vector.load " + o + "[" + idx + "] : memref<?xf32>, " + vt);
    else
      line(old + " = memref.load " + o + "[" + idx + "] : memref<?xf32>");
    std::string sum = v.e.binary("arith.addf", old, value);
    if (v.mode == Mode::kVector)
      line("vector.store " + sum + ", " + o + "[" + idx + "] : memref<?xf32>, " + vt);
    else
      line("memref.store " + sum + ", " + o + "[" + idx + "] : memref<?xf32>");
  }
  void store_row(size_t k, const std::string& scalar) {
    line("memref.store " + scalar + ", %out" + std::to_string(k) + "[%row] : memref<?xf32>");
  }

  // The element-wise producers at column j, and the row op's input values.
  std::vector<std::string> row_inputs(Variant& v, bool store_producers) {
    std::map<uint32_t, std::string> value;
    auto of = [&](const ir::GraphRef& r) {
      if (in_group_.count(r.node)) return value.at(r.node);
      return load(v, input_index_.at({r.node, r.index}));
    };
    for (uint32_t op : group_.ops) {
      if (!loop_ && op == row_op_) break;
      std::vector<std::string> ins;
      for (const ir::GraphRef& r : p_.ops[op].inputs) ins.push_back(of(r));
      value[op] = v.e.compute(op, ins);
      if (store_producers && used_outside_[op]) store(v, output_slot(op, 0), value[op]);
    }
    std::vector<std::string> ins;
    if (!loop_)
      for (const ir::GraphRef& r : p_.ops[row_op_].inputs) ins.push_back(of(r));
    return ins;
  }

  std::string identity(Acc a, uint32_t width) {
    // -inf as bits: MLIR 15 has no float literal for it.
    ValueEmitter e = emitter(width);
    if (a == Acc::kAdd) return e.constant(0.0);
    std::string bits = fresh(), f = fresh();
    line(bits + " = arith.constant -8388608 : i32");
    line(f + " = arith.bitcast " + bits + " : i32 to f32");
    return e.splat(f);
  }

  using Body = std::function<std::vector<std::string>(Variant&)>;

  // One pass over the row: the vector body and scalar tail when every
  // non-broadcast input is contiguous along the row, else a strided scalar
  // loop. Returns the scalar results of `accs`, one per value body returns.
  std::vector<std::string> pass(const std::vector<Acc>& accs, const Body& body) {
    const size_t m = accs.size();
    const std::string vt = "vector<" + std::to_string(kVectorWidth) + "xf32>";
    auto types = [&](const std::string& t, size_t count) {
      std::string s;
      for (size_t k = 0; k < count; ++k) s += (k ? ", " : "") + t;
      return s;
    };
    auto results = [&](const std::string& name, size_t count) {
      std::vector<std::string> r;
      for (size_t k = 0; k < count; ++k)
        r.push_back(count == 1 ? name : name + "#" + std::to_string(k));
      return r;
    };
    auto head = [&](const std::string& name, size_t count) {
      return count == 0 ? std::string()
                        : name + (count > 1 ? ":" + std::to_string(count) : "") + " = ";
    };
    // One loop: header with iter_args, `unroll` copies of the body (at
    // columns j, j + 16, ...), each folding into its own accumulators.
    auto loop = [&](Mode mode, uint32_t width, const std::string& lo, const std::string& hi,
                    const std::string& step, const std::vector<std::string>& init,
                    uint32_t unroll) {
      const size_t count = m * unroll;
      std::string j = fresh(), name = fresh();
      std::vector<std::string> args;
      std::string header =
          head(name, count) + "scf.for " + j + " = " + lo + " to " + hi + " step " + step;
      if (count) {
        header += " iter_args(";
        for (size_t k = 0; k < count; ++k) {
          args.push_back(fresh());
          header += (k ? ", " : "") + args[k] + " = " + init[k];
        }
        header += ") -> (" + types(width ? vt : "f32", count) + ")";
      }
      line(header + " {");
      indent_ += "  ";
      std::string yield;
      for (uint32_t u = 0; u < unroll; ++u) {
        std::string ju = j;
        if (u) {
          ju = fresh();
          line(ju + " = arith.addi " + j + ", %cw" + std::to_string(u) + " : index");
        }
        Variant v{mode, ju, emitter(width), {}};
        std::vector<std::string> vals = body(v);
        for (size_t k = 0; k < m; ++k) {
          const std::string& acc = args[u * m + k];
          yield += std::string(yield.empty() ? "" : ", ") +
                   (accs[k] == Acc::kAdd ? v.e.binary("arith.addf", acc, vals.at(k))
                                         : v.e.max_nan(acc, vals.at(k)));
        }
      }
      if (count) line("scf.yield " + yield + " : " + types(width ? vt : "f32", count));
      indent_.resize(indent_.size() - 2);
      line("}");
      return results(name, count);
    };
    std::vector<std::string> vinit, sinit;
    for (Acc a : accs) {
      vinit.push_back(identity(a, kVectorWidth));
      sinit.push_back(identity(a, 0));
    }
    std::string name = fresh();
    line(head(name, m) + "scf.if %contiguous" + (m ? " -> (" + types("f32", m) + ")" : "") + " {");
    indent_ += "  ";
    std::vector<std::string> vres;
    if (m) {
      // A reduction is bound by the latency of its accumulator chain: four
      // independent chains over [lo, nv4), folded into one, then one vector
      // at a time over [nv4, nv).
      std::vector<std::string> init4;
      for (uint32_t u = 0; u < kUnroll; ++u) init4.insert(init4.end(), vinit.begin(), vinit.end());
      std::vector<std::string> r4 = loop(Mode::kVector, kVectorWidth, "%lo", "%nv4", "%cw4", init4, kUnroll);
      ValueEmitter e = emitter(kVectorWidth);
      std::vector<std::string> folded;
      for (size_t k = 0; k < m; ++k) {
        std::string acc = r4[k];
        for (uint32_t u = 1; u < kUnroll; ++u)
          acc = accs[k] == Acc::kAdd ? e.binary("arith.addf", acc, r4[u * m + k])
                                     : e.max_nan(acc, r4[u * m + k]);
        folded.push_back(acc);
      }
      vres = loop(Mode::kVector, kVectorWidth, "%nv4", "%nv", "%cw", folded, 1);
    } else {
      loop(Mode::kVector, kVectorWidth, "%lo", "%nv", "%cw", {}, 1);
    }
    std::vector<std::string> reduced;
    for (size_t k = 0; k < m; ++k) reduced.push_back(horizontal(accs[k], vres[k]));
    std::vector<std::string> tres = loop(Mode::kTail, 0, "%nv", "%n", "%c1", reduced, 1);
    if (m) line("scf.yield " + join(tres) + " : " + types("f32", m));
    indent_.resize(indent_.size() - 2);
    line("} else {");
    indent_ += "  ";
    std::vector<std::string> sres = loop(Mode::kStrided, 0, "%lo", "%n", "%c1", sinit, 1);
    if (m) line("scf.yield " + join(sres) + " : " + types("f32", m));
    indent_.resize(indent_.size() - 2);
    line("}");
    return results(name, m);
  }

  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + v[k];
    return s;
  }

  // A vector accumulator to one f32. vector.reduction <maxf> ignores NaN
  // lanes (llvm.vector.reduce.fmax); torch's amax does not, so NaN is put
  // back when any lane holds it.
  std::string horizontal(Acc a, const std::string& v) {
    const std::string vt = "vector<" + std::to_string(kVectorWidth) + "xf32>";
    std::string r = fresh();
    if (a == Acc::kAdd) {
      line(r + " = vector.reduction <add>, " + v + " : " + vt + " into f32");
      return r;
    }
    line(r + " = vector.reduction <maxf>, " + v + " : " + vt + " into f32");
    std::string nan_lanes = fresh(), any = fresh(), out = fresh();
    line(nan_lanes + " = arith.cmpf uno, " + v + ", " + v + " : " + vt);
    line(any + " = vector.reduction <or>, " + nan_lanes + " : vector<" +
         std::to_string(kVectorWidth) + "xi1> into i1");
    std::string nan = fresh(), bits = fresh();
    line(bits + " = arith.constant 2143289344 : i32");
    line(nan + " = arith.bitcast " + bits + " : i32 to f32");
    line(out + " = arith.select " + any + ", " + nan + ", " + r + " : f32");
    return out;
  }

  // The passes of the row op, in torch's order of operations.
  void emit_row() {
    if (loop_) {  // one pass: compute the group, store what leaves it
      pass({}, [&](Variant& v) {
        row_inputs(v, true);
        return std::vector<std::string>{};
      });
      return;
    }
    ValueEmitter s = emitter(0);
    const size_t out0 = output_slot(row_op_, 0);
    bool first = true;
    auto producers_once = [&] {  // producers used outside are stored by the first pass
      bool f = first;
      first = false;
      return f;
    };
    if (column_) {
      bool store_p = producers_once();
      pass({}, [&](Variant& v) {
        accumulate(v, out0, row_inputs(v, store_p)[0]);
        return std::vector<std::string>{};
      });
      return;
    }
    if (name_ == "aten::native_layer_norm_backward") {
      emit_layer_norm_backward();
      return;
    }
    if (is_reduction()) {
      Acc a = name_ == "aten::amax" ? Acc::kMax : Acc::kAdd;
      bool store_p = producers_once();
      std::string r = pass({a}, [&](Variant& v) { return std::vector{row_inputs(v, store_p)[0]}; })[0];
      if (name_ == "aten::mean.dim") r = s.binary("arith.divf", r, "%nf");
      store_row(out0, r);
      return;
    }
    if (name_ == "aten::_softmax" || name_ == "aten::_log_softmax") {
      bool store_p = producers_once();
      std::string mx = pass({Acc::kMax}, [&](Variant& v) {
        return std::vector{row_inputs(v, store_p)[0]};
      })[0];
      const bool log = name_ == "aten::_log_softmax";
      std::string sum = pass({Acc::kAdd}, [&](Variant& v) {
        std::string e = v.e.exp(v.e.binary("arith.subf", row_inputs(v, false)[0], v.e.splat(mx)));
        if (!log) store(v, out0, e);
        return std::vector{e};
      })[0];
      // As ATen: log_softmax subtracts log(sum); softmax multiplies by 1/sum.
      std::string log_sum = log ? s.unary("math.log", sum) : "";
      std::string inv_sum = log ? "" : s.binary("arith.divf", s.constant(1.0), sum);
      pass({}, [&](Variant& v) {
        if (log) {
          std::string shifted = v.e.binary("arith.subf", row_inputs(v, false)[0], v.e.splat(mx));
          store(v, out0, v.e.binary("arith.subf", shifted, v.e.splat(log_sum)));
        } else {
          store(v, out0, v.e.binary("arith.mulf", load_output(v, out0), v.e.splat(inv_sum)));
        }
        return std::vector<std::string>{};
      });
      return;
    }
    if (name_ == "aten::_softmax_backward_data" || name_ == "aten::_log_softmax_backward_data") {
      // softmax:      grad_in = y * (g - sum(g * y))
      // log_softmax:  grad_in = g - exp(y) * sum(g)
      const bool log = name_ == "aten::_log_softmax_backward_data";
      bool store_p = producers_once();
      std::string sum = pass({Acc::kAdd}, [&](Variant& v) {
        std::vector<std::string> in = row_inputs(v, store_p);
        return std::vector{log ? in[0] : v.e.binary("arith.mulf", in[0], in[1])};
      })[0];
      pass({}, [&](Variant& v) {
        std::vector<std::string> in = row_inputs(v, false);
        std::string r = log ? v.e.binary("arith.subf", in[0],
                                         v.e.binary("arith.mulf", v.e.exp(in[1]), v.e.splat(sum)))
                            : v.e.binary("arith.mulf", in[1],
                                         v.e.binary("arith.subf", in[0], v.e.splat(sum)));
        store(v, out0, r);
        return std::vector<std::string>{};
      });
      return;
    }
    // native_layer_norm(x, [n], weight?, bias?, eps): two passes for the
    // moments (mean, then the centred sum of squares), one to normalize.
    const ir::Node& n = *p_.ops[row_op_].node;
    const int w = tensor_operand(n, 2), b = tensor_operand(n, 3);
    bool store_p = producers_once();
    std::string sum = pass({Acc::kAdd}, [&](Variant& v) {
      return std::vector{row_inputs(v, store_p)[0]};
    })[0];
    std::string mean = s.binary("arith.divf", sum, "%nf");
    std::string sq = pass({Acc::kAdd}, [&](Variant& v) {
      std::string d = v.e.binary("arith.subf", row_inputs(v, false)[0], v.e.splat(mean));
      return std::vector{v.e.binary("arith.mulf", d, d)};
    })[0];
    std::string var = s.binary("arith.divf", sq, "%nf");
    std::string eps = s.scalar_operand_f32(row_op_, 4);
    std::string rstd = s.binary("arith.divf", s.constant(1.0),
                                s.unary("math.sqrt", s.binary("arith.addf", var, eps)));
    pass({}, [&](Variant& v) {
      std::vector<std::string> in = row_inputs(v, false);
      std::string y = v.e.binary("arith.mulf", v.e.binary("arith.subf", in[0], v.e.splat(mean)),
                                 v.e.splat(rstd));
      if (w >= 0) y = v.e.binary("arith.mulf", y, in[w]);
      if (b >= 0) y = v.e.binary("arith.addf", y, in[b]);
      store(v, out0, y);
      return std::vector<std::string>{};
    });
    store_row(output_slot(row_op_, 1), mean);
    store_row(output_slot(row_op_, 2), rstd);
  }

  // native_layer_norm_backward(dy, x, [n], mean, rstd, w?, b?, mask), as
  // torch computes it: ds = sum(dy*w*x), db = sum(dy*w) over the row, then
  //   dx = rstd*dy*w + b'*x + c',  b' = (db*mean - ds) * rstd^3 / n,
  //                                c' = -b'*mean - db*rstd / n
  // and per column dw += dy*(x - mean)*rstd, dbias += dy.
  void emit_layer_norm_backward() {
    const ir::Node& n = *p_.ops[row_op_].node;
    const int x = tensor_operand(n, 1), mean = tensor_operand(n, 3), rstd = tensor_operand(n, 4);
    const int w = tensor_operand(n, 5);
    const int dx = find_output(row_op_, 0), dw = find_output(row_op_, 1),
              db = find_output(row_op_, 2);
    auto dyw = [&](Variant& v, const std::vector<std::string>& in) {
      return w >= 0 ? v.e.binary("arith.mulf", in[0], in[w]) : in[0];
    };
    std::vector<std::string> sums = pass({Acc::kAdd, Acc::kAdd}, [&](Variant& v) {
      std::vector<std::string> in = row_inputs(v, true);
      std::string g = dyw(v, in);
      return std::vector{v.e.binary("arith.mulf", g, in[x]), g};
    });
    pass({}, [&](Variant& v) {
      std::vector<std::string> in = row_inputs(v, false);
      ValueEmitter& e = v.e;
      const std::string m = in[mean], r = in[rstd];
      if (dx >= 0) {
        std::string ds = e.splat(sums[0]), dbs = e.splat(sums[1]);
        std::string inv_n = e.binary("arith.divf", e.constant(1.0), e.splat("%nf"));
        std::string r3 = e.binary("arith.mulf", e.binary("arith.mulf", r, r), r);
        std::string b = e.binary("arith.mulf",
                                 e.binary("arith.mulf",
                                          e.binary("arith.subf", e.binary("arith.mulf", dbs, m), ds), r3),
                                 inv_n);
        std::string c = e.binary("arith.subf", e.unary("arith.negf", e.binary("arith.mulf", b, m)),
                                 e.binary("arith.mulf", e.binary("arith.mulf", dbs, r), inv_n));
        std::string out = e.binary("arith.addf",
                                   e.binary("arith.addf", e.binary("arith.mulf", r, dyw(v, in)),
                                            e.binary("arith.mulf", b, in[x])),
                                   c);
        store(v, dx, out);
      }
      if (dw >= 0)
        accumulate(v, dw, e.binary("arith.mulf", e.binary("arith.mulf", in[0],
                                                            e.binary("arith.subf", in[x], m)), r));
      if (db >= 0) accumulate(v, db, in[0]);
      return std::vector<std::string>{};
    });
  }

  void emit() {
    const uint32_t R = kernel_.rank;
    std::ostringstream sig;
    sig << "func.func @" << kernel_.name << "(";
    for (size_t k = 0; k < kernel_.inputs.size(); ++k)
      sig << "%in" << k << ": memref<?x" << elem(k) << ">, ";
    for (size_t k = 0; k < kernel_.outputs.size(); ++k) sig << "%out" << k << ": memref<?xf32>, ";
    sig << "%sizes: memref<?xindex>, %strides: memref<?xindex>, %scalars: memref<?xf64>, "
        << "%begin: index, %end: index, %chunk: index) {\n";
    indent_ = "  ";
    line("%c0 = arith.constant 0 : index");
    line("%c1 = arith.constant 1 : index");
    line("%cw = arith.constant " + std::to_string(kVectorWidth) + " : index");
    for (uint32_t a = 0; a < R; ++a) {
      line("%ca" + std::to_string(a) + " = arith.constant " + std::to_string(a) + " : index");
      line("%d" + std::to_string(a) + " = memref.load %sizes[%ca" + std::to_string(a) +
           "] : memref<?xindex>");
    }
    for (size_t k = 0; k < kernel_.inputs.size(); ++k)
      for (uint32_t a = 0; a < R; ++a) {
        const std::string s = std::to_string(k) + "_" + std::to_string(a);
        line("%cs" + s + " = arith.constant " + std::to_string(k * R + a) + " : index");
        line("%s" + s + " = memref.load %strides[%cs" + s + "] : memref<?xindex>");
      }
    // The innermost loop runs over [%lo, %n): a row, or for a rank-1 loop
    // kernel this thread's share [begin, end) of the elements.
    if (R == 1) {
      line("%lo = arith.addi %begin, %c0 : index");
      line("%n = arith.addi %end, %c0 : index");
    } else {
      line("%lo = arith.addi %c0, %c0 : index");
      line("%n = arith.addi %d" + std::to_string(R - 1) + ", %c0 : index");
    }
    line("%len = arith.subi %n, %lo : index");
    line("%nrem = arith.remui %len, %cw : index");
    line("%nv = arith.subi %n, %nrem : index");
    line("%cw4 = arith.constant " + std::to_string(kVectorWidth * kUnroll) + " : index");
    for (uint32_t u = 1; u < kUnroll; ++u)
      line("%cw" + std::to_string(u) + " = arith.constant " + std::to_string(kVectorWidth * u) +
           " : index");
    line("%nrem4 = arith.remui %len, %cw4 : index");
    line("%nv4 = arith.subi %n, %nrem4 : index");
    line("%ni = arith.index_cast %n : index to i64");
    line("%nf = arith.sitofp %ni : i64 to f32");
    // The vector path needs unit stride along the row in every input that
    // is not broadcast along it.
    std::string contiguous = "%true";
    line("%true = arith.constant true");
    for (size_t k = 0; k < kernel_.inputs.size(); ++k) {
      if (row_broadcast_[k]) continue;
      std::string c = fresh(), a = fresh();
      line(c + " = arith.cmpi eq, %s" + std::to_string(k) + "_" + std::to_string(R - 1) +
           ", %c1 : index");
      line(a + " = arith.andi " + contiguous + ", " + c + " : i1");
      contiguous = a;
    }
    line("%contiguous = arith.andi " + contiguous + ", %true : i1");
    // This chunk's row of each per-column partial-sum buffer starts at 0.
    line("%cb = arith.muli %chunk, %n : index");
    for (size_t k = 0; k < kernel_.outputs.size(); ++k) {
      if (kernel_.outputs[k].extent != KernelOutput::Extent::kPerColumn) continue;
      std::string z = fresh(), idx = fresh(), zero = fresh();
      line(zero + " = arith.constant 0.0 : f32");
      line("scf.for " + z + " = %c0 to %n step %c1 {");
      line("  " + idx + " = arith.addi %cb, " + z + " : index");
      line("  memref.store " + zero + ", %out" + std::to_string(k) + "[" + idx + "] : memref<?xf32>");
      line("}");
    }
    // Loops over the leading dims; the last one is the row.
    for (uint32_t a = 0; a + 1 < R; ++a) {
      const std::string i = "%i" + std::to_string(a);
      line("scf.for " + i + " = " + (a == 0 ? "%begin" : "%c0") + " to " +
           (a == 0 ? "%end" : "%d" + std::to_string(a)) + " step %c1 {");
      indent_ += "  ";
      if (a == 0) {
        line("%o0 = arith.addi %i0, %c0 : index");
      } else {
        line("%om" + std::to_string(a) + " = arith.muli %o" + std::to_string(a - 1) + ", %d" +
             std::to_string(a) + " : index");
        line("%o" + std::to_string(a) + " = arith.addi %om" + std::to_string(a) + ", " + i +
             " : index");
      }
      for (size_t k = 0; k < kernel_.inputs.size(); ++k) {
        const std::string s = std::to_string(k) + "_" + std::to_string(a);
        line("%m" + s + " = arith.muli " + i + ", %s" + s + " : index");
        if (a == 0)
          line("%p" + s + " = arith.addi %m" + s + ", %c0 : index");
        else
          line("%p" + s + " = arith.addi %p" + std::to_string(k) + "_" + std::to_string(a - 1) +
               ", %m" + s + " : index");
      }
    }
    if (R == 1) {
      line("%ob = arith.addi %c0, %c0 : index");
    } else {
      line("%row = arith.addi %o" + std::to_string(R - 2) + ", %c0 : index");
      line("%ob = arith.muli %row, %n : index");
    }
    emit_row();
    for (uint32_t a = R - 1; a-- > 0;) {
      indent_.resize(indent_.size() - 2);
      line("}");
    }
    line("return");
    std::string text = sig.str() + body_.str() + "}\n";
    if (text.find("@disc_expf16(") != std::string::npos) text += expf_function(kVectorWidth);
    if (text.find("@disc_expf(") != std::string::npos) text += expf_function(0);
    kernel_.mlir = text;
  }

  const Program& p_;
  const FusionGroup& group_;
  const std::vector<bool>& used_outside_;
  std::map<uint32_t, bool> in_group_;
  std::map<std::pair<uint32_t, uint32_t>, size_t> input_index_;
  std::vector<bool> row_broadcast_;  // per input
  bool loop_ = false;
  bool column_ = false;  // a sum over all leading dims
  uint32_t row_op_ = 0;  // the reduction / stitch op, last in a kInput / kStitch group
  std::string name_;
  std::ostringstream body_;
  std::string indent_;
  uint32_t counter_ = 0;
  FusedKernel kernel_;
};

}  // namespace

std::optional<FusedKernel> emit_fused_kernel(const Program& p, uint32_t g,
                                             const std::vector<bool>& used_outside,
                                             std::string* why) {
  return Emitter(p, g, used_outside).run(why);
}

}  // namespace disc::lowering
