// What a pass body reads and writes at column j: input loads (broadcast,
// contiguous or strided; vector or scalar), output stores and load-backs,
// per-column partial sums, per-row results, and the group's element-wise
// producers computed from those loads.
#include "lowering/codegen/cpu/kernel_emitter.h"

namespace disc::lowering {

// Input k at column j, as f32 (or a vector of them).
std::string KernelEmitter::load(Variant& v, size_t k) {
  auto it = v.loads.find(k);
  if (it != v.loads.end()) return it->second;
  const std::string t = elem(k), mem = "memref<?x" + t + ">";
  std::string value;
  if (row_broadcast_[k]) {
    std::string raw = fresh();
    line(raw + " = memref.load %in" + std::to_string(k) + "[" + in_offset(k) + "] : " + mem);
    value = v.e.splat(emitter(0).to_f32(raw, kernel_.input_dtypes[k]));
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
    const std::string vt = "vector<" + std::to_string(kVectorWidth) + "x" + t + ">";
    if (v.mode == Mode::kVector) {
      line(raw + " = vector.load %in" + std::to_string(k) + "[" + idx + "] : " + mem + ", " + vt);
    } else if (v.mode == Mode::kMasked) {
      std::string pass = fresh();
      line(pass + " = arith.constant dense<" + (t[0] == 'f' ? "0.0" : "0") + "> : " + vt);
      line(raw + " = vector.maskedload %in" + std::to_string(k) + "[" + idx + "], " + v.mask +
           ", " + pass + " : " + mem + ", vector<" + std::to_string(kVectorWidth) + "xi1>, " + vt +
           " into " + vt);
    } else {
      line(raw + " = memref.load %in" + std::to_string(k) + "[" + idx + "] : " + mem);
    }
    value = v.e.to_f32(raw, kernel_.input_dtypes[k]);
  }
  return v.loads[k] = value;
}

// Output slot `k` at column j: store, or load back what a pass stored.
std::string KernelEmitter::out_index(Variant& v) {
  std::string idx = fresh();
  line(idx + " = arith.addi %ob, " + v.j + " : index");
  return idx;
}

// Vector loads and stores of f32 at `idx` of memref `m` (masked in the
// masked tail); scalar ones in the strided loop. store_elem stores values
// already in memory's element type `elem`.
std::string KernelEmitter::load_f32(Variant& v, const std::string& m, const std::string& idx) {
  const std::string vt = "vector<" + std::to_string(kVectorWidth) + "xf32>";
  std::string r = fresh();
  if (v.mode == Mode::kVector) {
    line(r + " = vector.load " + m + "[" + idx + "] : memref<?xf32>, " + vt);
  } else if (v.mode == Mode::kMasked) {
    std::string pass = fresh();
    line(pass + " = arith.constant dense<0.0> : " + vt);
    line(r + " = vector.maskedload " + m + "[" + idx + "], " + v.mask + ", " + pass +
         " : memref<?xf32>, vector<" + std::to_string(kVectorWidth) + "xi1>, " + vt + " into " + vt);
  } else {
    line(r + " = memref.load " + m + "[" + idx + "] : memref<?xf32>");
  }
  return r;
}

void KernelEmitter::store_f32(Variant& v, const std::string& m, const std::string& idx,
                              const std::string& value) {
  store_elem(v, m, idx, value, "f32");
}

void KernelEmitter::store_elem(Variant& v, const std::string& m, const std::string& idx,
                               const std::string& value, const std::string& elem) {
  const std::string vt = "vector<" + std::to_string(kVectorWidth) + "x" + elem + ">";
  const std::string mem = "memref<?x" + elem + ">";
  if (v.mode == Mode::kVector)
    line("vector.store " + value + ", " + m + "[" + idx + "] : " + mem + ", " + vt);
  else if (v.mode == Mode::kMasked)
    line("vector.maskedstore " + m + "[" + idx + "], " + v.mask + ", " + value + " : " + mem +
         ", vector<" + std::to_string(kVectorWidth) + "xi1>, " + vt);
  else
    line("memref.store " + value + ", " + m + "[" + idx + "] : " + mem);
}

// An element-wise output: f32, or bf16 / f16 stored as its bits.
void KernelEmitter::store(Variant& v, size_t k, const std::string& value) {
  const std::string m = "%out" + std::to_string(k);
  if (output_dtype(k) != ir::DType::kFloat32)
    store_elem(v, m, out_index(v), v.e.to_bits(output_dtype(k), value), "i16");
  else
    store_f32(v, m, out_index(v), value);
}

std::string KernelEmitter::load_output(Variant& v, size_t k) {
  return load_f32(v, "%out" + std::to_string(k), out_index(v));
}

// Folds `value` into this chunk's partial (sum or max) of output slot k at
// column j.
void KernelEmitter::accumulate(Variant& v, size_t k, const std::string& value) {
  std::string idx = fresh(), o = "%out" + std::to_string(k);
  line(idx + " = arith.addi %cb, " + v.j + " : index");
  std::string old = load_f32(v, o, idx);
  std::string sum = kernel_.outputs[k].combine == KernelOutput::Combine::kMax
                        ? v.e.max_nan(old, value)
                        : v.e.binary("arith.addf", old, value);
  store_f32(v, o, idx, sum);
}

// A per-row output: f32, or bf16 / f16 (layer norm's mean and rstd) as its bits.
void KernelEmitter::store_row(size_t k, const std::string& scalar) {
  const std::string m = "%out" + std::to_string(k);
  if (output_dtype(k) != ir::DType::kFloat32)
    line("memref.store " + emitter(0).to_bits(output_dtype(k), scalar) + ", " + m + "[%row] : memref<?xi16>");
  else
    line("memref.store " + scalar + ", " + m + "[%row] : memref<?xf32>");
}

// The element-wise producers at column j, and the row op's input values.
std::vector<std::string> KernelEmitter::row_inputs(Variant& v, bool store_producers) {
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
    // A bf16 or f16 op's result is rounded as ATen rounds it before
    // anything reads it.
    value[op] = v.e.round_to(p_.ops[op].node->outputs[0].dtype, value[op]);
    if (store_producers && used_outside_[op]) store(v, output_slot(op, 0), value[op]);
  }
  std::vector<std::string> ins;
  if (!loop_)
    for (const ir::GraphRef& r : p_.ops[row_op_].inputs) ins.push_back(of(r));
  return ins;
}

}  // namespace disc::lowering
