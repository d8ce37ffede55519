// Output shapes for ops that PyTorch gives no Meta kernel although their
// shapes follow from their arguments' (_logcumsumexp, geqrf, the margin
// losses' backwards, histc's relatives), or whose Meta kernel refuses what
// the CPU kernel runs (_grouped_mm: bf16 only): with a rule here they are
// recorded like any other op instead of running on the CPU fallback.
#pragma once
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>

#include "lazy_backend/trace/shape_cache.h"

namespace disc {

// The op's results as meta tensors; nullopt when no rule names the op.
std::optional<MetaResult> shapes_by_rule(const std::string& name, c10::ArrayRef<c10::IValue> args);

}  // namespace disc
