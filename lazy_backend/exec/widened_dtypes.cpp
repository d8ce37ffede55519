#include "lazy_backend/exec/widened_dtypes.h"

#include <functional>
#include <unordered_map>

#include "lowering/ir/node.h"

namespace disc {

namespace {

using Rule = std::function<std::optional<at::ScalarType>(at::ScalarType)>;

// histc on integers counts exactly in float64 for |values| < 2^53; CUDA's
// kernel bins integers with the same floor((x - min) * bins / (max - min)).
std::optional<at::ScalarType> integers_in_double(at::ScalarType t) {
  if (at::isIntegralType(t, /*includeBool=*/false)) return at::kDouble;
  return std::nullopt;
}

const std::unordered_map<uint32_t, Rule>& rules() {
  static const std::unordered_map<uint32_t, Rule> table = {
      {ir::intern_op("aten::histc"), integers_in_double},
  };
  return table;
}

}  // namespace

std::optional<at::ScalarType> widened_dtype(uint32_t op, at::ScalarType dtype) {
  auto it = rules().find(op);
  if (it == rules().end()) return std::nullopt;
  return it->second(dtype);
}

}  // namespace disc
