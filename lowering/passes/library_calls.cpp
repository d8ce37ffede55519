// library-calls: how each library op runs. GEMMs (mm / addmm / bmm) are GEMM
// library calls with the activation the library-epilogue pass gave them; a
// mm / addmm whose B is a parameter seen through layout ops is a weight
// pre-packing candidate (packed once per step when several GEMMs read it);
// a merged GEMM member learns whether its part must be a buffer of its own;
// convolutions are convolution calls (NHWC out where the layout plan says),
// or, where the library does not take them, ATen's, with the reason.
//
//   %3 = aten::t(%1.0)
//   %4 = aten::addmm(%2.0, %0.0, %3.0)   library gemm relu weight %1
//   %5 = aten::relu(%4.0)                 library epilogue
//
// Whether a GEMM's scalars and bias suit the library is runtime data
// (alpha, beta, the bias's sizes): the executor checks those per call.
#include <algorithm>
#include <map>

#include "lowering/passes/passes.h"
#include "runtime/options.h"

namespace disc::lowering {

namespace {

bool is_gemm(uint32_t op) {
  const Op o = op_of(op);
  return o == Op::kMm || o == Op::kAddmm || o == Op::kBmm;
}

// Ops that only relayout a matrix: a GEMM reading W through them reads W.
bool relayouts(uint32_t op) {
  const Op o = op_of(op);
  return o == Op::kTranspose || o == Op::kT || o == Op::kPermute || o == Op::kAlias;
}

// The parameter op B of GEMM `i` is a view of, through ops that only
// relayout it, or -1.
int32_t weight_param_of(const Program& p, uint32_t i) {
  const ProgramOp& op = p.ops[i];
  const Op o = op_of(op.node->op);
  if (o != Op::kMm && o != Op::kAddmm) return -1;
  uint32_t src = op.inputs[o == Op::kAddmm ? 2 : 1].node;
  while (relayouts(p.ops[src].node->op)) src = p.ops[src].inputs[0].node;
  return p.ops[src].cls == OpClass::kData ? static_cast<int32_t>(src) : -1;
}

// Whether `user` needs merged member `m`'s value as a buffer of its own: an
// op that indexes storage (as_strided) or one we know nothing about.
// Kernels, element-wise and layout ops and GEMMs take any strides; a view
// that keeps the last dim only splits rows, which a column slice allows.
bool needs_own_buffer(const Program& p, uint32_t m, const ProgramOp& user) {
  const Op o = op_of(user.node->op);
  if (o == Op::kView || o == Op::kUnsafeView)
    return user.dims.empty() || user.dims[0].empty() || user.dims[0].back() != p.ops[m].dims[0].back();
  return user.cls == OpClass::kOpaque || user.cls == OpClass::kData || o == Op::kAsStrided;
}

LibraryCall call_for(const Program& p, uint32_t i) {
  const ProgramOp& op = p.ops[i];
  LibraryCall call;
  if (op.attention >= 0) {
    call.kind = LibraryCall::Kind::kAttention;
    call.attention = p.attentions[op.attention];
  } else if (is_gemm(op.node->op)) {
    call.kind = LibraryCall::Kind::kGemm;
    call.weight_param = weight_param_of(p, i);
  } else if (is_convolution(op.node->op)) {
    call.kind = LibraryCall::Kind::kConv;
    call.declined = conv_library_declines(p, i);
    call.nhwc = options::text(options::Id::kConv) == "nhwc";
    call.nhwc_out = p.plan.layouts.nhwc_out.empty() ? false : p.plan.layouts.nhwc_out[i];
  } else {
    throw CompileError("library-calls", i, ir::op_name(op.node->op), "a library op that is no GEMM or convolution");
  }
  return call;
}

// A B read by several GEMMs is packed once and reused within the step.
void mark_reused_weights(const Program& p, std::vector<std::optional<LibraryCall>>& calls) {
  std::map<std::pair<uint32_t, uint32_t>, int> readers;
  auto b_of = [&](uint32_t i) { return p.ops[i].inputs[p.ops[i].inputs.size() == 3 ? 2 : 1]; };
  for (uint32_t i = 0; i < p.ops.size(); ++i)
    if (calls[i] && calls[i]->weight_param >= 0) ++readers[{b_of(i).node, b_of(i).index}];
  for (uint32_t i = 0; i < p.ops.size(); ++i)
    if (calls[i] && calls[i]->weight_param >= 0)
      calls[i]->weight_reused = readers[{b_of(i).node, b_of(i).index}] > 1;
}

void mark_own_buffers(const Program& p, std::vector<std::optional<LibraryCall>>& calls) {
  std::vector<bool> output(p.ops.size(), false);
  for (const ir::GraphRef& r : p.outputs) output[r.node] = true;
  const std::vector<std::vector<uint32_t>> users = users_of(p);
  for (const GemmGroup& grp : p.gemm_groups)
    for (uint32_t m : grp.ops) {
      bool own = output[m];
      for (uint32_t u : users[m]) own = own || needs_own_buffer(p, m, p.ops[u]);
      calls[m]->own_buffer = own;
    }
}

}  // namespace

void plan_library_calls(Program& p) {
  std::vector<std::optional<LibraryCall>>& calls = p.plan.library;
  calls.assign(p.ops.size(), std::nullopt);
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const ProgramOp& op = p.ops[i];
    if (op.erased) continue;
    if (op.epilogue_of >= 0) {
      calls[i].emplace().kind = LibraryCall::Kind::kEpilogue;
      std::optional<LibraryCall>& lib = calls[op.epilogue_of];  // ops come after their inputs
      if (!lib || (lib->kind != LibraryCall::Kind::kGemm && lib->kind != LibraryCall::Kind::kConv))
        throw CompileError("library-calls", i, ir::op_name(op.node->op),
                           "epilogue of an op that is no GEMM or library convolution");
      lib->act = op_of(op.node->op) == Op::kRelu ? Activation::kRelu : Activation::kGelu;
    } else if (op.cls == OpClass::kLibrary) {
      calls[i] = call_for(p, i);
    }
  }
  mark_reused_weights(p, calls);
  mark_own_buffers(p, calls);
}

}  // namespace disc::lowering
