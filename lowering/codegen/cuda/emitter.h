// The emitter behind emit_cuda_kernel (kernels.h), shared by the
// files that write one CUDA kernel: its values (values.cpp: loads,
// scalars, the ops' formulas, producers, stores) and its bodies
// (block_plans.cpp: the grid-stride loop, a block per row, a thread per
// column). Private to lowering/codegen/cuda: nothing outside this folder
// includes it.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "lowering/program.h"

namespace disc::lowering {

// One kernel's text: every value a named const float, one op per line, so
// the text (a cache key) does not depend on the compiler's argument order.
class CudaEmitter {
 public:
  CudaEmitter(const Program& p, const KernelInterface& k) : p_(p), k_(k) {}

  std::string loop_body();
  // nullopt (with why) for a row op without CUDA codegen.
  std::optional<std::string> row_body(std::string* why);
  std::string column_body();

 private:
  enum class Acc { kAdd, kMax };
  // Splits index `index` (an element, or a row) over dims [0, dims) into
  // each input's offset o<k>.
  void offsets(const char* index, uint32_t dims, const char* indent);
  // The element-wise producers at the current element; the row op's input
  // values. Producers read outside the group are stored when `store`.
  std::vector<std::string> producers(bool store);
  std::string reduced(Acc a, const std::string& value);
  void store(size_t slot, const std::string& index, const std::string& value);
  size_t slot_of(uint32_t op, uint32_t index) const;
  uint32_t row_op() const { return p_.groups[k_.group].ops.back(); }
  // The row op's operand `operand` as an index among its tensor inputs, or
  // -1 where it is no tensor (an absent weight).
  int tensor_input(size_t operand) const;
  // One pass over the row: `each` writes the body at column j and returns
  // one value per accumulator in `accs` (none: a pass that only stores);
  // returns the accumulators' block totals.
  using Each = std::function<std::vector<std::string>()>;
  std::vector<std::string> pass(const std::vector<Acc>& accs, const Each& each);
  void reduction();
  void softmax();
  void softmax_backward();
  void layer_norm();
  void layer_norm_backward();
  // Writes a per-row value from thread 0.
  void store_row(size_t slot, const std::string& value);
  std::string let(const std::string& expr) {
    const std::string name = "v" + std::to_string(next_++);
    out_ << indent_ << "const float " << name << " = " << expr << ";\n";
    return name;
  }
  std::string load(size_t k);
  std::string scalar(uint32_t op, size_t operand);
  bool is_one(uint32_t op, size_t operand) const;
  bool gelu_tanh(uint32_t op, size_t operand) const;
  std::string compute(uint32_t op, const std::vector<std::string>& in);
  std::string gelu_tanh_inner(const std::string& x);
  std::string gelu(uint32_t op, const std::string& x);
  std::string gelu_backward(uint32_t op, const std::string& dy, const std::string& x);

  const Program& p_;
  const KernelInterface& k_;
  std::ostringstream out_;
  uint32_t next_ = 0;
  std::map<size_t, std::string> loaded_;
  bool row_ = false;
  int passes_ = 0;  // over the row, so far
  int scopes_ = 0;  // each pass after the first opens one: its accumulators are its own
  std::string indent_ = "    ";
};

}  // namespace disc::lowering
