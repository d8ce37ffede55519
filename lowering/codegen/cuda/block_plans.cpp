// A CUDA kernel's body: the grid-stride loop of a kLoop group, a block per
// row for kInput / kStitch groups (reductions, softmax, layer norm and
// their backward), and a thread per column for reductions over the
// leading dims.
#include "lowering/codegen/common/group_analysis.h"
#include "lowering/codegen/cuda/emitter.h"
#include "lowering/ops.h"

namespace disc::lowering {

// The grid-stride loop: each element's index split into the space's dims,
// each input's offset from its strides, the group computed, its outputs
// stored at the element's place in the contiguous result.
std::string CudaEmitter::loop_body() {
  out_ << "  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;\n"
       << "  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;"
       << " i < total; i += step) {\n";
  offsets("i", k_.rank, "    ");
  producers(true);
  out_ << "  }\n";
  return out_.str();
}

// A value reduced over the block: every thread's partial, then the
// block's total (or maximum), which every thread gets.
std::string CudaEmitter::reduced(Acc a, const std::string& value) {
  return let("disc_block_reduce(" + value + ", disc_part, " +
             (a == Acc::kAdd ? "0.0f, disc_add())" : "disc_neg_inf(), disc_max())"));
}

int CudaEmitter::tensor_input(size_t operand) const {
  return p_.ops[row_op()].node->tensor_operand(operand);
}

std::vector<std::string> CudaEmitter::pass(const std::vector<Acc>& accs, const Each& each) {
  if (passes_++ > 0) {
    out_ << "    {\n";
    ++scopes_;
  }
  for (size_t a = 0; a < accs.size(); ++a)
    out_ << "    float acc" << a << " = " << (accs[a] == Acc::kAdd ? "0.0f" : "disc_neg_inf()") << ";\n";
  out_ << "    for (long long j = threadIdx.x; j < n; j += blockDim.x) {\n";
  indent_ = "      ";
  const std::vector<std::string> v = each();
  for (size_t a = 0; a < accs.size(); ++a) {
    const std::string acc = "acc" + std::to_string(a);
    out_ << indent_ << acc << " = "
         << (accs[a] == Acc::kAdd ? acc + " + " + v.at(a) : "disc_max_nan(" + acc + ", " + v.at(a) + ")")
         << ";\n";
  }
  indent_ = "    ";
  out_ << "    }\n";
  std::vector<std::string> totals;
  for (size_t a = 0; a < accs.size(); ++a) totals.push_back(reduced(accs[a], "acc" + std::to_string(a)));
  return totals;
}

void CudaEmitter::store_row(size_t slot, const std::string& value) {
  out_ << "    if (threadIdx.x == 0) ";
  indent_ = "";
  store(slot, "row", value);
  indent_ = "    ";
}

// One block per row (rows grid-strided): the block's threads stride over
// the row's n columns, each pass a loop over them; a pass's partials are
// combined over the block (warp shuffles, then shared memory), and a
// row's results are written by thread 0. Layer norm's backward sums its
// weight and bias gradients per column into the block's own partial row
// (blockIdx.x of [gridDim.x, n]), cleared first; the launcher adds the
// blocks' rows up, as it adds the CPU kernel's chunks.
std::optional<std::string> CudaEmitter::row_body(std::string* why) {
  row_ = true;
  const Op op = op_of(p_.ops[row_op()].node->op);
  const bool reduces = op == Op::kSumDims || op == Op::kMeanDims || op == Op::kAmax;
  const bool softmaxes = op == Op::kSoftmax || op == Op::kLogSoftmax || op == Op::kSafeSoftmax;
  const bool backward = op == Op::kSoftmaxBackward || op == Op::kLogSoftmaxBackward;
  const bool ln_backward = op == Op::kLayerNormBackward;
  if (!reduces && !softmaxes && !backward && op != Op::kLayerNorm && !ln_backward) {
    if (why) *why = ir::op_name(p_.ops[row_op()].node->op) + ": no CUDA row codegen yet";
    return std::nullopt;
  }
  const uint32_t R = k_.rank;
  out_ << "  __shared__ float disc_part[32];\n"
       << "  const long long n = sizes[" << R - 1 << "];\n";
  for (const KernelOutput& o : k_.outputs)
    if (o.extent == KernelOutput::Extent::kPerColumn)
      out_ << "  for (long long j = threadIdx.x; j < n; j += blockDim.x) out" << slot_of(o.op, o.index)
           << "[blockIdx.x * n + j] = 0.0f;\n";
  out_ << "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n";
  offsets("row", R - 1, "    ");
  if (reduces) reduction();
  else if (softmaxes) softmax();
  else if (backward) softmax_backward();
  else if (ln_backward) layer_norm_backward();
  else layer_norm();
  for (; scopes_ > 0; --scopes_) out_ << "    }\n";
  out_ << "    __syncthreads();\n  }\n";  // disc_part is the next row's
  return out_.str();
}

void CudaEmitter::reduction() {
  const Op op = op_of(p_.ops[row_op()].node->op);
  std::string r = pass({op == Op::kAmax ? Acc::kMax : Acc::kAdd}, [&] {
    return std::vector{producers(true)[0]};
  })[0];
  if (op == Op::kMeanDims) r = let(r + " / static_cast<float>(n)");
  store_row(slot_of(row_op(), 0), r);
}

void CudaEmitter::softmax() {
  const Op op = op_of(p_.ops[row_op()].node->op);
  const size_t out0 = slot_of(row_op(), 0);
  const bool log = op == Op::kLogSoftmax;
  std::string mx = pass({Acc::kMax}, [&] { return std::vector{producers(true)[0]}; })[0];
  std::string masked;
  if (op == Op::kSafeSoftmax) {  // a row all -inf is 0, not NaN
    masked = let(mx + " == disc_neg_inf() ? 1.0f : 0.0f");
    mx = let(masked + " != 0.0f ? 0.0f : " + mx);
  }
  // A bf16 output would round the kept exps twice: they are computed again.
  const bool keep_exps = !log && output_dtype(p_, k_.outputs[out0]) == ir::DType::kFloat32;
  auto shifted = [&] { return producers(false)[0] + " - " + mx; };
  auto exp_of_shifted = [&] { return let("expf(" + shifted() + ")"); };
  const std::string sum = pass({Acc::kAdd}, [&] {
    const std::string e = exp_of_shifted();
    if (keep_exps) store(out0, "row * n + j", e);
    return std::vector{e};
  })[0];
  std::string scale = log ? let("logf(" + sum + ")") : let("1.0f / " + sum);
  if (!masked.empty()) scale = let(masked + " != 0.0f ? 0.0f : " + scale);
  pass({}, [&] {
    if (log) {
      store(out0, "row * n + j", let(shifted() + " - " + scale));
    } else {
      const std::string e = keep_exps ? "out" + std::to_string(out0) + "[row * n + j]" : exp_of_shifted();
      store(out0, "row * n + j", let(e + " * " + scale));
    }
    return std::vector<std::string>{};
  });
}

// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
void CudaEmitter::softmax_backward() {
  const bool log = op_of(p_.ops[row_op()].node->op) == Op::kLogSoftmaxBackward;
  const std::string sum = pass({Acc::kAdd}, [&] {
    std::vector<std::string> in = producers(true);
    return std::vector{log ? in[0] : let(in[0] + " * " + in[1])};
  })[0];
  pass({}, [&] {
    std::vector<std::string> in = producers(false);
    const std::string r = log ? let(in[0] + " - expf(" + in[1] + ") * " + sum)
                              : let(in[1] + " * (" + in[0] + " - " + sum + ")");
    store(slot_of(row_op(), 0), "row * n + j", r);
    return std::vector<std::string>{};
  });
}

// The mean, the centred sum of squares, then normalize + affine; mean and
// rstd stored per row where the graph reads them.
void CudaEmitter::layer_norm() {
  const int w = tensor_input(2), bias = tensor_input(3);
  const std::string sum = pass({Acc::kAdd}, [&] { return std::vector{producers(true)[0]}; })[0];
  const std::string mean = let(sum + " / static_cast<float>(n)");
  const std::string sq = pass({Acc::kAdd}, [&] {
    const std::string d = let(producers(false)[0] + " - " + mean);
    return std::vector{let(d + " * " + d)};
  })[0];
  const std::string var = let(sq + " / static_cast<float>(n)");
  const std::string rstd = let("1.0f / sqrtf(" + var + " + " + scalar(row_op(), 4) + ")");
  pass({}, [&] {
    std::vector<std::string> in = producers(false);
    std::string y = let("(" + in[0] + " - " + mean + ") * " + rstd);
    if (w >= 0) y = let(y + " * " + in.at(w));
    if (bias >= 0) y = let(y + " + " + in.at(bias));
    store(slot_of(row_op(), 0), "row * n + j", y);
    return std::vector<std::string>{};
  });
  for (uint32_t k : {1u, 2u}) {
    const size_t slot = slot_of(row_op(), k);
    if (slot < k_.outputs.size()) store_row(slot, k == 1 ? mean : rstd);
  }
}

// native_layer_norm_backward(dy, x, [n], mean, rstd, w?, b?, mask) with the
// CPU kernel's formulas (cpu/row_plans.cpp): ds = sum(dy*w*x), db = sum(dy*w)
// over the row, then dx = rstd*dy*w + b'*x + c' with
// b' = (db*mean - ds) * rstd^3 / n and c' = -b'*mean - db*rstd / n; per
// column dw += dy*(x - mean)*rstd and dbias += dy, into the block's row.
void CudaEmitter::layer_norm_backward() {
  const int x = tensor_input(1), mean = tensor_input(3), rstd = tensor_input(4), w = tensor_input(5);
  const size_t dx = slot_of(row_op(), 0), dw = slot_of(row_op(), 1), db = slot_of(row_op(), 2);
  const size_t none = k_.outputs.size();
  auto dyw = [&](const std::vector<std::string>& in) { return w >= 0 ? let(in[0] + " * " + in.at(w)) : in[0]; };
  const std::vector<std::string> sums = pass({Acc::kAdd, Acc::kAdd}, [&] {
    std::vector<std::string> in = producers(true);
    const std::string g = dyw(in);
    return std::vector{let(g + " * " + in.at(x)), g};
  });
  pass({}, [&] {
    std::vector<std::string> in = producers(false);
    const std::string m = in.at(mean), r = in.at(rstd);
    if (dx != none) {
      const std::string inv_n = let("1.0f / static_cast<float>(n)");
      const std::string b = let("(" + sums[1] + " * " + m + " - " + sums[0] + ") * (" + r + " * " + r +
                                " * " + r + ") * " + inv_n);
      const std::string c = let("-(" + b + " * " + m + ") - " + sums[1] + " * " + r + " * " + inv_n);
      store(dx, "row * n + j", let(r + " * " + dyw(in) + " + " + b + " * " + in.at(x) + " + " + c));
    }
    auto accumulate = [&](size_t slot, const std::string& v) {
      const std::string at = "out" + std::to_string(slot) + "[blockIdx.x * n + j]";
      out_ << indent_ << at << " = " << at << " + " << v << ";\n";
    };
    if (dw != none) accumulate(dw, let(in[0] + " * (" + in.at(x) + " - " + m + ") * " + r));
    if (db != none) accumulate(db, in[0]);
    return std::vector<std::string>{};
  });
}

// A sum / mean / amax over the leading dims (a bias gradient): thread j of
// the grid owns column j of its chunk of rows and writes the chunk's
// partial at [chunk, j]. The chunks are gridDim.y contiguous row ranges, or
// one per index of dim 0 for a reduction over the middle dims (per_outer);
// the launcher combines them as it combines the CPU kernel's chunks (a
// mean's division included).
std::string CudaEmitter::column_body() {
  row_ = true;  // loads: the row's offset plus j along the last dim
  const bool max = op_of(p_.ops[row_op()].node->op) == Op::kAmax;
  const uint32_t R = k_.rank;
  out_ << "  const long long n = sizes[" << R - 1 << "];\n"
       << "  const long long chunks = "
       << (k_.per_outer ? "sizes[0]" : "static_cast<long long>(gridDim.y)") << ";\n"
       << "  for (long long c = blockIdx.y; c < chunks; c += gridDim.y) {\n"
       << "    const long long begin = rows * c / chunks, end = rows * (c + 1) / chunks;\n"
       << "    for (long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;"
       << " j += static_cast<long long>(gridDim.x) * blockDim.x) {\n"
       << "      float acc = " << (max ? "disc_neg_inf()" : "0.0f") << ";\n"
       << "      for (long long row = begin; row < end; ++row) {\n";
  offsets("row", R - 1, "        ");
  indent_ = "        ";
  const std::string v = producers(true)[0];
  out_ << indent_ << "acc = " << (max ? "disc_max_nan(acc, " + v + ")" : "acc + " + v) << ";\n";
  out_ << "      }\n";
  indent_ = "      ";
  store(slot_of(row_op(), 0), "c * n + j", "acc");
  out_ << "    }\n  }\n";
  return out_.str();
}

}  // namespace disc::lowering
