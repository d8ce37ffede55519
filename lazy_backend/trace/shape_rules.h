// The shapes column of aten_ops.def. Rules give output shapes for ops that
// PyTorch gives no Meta kernel although their shapes follow from their
// arguments' (_logcumsumexp, geqrf, the margin losses' backwards, histc's
// relatives), or whose Meta kernel refuses what the CPU kernel runs
// (_grouped_mm: bf16 only): with a rule they are recorded like any other op
// instead of running on the CPU fallback. Fixes make a Meta kernel's answer
// the CPU kernel's where the two disagree: the graph runs the CPU kernel.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>

#include "lazy_backend/trace/shape_cache.h"

namespace disc {

// The op's results as meta tensors; nullopt when no rule names the op.
std::optional<MetaResult> shapes_by_rule(const std::string& name, c10::ArrayRef<c10::IValue> args);

// Makes `r`, the Meta kernel's answer for `op` (full name `name`), what the
// CPU kernel returns.
void match_cpu_kernel(const c10::OperatorHandle& op, const std::string& name,
                      c10::ArrayRef<c10::IValue> args, MetaResult& r);

}  // namespace disc
