// The emitter behind emit_fused_kernel (fused_kernel.h), shared by the files
// that write one kernel: skeleton, loads and stores, row plans. It writes
// from the group's analysis (common/group_analysis.h), which it extends.
// Private to lowering/codegen/cpu: nothing outside this folder includes it.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "lowering/codegen/common/group_analysis.h"
#include "lowering/codegen/cpu/fused_kernel.h"
#include "lowering/codegen/cpu/value_emitter.h"

namespace disc::lowering {

class KernelEmitter : private GroupAnalysis {
 public:
  KernelEmitter(const Program& p, uint32_t g) : GroupAnalysis(p, g) {}

  std::optional<FusedKernel> run(std::string* why);

 private:
  enum class Acc { kAdd, kMax };
  static constexpr uint32_t kUnroll = 4;  // independent accumulators per reduction
  // kMasked: the row's last len % 16 columns as one vector with the lanes
  // past the end masked off (loads, stores and reductions).
  enum class Mode { kVector, kMasked, kStrided };

  // One loop variant of one pass: how it addresses memory, its emitter, and
  // the values it has loaded so far.
  struct Variant {
    Mode mode;
    std::string j;  // the column index
    ValueEmitter e;
    std::map<size_t, std::string> loads;
    std::string mask = {};  // kMasked: the vector<16xi1> of live lanes
  };

  using Body = std::function<std::vector<std::string>(Variant&)>;

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

  // Loads and stores (kernel_loads_stores.cpp).
  std::string load(Variant& v, size_t k);
  std::string load_f32(Variant& v, const std::string& memref, const std::string& idx);
  void store_f32(Variant& v, const std::string& memref, const std::string& idx,
                 const std::string& value);
  void store_elem(Variant& v, const std::string& memref, const std::string& idx,
                  const std::string& value, const std::string& elem);
  ir::DType output_dtype(size_t k) const { return lowering::output_dtype(p_, kernel_.outputs[k]); }
  std::string out_index(Variant& v);
  void store(Variant& v, size_t k, const std::string& value);
  std::string load_output(Variant& v, size_t k);
  void accumulate(Variant& v, size_t k, const std::string& value);
  void store_row(size_t k, const std::string& scalar);
  std::vector<std::string> row_inputs(Variant& v, bool store_producers);

  // The function and its passes over a row (kernel_skeleton.cpp).
  void emit();
  std::string signature() const;
  void emit_sizes_and_strides();
  void emit_row_bounds();
  void emit_contiguity_check();
  void emit_clear_column_partials();
  void open_leading_loops();
  std::string finished_text(const std::string& signature);

  // One scf.for of a pass: its columns, accumulators and unrolling.
  struct Loop {
    Mode mode;
    uint32_t width;  // vector lanes, 0 for scalars
    std::string lo, hi, step;
    std::vector<std::string> init;  // accumulator start values, `unroll` sets
    uint32_t unroll;
  };
  std::vector<std::string> pass(const std::vector<Acc>& accs, const Body& body);
  std::vector<std::string> loop(const std::vector<Acc>& accs, const Body& body, const Loop& l);
  std::vector<std::string> vector_loops(const std::vector<Acc>& accs, const Body& body,
                                        const std::vector<std::string>& init);
  std::vector<std::string> masked_tail(const std::vector<Acc>& accs, const Body& body,
                                       const std::vector<std::string>& init,
                                       const std::vector<std::string>& accumulated);
  std::string identity(Acc a, uint32_t width);
  std::string horizontal(Acc a, const std::string& v);
  static std::string join(const std::vector<std::string>& v);

  // The passes of each row op (row_plans.cpp).
  void emit_row();
  void emit_loop();
  void emit_column_sum();
  void emit_reduction();
  void emit_softmax();
  void emit_softmax_backward();
  void emit_layer_norm();
  void emit_layer_norm_backward();

  std::ostringstream body_;
  std::string indent_;
  uint32_t counter_ = 0;
  std::string name_;  // one per kind: equal groups give equal text
  std::string mlir_;
};

}  // namespace disc::lowering
