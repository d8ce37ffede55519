// A build without oneDNN (DISC_ONEDNN=OFF, or not found). The library calls
// check has_onednn() and run ATen's kernels instead; these throw for any
// caller that did not.
#include <stdexcept>
#include <string>

#include "runtime/cpu/onednn_conv.h"
#include "runtime/cpu/onednn_gemm.h"

namespace disc::runtime {

namespace {

[[noreturn]] void absent(const char* what) {
  throw std::runtime_error(std::string("disc: ") + what + " needs oneDNN, which this build does not have");
}

}  // namespace

struct PackedB {};

bool gemm_operand_supported(const GemmOperand&, int64_t, int64_t, int64_t) { return false; }
bool onednn_bf16_native() { return false; }
bool onednn_bf16_widened(int) { return true; }
PrimitiveUse onednn_gemm(const Gemm&) { absent("a oneDNN GEMM"); }
std::shared_ptr<const PackedB> pack_b(const Gemm&) { absent("packing a GEMM's weights"); }
bool packed_b_fits(const PackedB&, const Gemm&) { return false; }
PrimitiveUse onednn_gemm_packed(const Gemm&, const PackedB&) { absent("a pre-packed GEMM"); }
void set_sized_gemms(bool) {}
void clear_gemm_primitives() {}

ConvRun onednn_conv_forward(const ConvForward&) { absent("a oneDNN convolution"); }
ConvRun onednn_conv_backward_data(const ConvBackwardData&) { absent("a oneDNN convolution"); }
ConvRun onednn_conv_backward_weights(const ConvBackwardWeights&) { absent("a oneDNN convolution"); }
void clear_conv_primitives() {}

}  // namespace disc::runtime
