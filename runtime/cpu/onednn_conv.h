// float32 or bfloat16 2-D convolution through oneDNN, torch-free: forward
// (optional bias and ReLU post-op), backward-data, and backward-weights (+
// bias gradient). In bf16 every buffer is bf16; oneDNN accumulates in f32.
//
// Activations (src, dst and their gradients) are dense NCHW or NHWC buffers,
// the caller says which; weights are torch's [oc, ic / groups, kh, kw]
// (oneDNN's oihw / goihw). Each primitive is made with format_tag::any for
// the weights, so oneDNN picks its blocked weight layout and the weights are
// reordered into it per call (small next to activations); activations either
// stay in the caller's layout (kUser: no reorder when the primitive runs it
// natively, as oneDNN's NHWC kernels do) or are reordered to the layout
// oneDNN prefers (kBest: nChw16c for most shapes) and back. Every reorder is
// counted in the result so the caller can report it.
//
// Conv sizes are concrete, so primitives are cached per full descriptor
// (every size, stride, padding, dilation, group count, layout, bias, post-op).
#pragma once
#include <cstdint>

namespace disc::runtime {

enum class ActLayout : uint8_t { kNchw, kNhwc };

// How the primitive lays out activations internally.
enum class ConvPlacement : uint8_t {
  kUser,  // the caller's layout: no activation reorders
  kBest,  // oneDNN's choice (format_tag::any): reorders in and out if it differs
};

// Sizes in torch's terms: dilation 1 is a dense kernel; padding is symmetric.
struct ConvShape {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0, out_h = 0, out_w = 0;
  int64_t groups = 1;
  int64_t stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
};

enum class ConvType : uint8_t { kFloat32, kBFloat16 };

// How the buffers are laid out, their element type, and the caller's
// thread count (torch's): a primitive fixes its parallelism when it is
// made, so the count is part of its key, as for GEMMs.
struct ConvLayout {
  ActLayout act = ActLayout::kNchw;
  ConvPlacement placement = ConvPlacement::kUser;
  ConvType type = ConvType::kFloat32;
  int threads = 1;
};

struct ConvForward {
  ConvShape shape;
  ConvLayout layout;
  const void* src = nullptr;      // [n, ic, ih, iw]
  const void* weights = nullptr;  // [oc, ic / groups, kh, kw], contiguous
  const void* bias = nullptr;     // [oc] or null
  void* dst = nullptr;            // [n, oc, oh, ow], written
  bool relu = false;               // an eltwise post-op
};

struct ConvBackwardData {
  ConvShape shape;
  ConvLayout layout;
  const void* diff_dst = nullptr;
  const void* weights = nullptr;
  void* diff_src = nullptr;  // written
};

struct ConvBackwardWeights {
  ConvShape shape;
  ConvLayout layout;
  const void* src = nullptr;
  const void* diff_dst = nullptr;
  void* diff_weights = nullptr;  // [oc, ic / groups, kh, kw], written
  void* diff_bias = nullptr;     // [oc], written, or null
};

// What one call did, for the caller's metrics.
struct ConvRun {
  bool ran = false;      // false: nothing to compute (an empty batch or channel count)
  bool created = false;  // a primitive was made (and cached) rather than reused
  int weight_reorders = 0;  // weights (or their gradient) to or from oneDNN's layout
  int act_reorders = 0;     // activations to or from the primitive's layout (kBest: its choice)
};

// Each runs one call; throws std::invalid_argument on inconsistent sizes.
// Thread-safe. An empty output (a zero size) runs nothing; an empty
// reduction (batch 0 in backward-weights, no input channels) writes zeros.
ConvRun onednn_conv_forward(const ConvForward& c);
ConvRun onednn_conv_backward_data(const ConvBackwardData& c);
ConvRun onednn_conv_backward_weights(const ConvBackwardWeights& c);

// Drops every cached primitive (tests that pin creation counts).
void clear_conv_primitives();

}  // namespace disc::runtime
