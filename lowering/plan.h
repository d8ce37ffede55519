// The execution plan: what an executor does to run a compiled graph, decided
// by the plan passes (kernels, layout-plan, library-calls, schedule,
// buffer-plan, publish-plan) and held in the Program. An executor allocates,
// launches and publishes what it says and decides nothing itself.
//
// Up to its last stage it names no target: a kernel is a fusion group with
// the interface its code will have, a library call says what it computes (a
// GEMM with a ReLU epilogue, a convolution leaving NHWC activations), a
// layout is NCHW or NHWC. The codegen pass, last, writes each kernel's code
// for the program's target: MLIR for the CPU (-> LLVM), CUDA C++ for NVRTC.
// A CPU executor runs library calls on oneDNN; a CUDA one would run the same
// plan with cuBLASLt.
//
//   kernel 0 kLoop group 0: in %0.0 %3.0 out %4.0 (loads before stores)
//   library %5 gemm relu, weight %2
//   step 0: param %0
//   step 3: kernel 0  last read [0, 1]  release %0.0 %3.0
//   step 4: library %5  release %4.0  publish 0
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lowering/ir/graph.h"

namespace disc::lowering {

enum class FusionKind : uint8_t {
  kLoop,     // element-wise + broadcast
  kInput,    // a reduction with its element-wise producers
  kStitch,   // reduction -> element-wise -> reduction (softmax, layer norm)
};
const char* fusion_kind_name(FusionKind k);

// What a generated kernel reads and writes, decided before any code is
// written (lowering/codegen/cpu/fused_kernel.h writes the code).
struct KernelOutput {
  enum class Extent : uint8_t {
    kElements,   // one value per element of the space
    kPerRow,     // one per row (last-dim reductions, mean, rstd)
    // One per column, summed over all rows (bias grads, layer norm's weight
    // grads): each launch chunk writes its partial sums to row %chunk of a
    // [chunks, n] buffer, and the launcher adds the chunks up.
    kPerColumn,
  };
  // How the launcher folds a kPerColumn output's chunk partials: their sum
  // (sum, and mean, which is then divided by the number of rows), or their
  // max (amax: partials start at -inf, NaN propagates).
  enum class Combine : uint8_t { kSum, kMean, kMax };
  uint32_t op = 0;     // the group op
  uint32_t index = 0;  // its output
  Extent extent = Extent::kElements;
  Combine combine = Combine::kSum;
};

struct KernelInterface {
  uint32_t group = 0;  // the fusion group it runs
  FusionKind kind = FusionKind::kLoop;
  // Rank of the iteration space: kLoop >= 1, kInput / kStitch >= 2 (the
  // space is padded with leading 1s to it).
  uint32_t rank = 0;
  ir::GraphRef space;                   // the value whose sizes are the space
  std::vector<ir::GraphRef> inputs;     // values read from outside the group
  std::vector<ir::DType> input_dtypes;
  std::vector<KernelOutput> outputs;    // written contiguously, f32
  std::vector<std::pair<uint32_t, uint32_t>> runtime;  // (op, runtime slot)
  // The column reduction spans dims 1..rank-2 only (x.sum(1) of [B, S, H]):
  // the launcher runs one chunk per index of dim 0, and the [dim 0, n]
  // partial buffer is the result itself. The kernel text is the same.
  bool per_outer = false;
  // Each element's inputs are all loaded before anything is stored at it
  // (kLoop: one pass, inputs loaded first). An output may then be written
  // into the buffer of an input read at the same index (same sizes, both
  // contiguous) that nothing reads after the kernel: an optimizer's update
  // lands in the parameter's own buffer.
  bool loads_before_stores = false;
};

// A fusion group whose ops run one by one, and why.
struct DeclinedGroup {
  uint32_t group = 0;
  std::string why;
};

enum class Activation : uint8_t { kNone, kRelu, kGelu };
const char* activation_name(Activation a);

// Attention written out by hand, found by the attention-pattern pass:
//   probs = _softmax(bmm(q, k^T) viewed [B, H, Lq, Lk] (* or / scale) (+ mask))
//   out = bmm(dropout?(probs) viewed [B * H, Lq, Lk], v)
// The second bmm runs as one fused attention call (runtime/cpu/attention.h)
// on its rewired inputs: q [B*H, Lq, D], k^T [B*H, D, Lk], v [B*H, Lk, Dv],
// then the scale if it is a tensor, then the mask if there is one. In
// training the backward's bmm's of grad q, grad k^T and grad v are one
// fused backward call (a kAttentionBackward GEMM group), each reading
// q, k^T, v, out, grad out, then the forward's and the backward's scale
// if they are tensors, then the mask.
struct AttentionCall {
  enum class Scale : uint8_t { kNone, kMulTensor, kDivTensor, kMulConstant, kDivConstant };
  uint32_t scores = 0;  // the softmax op: its [B, H, Lq, Lk] sizes in a run give B and H
  Scale scale = Scale::kNone;
  double constant = 1.0;  // kMulConstant / kDivConstant
  bool mask = false;      // an additive float mask, broadcast to [B, H, Lq, Lk]
  // _softmax makes a row whose every score is -inf NaN; _safe_softmax, 0.
  bool nan_when_all_masked = true;
  // The native_dropout op the probabilities went through, or -1: the call
  // draws that node's mask from its stream (its seed is the node's).
  int32_t dropout = -1;
  double dropout_p = 0.0;
  // The backward's bmm's the fused backward computes, or -1 (inference).
  int32_t grad_q = -1, grad_kt = -1, grad_v = -1;
};
const char* attention_scale_name(AttentionCall::Scale s);
std::string describe(const AttentionCall& a);  // "scores %9, scale mul tensor, mask"

// How a library op runs (library-calls).
struct LibraryCall {
  enum class Kind : uint8_t {
    kGemm,       // mm / addmm / bmm: the GEMM library where it takes the operands
    kConv,       // convolution / convolution_backward: the convolution library
    kEpilogue,   // an activation its GEMM or convolution already applied: passes its input on
    kAttention,  // a bmm that is the end of a hand-written attention: one fused call
  };
  Kind kind = Kind::kGemm;
  AttentionCall attention;  // kAttention
  // kGemm: the activation epilogue to apply (relu or gelu); kConv: relu only.
  Activation act = Activation::kNone;
  // kConv: runs on NHWC activations (else NCHW ones, which the library
  // reorders to its own layout inside the call: DISC_CONV=nchw).
  bool nhwc = false;
  bool nhwc_out = false;  // kConv: leaves its (first) output NHWC (layout-plan)
  // kConv: why the convolution library does not take it (a static string:
  // "dtype", "rank", "transposed", "disabled"); it then runs on ATen.
  const char* declined = nullptr;
  // kGemm mm / addmm whose B is a graph parameter seen through layout ops
  // (W, W^T): that parameter's op, else -1; a pre-packing candidate.
  // weight_reused: several GEMMs of the graph read this B.
  int32_t weight_param = -1;
  bool weight_reused = false;
  // A member of a merged GEMM whose part of the one result must be a dense
  // buffer of its own: a graph output, or read by an op that indexes
  // storage. Other members get a view of the result.
  bool own_buffer = false;
};
const char* library_call_kind_name(LibraryCall::Kind k);

// Where activations are NHWC (layout-plan). Per op; empty vectors where no
// convolution leaves NHWC.
struct LayoutPlan {
  // A convolution the library takes that leaves its (first) output NHWC.
  std::vector<bool> nhwc_out;
  // Per op, per output: an output that may be NHWC (an input was) but has a
  // reader that needs NCHW: made NCHW after the op runs. Empty for most ops.
  std::vector<std::vector<bool>> to_nchw;
  // An op that may read NHWC and NCHW 4-D inputs at once (the max-pool
  // backward of a flattened gradient): its NCHW inputs are made NHWC first,
  // since ATen's kernels fall back to slow strided loops on mixed layouts.
  std::vector<bool> match_inputs;
};

// One step of the schedule.
struct Step {
  enum class Kind : uint8_t {
    kParam,      // a graph input: bind its buffer
    kKernel,     // a generated kernel (KernelInterface `kernel`)
    kGemmGroup,  // merged GEMMs (Program::gemm_groups[op's gemm_group]): one call
    kLibrary,    // a library call (ExecutionPlan::library[op])
    kOp,         // one op on the target's op library (ATen)
  };
  Kind kind = Kind::kOp;
  uint32_t op = 0;      // the op (kKernel: its group's first op)
  int32_t kernel = -1;  // kKernel: index into ExecutionPlan::kernels
  // buffer-plan. kOp: per mutated input, whether this step reads it last, so
  // that the op may write it in place; kKernel: per kernel input, whether
  // this step reads it last, so that an output may take its buffer. Empty
  // where nothing qualifies.
  std::vector<bool> last_read;
  std::vector<ir::GraphRef> release;  // values no later step reads: freed after it
  std::vector<uint32_t> publish;      // graph outputs final after it (publish-plan)
};

// Whose code the codegen pass writes.
enum class Target { kCpu, kCuda };
const char* target_name(Target t);

// A kernel's code (codegen): its symbol and its text, MLIR on the CPU, CUDA
// C++ on CUDA.
struct KernelCode {
  std::string name;
  std::string text;
};

struct ExecutionPlan {
  std::vector<KernelInterface> kernels;  // kernels
  std::vector<int32_t> kernel_of_group;  // per fusion group: its kernel, or -1
  std::vector<DeclinedGroup> declined;   // groups the codegen declined
  LayoutPlan layouts;                    // layout-plan
  std::vector<std::optional<LibraryCall>> library;  // per op (library-calls)
  std::vector<Step> steps;               // schedule, buffer-plan, publish-plan
  std::vector<KernelCode> code;          // codegen: per kernel

  // Printed after the program by Program::to_string (disc-opt).
  std::string to_string() const;
};

}  // namespace disc::lowering
