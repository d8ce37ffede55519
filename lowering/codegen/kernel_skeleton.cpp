// The shape of every generated function: its signature and prologue (sizes,
// strides, the run-time contiguity check), the loops over the leading dims
// (dim 0 is this launch's chunk [begin, end)), and one pass over a row with
// its vector body, masked vector tail and strided fallback. row_plans.cpp fills it.
#include "lowering/codegen/kernel_emitter.h"

#include "lowering/codegen/math_functions.h"

namespace disc::lowering {

void KernelEmitter::emit() {
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
  // This chunk's row of each per-column partial buffer starts at 0 (sums)
  // or -inf (maxima).
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
  if (text.find("@disc_expf16(") != std::string::npos) text += expf_function(kVectorWidth, host_pow2());
  if (text.find("@disc_expf(") != std::string::npos) text += expf_function(0);
  kernel_.mlir = text;
}

// One pass over the row: the vector body and a masked vector tail when
// every non-broadcast input is contiguous along the row, else a strided
// scalar loop. Returns the scalar results of `accs`, one per value body returns.
std::vector<std::string> KernelEmitter::pass(const std::vector<Acc>& accs, const Body& body) {
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
  // The last len % 16 columns as one vector with the lanes past the end
  // masked off, instead of a scalar loop: a row of 10 (a classifier's
  // log_softmax) is one masked vector per pass, not 10 scalar exps. Dead
  // lanes load 0, store nothing and add the identity to the accumulators.
  // Skipped when there is no tail (rows of 128: the empty masked exp cost
  // softmax ~10%).
  const std::string vtypes = types(vt, m);
  std::string has_tail = fresh(), tail_acc = fresh();
  line(has_tail + " = arith.cmpi ne, %nrem, %c0 : index");
  line(head(tail_acc, m) + "scf.if " + has_tail + (m ? " -> (" + vtypes + ")" : "") + " {");
  indent_ += "  ";
  std::string mask = fresh();
  line(mask + " = vector.create_mask %nrem : vector<" + std::to_string(kVectorWidth) + "xi1>");
  Variant tail{Mode::kMasked, "%nv", emitter(kVectorWidth), {}, mask};
  std::vector<std::string> tvals = body(tail);
  std::vector<std::string> combined;
  for (size_t k = 0; k < m; ++k) {
    std::string live = tail.e.select(mask, tvals.at(k), vinit[k]);
    combined.push_back(accs[k] == Acc::kAdd ? tail.e.binary("arith.addf", vres[k], live)
                                            : tail.e.max_nan(vres[k], live));
  }
  if (m) line("scf.yield " + join(combined) + " : " + vtypes);
  indent_.resize(indent_.size() - 2);
  if (m) {
    line("} else {");
    line("  scf.yield " + join(vres) + " : " + vtypes);
  }
  line("}");
  std::vector<std::string> reduced;
  for (size_t k = 0; k < m; ++k) reduced.push_back(horizontal(accs[k], results(tail_acc, m)[k]));
  if (m) line("scf.yield " + join(reduced) + " : " + types("f32", m));
  indent_.resize(indent_.size() - 2);
  line("} else {");
  indent_ += "  ";
  std::vector<std::string> sres = loop(Mode::kStrided, 0, "%lo", "%n", "%c1", sinit, 1);
  if (m) line("scf.yield " + join(sres) + " : " + types("f32", m));
  indent_.resize(indent_.size() - 2);
  line("}");
  return results(name, m);
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
