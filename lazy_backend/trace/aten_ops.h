// The torch side's op facts, from one table (aten_ops.def). Shape rules and
// the CPU-shape fixes read the same table in shape_rules.cpp, where their
// functions are.
#pragma once

#include <string>
#include <vector>

namespace disc::aten_ops {

// Whether every output dim of the op named `schema_name` ("aten::add") is an
// input dim or a SymInt argument: the shape cache may answer by pattern.
bool sizes_from_inputs(const std::string& schema_name);

// Whether the op's Scalar arguments are sizes (arange's bounds).
bool scalars_are_sizes(const std::string& schema_name);

// Whether the op's float Scalar arguments decide the computation's form
// (pow's exponent): traced as attributes, in the graph's structure, not as
// the runtime scalars other float Scalars are (a learning rate).
bool scalars_are_form(const std::string& schema_name);

// Why the op always runs on the CPU fallback, or nullptr when it is traced.
const char* host_only(const std::string& schema_name);

// Ops registered for capture although PyTorch would decompose them, as the
// registration names them ("mul_.Scalar").
std::vector<std::string> recorded_whole();

}  // namespace disc::aten_ops
