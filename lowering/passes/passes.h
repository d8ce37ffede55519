// The compiler's passes, in pipeline order (see lowering/passes/pipeline.cpp).
// Each lives in its own file with a test of the same name in tests/cpp.
#pragma once
#include "lowering/program.h"

namespace disc::lowering {

// Checks the graph is well formed; throws CompileError naming the node.
void verify(Program& p);
// Ops that undo each other (transpose pairs, squeeze of an unsqueeze, neg
// of a neg, alias) read the original value; a reshape of a reshape, an
// expand of an expand, read the first one's input. Rewires reads only;
// canonicalize erases what is dead.
void fold(Program& p);
// CSE and DCE: every value computed once, nothing computed for nothing.
void canonicalize(Program& p);
// Gives every dim a symbol; equal symbols are equal sizes for any binding.
void shape_constraints(Program& p);
// Runs hand-written attention (bmm, scale, mask, softmax, bmm) whose scores
// nothing else reads as one fused attention call.
void fuse_attention(Program& p);
// Marks a relu on a GEMM's only use as that library call's epilogue.
void library_epilogue(Program& p);
// Merges float32 GEMMs that share an operand (and, when enabled, independent
// equal-shape ones) into Program::gemm_groups; reads DISC_GEMM_MERGE and
// DISC_GEMM_MERGE_BATCHED (runtime/options.h).
void gemm_merge(Program& p);
// Groups ops into kLoop / kInput / kStitch kernels.
void plan_fusion(Program& p);
// Checks the plan: groups are acyclic and within the argument cap.
void verify_plan(Program& p);

// The execution plan (plan.h), one pass each:
// Fusion groups the codegen can write become kernels; the rest run op by op.
void select_kernels(Program& p);
// Where convolution activations stay NHWC; reads options DISC_CONV.
void plan_layouts(Program& p);
// How each library op runs: GEMM / convolution calls, epilogues, weights.
void plan_library_calls(Program& p);
// Kernels, merged GEMMs and ops in dependency order.
void schedule(Program& p);
// Release points and in-place writes.
void plan_buffers(Program& p);
// After which step each graph output is final.
void plan_publishing(Program& p);
// Each kernel's code for the program's target (lowering/codegen/cpu, cuda).
void codegen(Program& p);

// Why the convolution library does not take convolution op `i` ("dtype",
// "rank", "transposed", "disabled" by DISC_CONV=aten), or nullptr.
const char* conv_library_declines(const Program& p, uint32_t i);

}  // namespace disc::lowering
