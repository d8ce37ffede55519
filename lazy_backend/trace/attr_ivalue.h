// Conversion between boxed ATen arguments (IValues) and the trace IR's
// torch-free attributes. Exact round trip: replaying a node passes the op
// the same arguments it was traced with (the disc device becomes the one
// the node runs on).
#pragma once
#include <ATen/core/ivalue.h>
#include <ATen/core/function_schema.h>

#include <optional>

#include "lowering/ir/attr.h"

namespace disc {

// nullopt when the argument cannot be recorded (e.g. an explicit Generator).
std::optional<ir::Attr> to_attr(const c10::IValue& v, const c10::Argument& arg);
// `device`: what a device attribute (the disc device) becomes.
c10::IValue to_ivalue(const ir::Attr& a, c10::Device device);

// Float Scalars (learning rate, momentum, eps...) change between steps:
// they are recorded as runtime data rather than constants.
bool is_runtime_scalar(const c10::IValue& v, const c10::Argument& arg);

}  // namespace disc
