#include "lowering/plan.h"

#include <sstream>

namespace disc::lowering {

namespace {

const char* step_kind_name(Step::Kind k) {
  switch (k) {
    case Step::Kind::kParam: return "param";
    case Step::Kind::kKernel: return "kernel";
    case Step::Kind::kGemmGroup: return "gemm group";
    case Step::Kind::kLibrary: return "library";
    case Step::Kind::kOp: return "op";
  }
  return "?";
}

const char* extent_name(KernelOutput::Extent e) {
  switch (e) {
    case KernelOutput::Extent::kElements: return "";
    case KernelOutput::Extent::kPerRow: return "/row";
    case KernelOutput::Extent::kPerColumn: return "/column";
  }
  return "?";
}

void print_refs(std::ostream& os, const std::vector<ir::GraphRef>& refs) {
  for (const ir::GraphRef& r : refs) os << " %" << r.node << "." << r.index;
}

void print_bools(std::ostream& os, const std::vector<bool>& v) {
  os << "[";
  for (size_t k = 0; k < v.size(); ++k) os << (k ? ", " : "") << (v[k] ? 1 : 0);
  os << "]";
}

void print_kernel(std::ostream& os, size_t k, const KernelInterface& kernel) {
  os << "  kernel " << k << " " << fusion_kind_name(kernel.kind) << " group " << kernel.group << ": in";
  print_refs(os, kernel.inputs);
  os << " out";
  for (const KernelOutput& o : kernel.outputs) os << " %" << o.op << "." << o.index << extent_name(o.extent);
  if (kernel.per_outer) os << " (per outer index)";
  if (kernel.loads_before_stores) os << " (loads before stores)";
  os << "\n";
}

void print_library_call(std::ostream& os, uint32_t op, const LibraryCall& c) {
  os << "  library %" << op << " " << library_call_kind_name(c.kind);
  if (c.act != Activation::kNone) os << " " << activation_name(c.act);
  if (c.declined) os << ", on ATen: " << c.declined;
  if (c.kind == LibraryCall::Kind::kConv && !c.declined) os << (c.nhwc ? ", nhwc" : ", nchw");
  if (c.weight_param >= 0) os << ", weight %" << c.weight_param << (c.weight_reused ? " (reused)" : "");
  if (c.own_buffer) os << ", own buffer";
  if (c.kind == LibraryCall::Kind::kAttention) os << ", " << describe(c.attention);
  os << "\n";
}

void print_step(std::ostream& os, size_t s, const Step& step) {
  os << "  step " << s << ": " << step_kind_name(step.kind);
  if (step.kind == Step::Kind::kKernel) os << " " << step.kernel;
  else os << " %" << step.op;
  if (!step.last_read.empty()) {
    os << "  last read ";
    print_bools(os, step.last_read);
  }
  if (!step.release.empty()) {
    os << "  release";
    print_refs(os, step.release);
  }
  if (!step.publish.empty()) {
    os << "  publish";
    for (uint32_t o : step.publish) os << " " << o;
  }
  os << "\n";
}

}  // namespace

const char* fusion_kind_name(FusionKind k) {
  switch (k) {
    case FusionKind::kLoop: return "kLoop";
    case FusionKind::kInput: return "kInput";
    case FusionKind::kStitch: return "kStitch";
  }
  return "?";
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
  }
  return "?";
}

const char* library_call_kind_name(LibraryCall::Kind k) {
  switch (k) {
    case LibraryCall::Kind::kGemm: return "gemm";
    case LibraryCall::Kind::kConv: return "conv";
    case LibraryCall::Kind::kEpilogue: return "epilogue";
    case LibraryCall::Kind::kAttention: return "attention";
  }
  return "?";
}

std::string describe(const AttentionCall& a) {
  std::ostringstream os;
  os << "scores %" << a.scores << ", scale " << attention_scale_name(a.scale);
  if (a.scale == AttentionCall::Scale::kMulConstant || a.scale == AttentionCall::Scale::kDivConstant)
    os << " " << a.constant;
  os << (a.mask ? ", mask" : ", no mask") << (a.nan_when_all_masked ? "" : ", safe softmax");
  if (a.dropout >= 0) os << ", dropout %" << a.dropout << " p " << a.dropout_p;
  if (a.grad_q >= 0) os << ", backward %" << a.grad_q << " %" << a.grad_kt << " %" << a.grad_v;
  return os.str();
}

const char* attention_scale_name(AttentionCall::Scale s) {
  switch (s) {
    case AttentionCall::Scale::kNone: return "none";
    case AttentionCall::Scale::kMulTensor: return "mul tensor";
    case AttentionCall::Scale::kDivTensor: return "div tensor";
    case AttentionCall::Scale::kMulConstant: return "mul";
    case AttentionCall::Scale::kDivConstant: return "div";
  }
  return "?";
}

const char* target_name(Target t) { return t == Target::kCuda ? "cuda" : "cpu"; }

std::string ExecutionPlan::to_string() const {
  std::ostringstream os;
  for (size_t k = 0; k < kernels.size(); ++k) print_kernel(os, k, kernels[k]);
  for (const DeclinedGroup& d : declined) os << "  group " << d.group << " runs op by op: " << d.why << "\n";
  for (uint32_t i = 0; i < library.size(); ++i)
    if (library[i]) print_library_call(os, i, *library[i]);
  for (uint32_t i = 0; i < layouts.to_nchw.size(); ++i) {
    if (layouts.nhwc_out[i]) os << "  layout %" << i << " nhwc out\n";
    if (!layouts.to_nchw[i].empty()) {
      os << "  layout %" << i << " to nchw ";
      print_bools(os, layouts.to_nchw[i]);
      os << "\n";
    }
    if (layouts.match_inputs[i]) os << "  layout %" << i << " matches its inputs' layout\n";
  }
  for (size_t s = 0; s < steps.size(); ++s) print_step(os, s, steps[s]);
  for (size_t k = 0; k < code.size(); ++k) os << "  code " << k << " @" << code[k].name << "\n" << code[k].text;
  return os.str();
}

}  // namespace disc::lowering
