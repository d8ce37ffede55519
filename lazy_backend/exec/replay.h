// Running one recorded node with ATen: shared by the reference executor and
// (through it) by the CPU-side checks in tests.
#pragma once
#include <ATen/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

#include "lowering/ir/graph.h"
#include "lowering/ir/node.h"

namespace disc {

// The ATen operator an interned op name ("aten::add.Tensor") refers to.
c10::OperatorHandle resolve_op(uint32_t op);

// Runs node `n` on values `ins` (one per node input; on the target's
// device, device/target.h); returns its outputs: the op's fresh returns,
// then the new values of mutated inputs.
// A mutated input is copied first, so its old value survives for other
// users -- unless `in_place` lists it (by position in n.mutated): the caller
// knows that value has no other reader.
std::vector<at::Tensor> replay(const c10::OperatorHandle& op, const ir::Node& n,
                               std::vector<at::Tensor> ins,
                               const std::vector<bool>* in_place = nullptr);

// Called in a catch block for the step that ran node `n`: rethrows the
// exception, a c10::Error (IndexError, ...) with the op's name and where the
// user traced it added to its message, so that an error raised long after
// the trace says where it came from.
[[noreturn]] void rethrow_naming(const ir::Node& n);

// The key of random node `n`'s stream (runtime/cpu/philox.h): what its
// numbers are drawn from, on every executor.
uint64_t node_seed(const ir::Node& n);

// The CPU tensor a data leaf holds.
at::Tensor param_tensor(const ir::Node& n);

// Whether graph node `node` is a parameter the graph leaves as it is, run
// in no-grad mode: inference, where the next graph reads the same value
// (what is made from it may be kept: packed weights, casts).
bool unchanged_in_inference(const ir::Graph& g, uint32_t node);

}  // namespace disc
