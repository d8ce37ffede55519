// The shape of every generated function: its signature and prologue (sizes,
// strides, the run-time contiguity check), the loops over the leading dims
// (dim 0 is this launch's chunk [begin, end)), and one pass over a row with
// its vector body, masked vector tail and strided fallback. row_plans.cpp fills it.
#include "lowering/codegen/cpu/kernel_emitter.h"

#include "lowering/codegen/cpu/math_functions.h"

namespace disc::lowering {

namespace {

// "t, t, t": `count` copies of an MLIR type.
std::string repeated(const std::string& t, size_t count) {
  std::string s;
  for (size_t k = 0; k < count; ++k) s += (k ? ", " : "") + t;
  return s;
}

// The SSA names of an op's `count` results: %r, or %r#0, %r#1, ...
std::vector<std::string> results(const std::string& name, size_t count) {
  std::vector<std::string> r;
  for (size_t k = 0; k < count; ++k) r.push_back(count == 1 ? name : name + "#" + std::to_string(k));
  return r;
}

// "%r:2 = ", what binds an op's `count` results (nothing for none).
std::string assign(const std::string& name, size_t count) {
  return count == 0 ? std::string() : name + (count > 1 ? ":" + std::to_string(count) : "") + " = ";
}

const std::string& vector_f32() {
  static const std::string t = "vector<" + std::to_string(kVectorWidth) + "xf32>";
  return t;
}

}  // namespace

void KernelEmitter::emit() {
  const std::string sig = signature();
  indent_ = "  ";
  emit_sizes_and_strides();
  emit_row_bounds();
  emit_contiguity_check();
  emit_clear_column_partials();
  open_leading_loops();
  emit_row();
  for (uint32_t a = kernel_.rank - 1; a-- > 0;) {
    indent_.resize(indent_.size() - 2);
    line("}");
  }
  line("return");
  mlir_ = finished_text(sig);
}

std::string KernelEmitter::signature() const {
  std::ostringstream sig;
  sig << "func.func @" << name_ << "(";
  for (size_t k = 0; k < kernel_.inputs.size(); ++k)
    sig << "%in" << k << ": memref<?x" << elem(k) << ">, ";
  for (size_t k = 0; k < kernel_.outputs.size(); ++k)
    sig << "%out" << k << ": memref<?x" << memref_elem(output_dtype(k)) << ">, ";
  sig << "%sizes: memref<?xindex>, %strides: memref<?xindex>, %scalars: memref<?xf64>, "
      << "%begin: index, %end: index, %chunk: index) {\n";
  return sig.str();
}

// %d<a>: the size of dim a; %s<k>_<a>: input k's stride along it.
void KernelEmitter::emit_sizes_and_strides() {
  const uint32_t R = kernel_.rank;
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
}

// The innermost loop runs over [%lo, %n): a row, or for a rank-1 loop
// kernel this thread's share [begin, end) of the elements; %nv / %nv4 end
// its whole vectors (of 16 / 64 columns), %nrem columns are left.
void KernelEmitter::emit_row_bounds() {
  const uint32_t R = kernel_.rank;
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
}

// %contiguous: the vector path needs unit stride along the row in every
// input that is not broadcast along it.
void KernelEmitter::emit_contiguity_check() {
  const uint32_t R = kernel_.rank;
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
}

// This chunk's row of each per-column partial buffer starts at 0 (sums)
// or -inf (maxima).
void KernelEmitter::emit_clear_column_partials() {
  line("%cb = arith.muli %chunk, %n : index");
  for (size_t k = 0; k < kernel_.outputs.size(); ++k) {
    if (kernel_.outputs[k].extent != KernelOutput::Extent::kPerColumn) continue;
    std::string z = fresh(), idx = fresh(), zero = fresh();
    if (kernel_.outputs[k].combine == KernelOutput::Combine::kMax) {
      std::string bits = fresh();
      line(bits + " = arith.constant -8388608 : i32");
      line(zero + " = arith.bitcast " + bits + " : i32 to f32");
    } else {
      line(zero + " = arith.constant 0.0 : f32");
    }
    line("scf.for " + z + " = %c0 to %n step %c1 {");
    line("  " + idx + " = arith.addi %cb, " + z + " : index");
    line("  memref.store " + zero + ", %out" + std::to_string(k) + "[" + idx + "] : memref<?xf32>");
    line("}");
  }
}

// Loops over the leading dims (the last one is the row), with each input's
// offset (%p<k>_<a>) and the output's row (%ob) at the innermost.
void KernelEmitter::open_leading_loops() {
  const uint32_t R = kernel_.rank;
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
}

// The function's text with the exp helpers it calls appended.
std::string KernelEmitter::finished_text(const std::string& signature) {
  std::string text = signature + body_.str() + "}\n";
  if (text.find("@disc_expf16(") != std::string::npos) text += expf_function(kVectorWidth, host_pow2());
  if (text.find("@disc_expf(") != std::string::npos) text += expf_function(0);
  return text;
}

// One pass over the row: the vector body and a masked vector tail when
// every non-broadcast input is contiguous along the row, else a strided
// scalar loop. Returns the scalar results of `accs`, one per value body returns.
std::vector<std::string> KernelEmitter::pass(const std::vector<Acc>& accs, const Body& body) {
  const size_t m = accs.size();
  std::vector<std::string> vinit, sinit;
  for (Acc a : accs) {
    vinit.push_back(identity(a, kVectorWidth));
    sinit.push_back(identity(a, 0));
  }
  std::string name = fresh();
  line(assign(name, m) + "scf.if %contiguous" + (m ? " -> (" + repeated("f32", m) + ")" : "") + " {");
  indent_ += "  ";
  const std::vector<std::string> tail = masked_tail(accs, body, vinit, vector_loops(accs, body, vinit));
  std::vector<std::string> reduced;
  for (size_t k = 0; k < m; ++k) reduced.push_back(horizontal(accs[k], tail[k]));
  if (m) line("scf.yield " + join(reduced) + " : " + repeated("f32", m));
  indent_.resize(indent_.size() - 2);
  line("} else {");
  indent_ += "  ";
  std::vector<std::string> sres = loop(accs, body, {Mode::kStrided, 0, "%lo", "%n", "%c1", sinit, 1});
  if (m) line("scf.yield " + join(sres) + " : " + repeated("f32", m));
  indent_.resize(indent_.size() - 2);
  line("}");
  return results(name, m);
}

// A reduction is bound by the latency of its accumulator chain: four
// independent chains over [lo, nv4), folded into one, then one vector at a
// time over [nv4, nv). Returns the vector accumulators.
std::vector<std::string> KernelEmitter::vector_loops(const std::vector<Acc>& accs, const Body& body,
                                                     const std::vector<std::string>& init) {
  const size_t m = accs.size();
  if (!m) {
    loop(accs, body, {Mode::kVector, kVectorWidth, "%lo", "%nv", "%cw", {}, 1});
    return {};
  }
  std::vector<std::string> init4;
  for (uint32_t u = 0; u < kUnroll; ++u) init4.insert(init4.end(), init.begin(), init.end());
  std::vector<std::string> r4 =
      loop(accs, body, {Mode::kVector, kVectorWidth, "%lo", "%nv4", "%cw4", init4, kUnroll});
  ValueEmitter e = emitter(kVectorWidth);
  std::vector<std::string> folded;
  for (size_t k = 0; k < m; ++k) {
    std::string acc = r4[k];
    for (uint32_t u = 1; u < kUnroll; ++u)
      acc = accs[k] == Acc::kAdd ? e.binary("arith.addf", acc, r4[u * m + k])
                                 : e.max_nan(acc, r4[u * m + k]);
    folded.push_back(acc);
  }
  return loop(accs, body, {Mode::kVector, kVectorWidth, "%nv4", "%nv", "%cw", folded, 1});
}

// The last len % 16 columns as one vector with the lanes past the end
// masked off, instead of a scalar loop: a row of 10 (a classifier's
// log_softmax) is one masked vector per pass, not 10 scalar exps. Dead
// lanes load 0, store nothing and add the identity to the accumulators.
// Skipped when there is no tail (rows of 128: the empty masked exp cost
// softmax ~10%). Returns the accumulators with the tail folded in.
std::vector<std::string> KernelEmitter::masked_tail(const std::vector<Acc>& accs, const Body& body,
                                                    const std::vector<std::string>& init,
                                                    const std::vector<std::string>& accumulated) {
  const size_t m = accs.size();
  const std::string vtypes = repeated(vector_f32(), m);
  std::string has_tail = fresh(), tail_acc = fresh();
  line(has_tail + " = arith.cmpi ne, %nrem, %c0 : index");
  line(assign(tail_acc, m) + "scf.if " + has_tail + (m ? " -> (" + vtypes + ")" : "") + " {");
  indent_ += "  ";
  std::string mask = fresh();
  line(mask + " = vector.create_mask %nrem : vector<" + std::to_string(kVectorWidth) + "xi1>");
  Variant tail{Mode::kMasked, "%nv", emitter(kVectorWidth), {}, mask};
  std::vector<std::string> tvals = body(tail);
  std::vector<std::string> combined;
  for (size_t k = 0; k < m; ++k) {
    std::string live = tail.e.select(mask, tvals.at(k), init[k]);
    combined.push_back(accs[k] == Acc::kAdd ? tail.e.binary("arith.addf", accumulated[k], live)
                                            : tail.e.max_nan(accumulated[k], live));
  }
  if (m) line("scf.yield " + join(combined) + " : " + vtypes);
  indent_.resize(indent_.size() - 2);
  if (m) {
    line("} else {");
    line("  scf.yield " + join(accumulated) + " : " + vtypes);
  }
  line("}");
  return results(tail_acc, m);
}

// One loop: header with iter_args, `unroll` copies of the body (at
// columns j, j + 16, ...), each folding into its own accumulators.
std::vector<std::string> KernelEmitter::loop(const std::vector<Acc>& accs, const Body& body,
                                             const Loop& l) {
  const size_t m = accs.size(), count = m * l.unroll;
  const std::string type = l.width ? vector_f32() : "f32";
  std::string j = fresh(), name = fresh();
  std::vector<std::string> args;
  std::string header = assign(name, count) + "scf.for " + j + " = " + l.lo + " to " + l.hi + " step " + l.step;
  if (count) {
    header += " iter_args(";
    for (size_t k = 0; k < count; ++k) {
      args.push_back(fresh());
      header += (k ? ", " : "") + args[k] + " = " + l.init[k];
    }
    header += ") -> (" + repeated(type, count) + ")";
  }
  line(header + " {");
  indent_ += "  ";
  std::string yield;
  for (uint32_t u = 0; u < l.unroll; ++u) {
    std::string ju = j;
    if (u) {
      ju = fresh();
      line(ju + " = arith.addi " + j + ", %cw" + std::to_string(u) + " : index");
    }
    Variant v{l.mode, ju, emitter(l.width), {}};
    std::vector<std::string> vals = body(v);
    for (size_t k = 0; k < m; ++k) {
      const std::string& acc = args[u * m + k];
      yield += std::string(yield.empty() ? "" : ", ") +
               (accs[k] == Acc::kAdd ? v.e.binary("arith.addf", acc, vals.at(k))
                                     : v.e.max_nan(acc, vals.at(k)));
    }
  }
  if (count) line("scf.yield " + yield + " : " + repeated(type, count));
  indent_.resize(indent_.size() - 2);
  line("}");
  return results(name, count);
}

std::string KernelEmitter::identity(Acc a, uint32_t width) {
  // -inf as bits: MLIR 15 has no float literal for it.
  ValueEmitter e = emitter(width);
  if (a == Acc::kAdd) return e.constant(0.0);
  std::string bits = fresh(), f = fresh();
  line(bits + " = arith.constant -8388608 : i32");
  line(f + " = arith.bitcast " + bits + " : i32 to f32");
  return e.splat(f);
}

// A vector accumulator to one f32. vector.reduction <maxf> ignores NaN
// lanes (llvm.vector.reduce.fmax); torch's amax does not, so NaN is put
// back when any lane holds it.
std::string KernelEmitter::horizontal(Acc a, const std::string& v) {
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

std::string KernelEmitter::join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + v[k];
  return s;
}

}  // namespace disc::lowering
