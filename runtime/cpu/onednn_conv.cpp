// oneDNN convolution primitives, cached per full descriptor, with the
// reorders between the caller's buffers and the layouts each primitive asked
// for. Threading is OpenMP, shared with torch (see onednn_gemm.cpp).
//
// Backward primitives need the forward primitive descriptor they belong to
// as a hint (oneDNN picks matching implementations); the hint is made with
// the same descriptors and is not kept. Every layout and the scratchpad a
// primitive needs come from its own descriptor's queries, never from what
// one ISA's implementation happens to pick.
#include "runtime/cpu/onednn_conv.h"
#include "runtime/bf16.h"
#include "runtime/cpu/onednn_engine.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace disc::runtime {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

enum class Kind : uint8_t { kForward, kBackwardData, kBackwardWeights };

// Everything the primitive depends on: the key of the cache.
struct Key {
  Kind kind;
  ConvShape s;
  ConvLayout layout;
  bool bias, relu;
  std::vector<int64_t> flat() const {
    return {static_cast<int64_t>(kind), s.batch, s.in_channels, s.in_h, s.in_w, s.out_channels,
            s.kernel_h, s.kernel_w, s.out_h, s.out_w, s.groups, s.stride[0], s.stride[1],
            s.padding[0], s.padding[1], s.dilation[0], s.dilation[1],
            static_cast<int64_t>(layout.act), static_cast<int64_t>(layout.placement),
            static_cast<int64_t>(layout.type), layout.threads, bias, relu};
  }
};

// One cached primitive, the layouts it wants its buffers in and the
// scratchpad it needs per run.
struct Conv {
  dnnl::primitive prim;
  memory::desc in0, in1, out0;  // forward: src, weights, dst; backward-data:
                                // diff_dst, weights, diff_src; backward-weights:
                                // src, diff_dst, diff_weights
  memory::desc scratchpad;
};

Tag act_tag(ActLayout l) { return l == ActLayout::kNhwc ? Tag::nhwc : Tag::nchw; }

Dt data_type(ConvType t) { return t == ConvType::kBFloat16 ? Dt::bf16 : Dt::f32; }
size_t element_size(ConvType t) { return t == ConvType::kBFloat16 ? 2 : 4; }

memory::desc act_md(const ConvShape& s, bool input, const ConvLayout& l) {
  memory::dims dims = input ? memory::dims{s.batch, s.in_channels, s.in_h, s.in_w}
                            : memory::dims{s.batch, s.out_channels, s.out_h, s.out_w};
  return memory::desc(dims, data_type(l.type), act_tag(l.act));
}

// torch's [oc, ic / g, kh, kw] is oneDNN's oihw, or goihw split by group.
memory::desc weights_md(const ConvShape& s, ConvType t) {
  if (s.groups == 1)
    return memory::desc({s.out_channels, s.in_channels, s.kernel_h, s.kernel_w}, data_type(t),
                        Tag::oihw);
  return memory::desc({s.groups, s.out_channels / s.groups, s.in_channels / s.groups, s.kernel_h,
                       s.kernel_w},
                      data_type(t), Tag::goihw);
}

memory::desc bias_md(const ConvShape& s, ConvType t) {
  return memory::desc({s.out_channels}, data_type(t), Tag::x);
}

memory::desc any_like(const memory::desc& md) {
  return memory::desc(md.dims(), md.data_type(), Tag::any);
}

struct Geometry {
  memory::dims strides, dilates, pad_l, pad_r;
};
// oneDNN counts dilation from 0 (dense) and wants both paddings; with
// torch's floor division, the right padding equal to the left one yields the
// same output size.
Geometry geometry(const ConvShape& s) {
  return {{s.stride[0], s.stride[1]},
          {s.dilation[0] - 1, s.dilation[1] - 1},
          {s.padding[0], s.padding[1]},
          {s.padding[0], s.padding[1]}};
}

dnnl::convolution_forward::primitive_desc forward_pd(const Key& k, const memory::desc& src,
                                                     const memory::desc& w,
                                                     const memory::desc& dst) {
  const Geometry g = geometry(k.s);
  dnnl::primitive_attr attr = onednn_attr();
  if (k.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(ops);
  }
  const memory::desc bias = k.bias ? bias_md(k.s, k.layout.type) : memory::desc();
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                    dnnl::algorithm::convolution_direct, src, w, bias, dst,
                                    g.strides, g.dilates, g.pad_l, g.pad_r);
  return dnnl::convolution_forward::primitive_desc(d, attr, onednn_cpu_engine());
}

Conv make_conv(const Key& k) {
  const bool best = k.layout.placement == ConvPlacement::kBest;
  auto act = [&](bool input) {
    memory::desc md = act_md(k.s, input, k.layout);
    return best ? any_like(md) : md;
  };
  const memory::desc src = act(true), dst = act(false),
                     w = any_like(weights_md(k.s, k.layout.type));
  const Geometry g = geometry(k.s);
  const auto alg = dnnl::algorithm::convolution_direct;
  if (k.kind == Kind::kForward) {
    auto pd = forward_pd(k, src, w, dst);
    return {dnnl::convolution_forward(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(),
            pd.scratchpad_desc()};
  }
  if (k.kind == Kind::kBackwardData) {
    auto hint = forward_pd(k, src, w, dst);
    dnnl::convolution_backward_data::desc d(alg, src, w, dst, g.strides, g.dilates, g.pad_l, g.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(d, onednn_attr(), onednn_cpu_engine(), hint);
    return {dnnl::convolution_backward_data(pd), pd.diff_dst_desc(), pd.weights_desc(),
            pd.diff_src_desc(), pd.scratchpad_desc()};
  }
  auto hint = forward_pd(k, src, w, dst);
  const memory::desc bias = k.bias ? bias_md(k.s, k.layout.type) : memory::desc();
  dnnl::convolution_backward_weights::desc d(alg, src, w, bias, dst, g.strides, g.dilates, g.pad_l,
                                             g.pad_r);
  dnnl::convolution_backward_weights::primitive_desc pd(d, onednn_attr(), onednn_cpu_engine(), hint);
  return {dnnl::convolution_backward_weights(pd), pd.src_desc(), pd.diff_dst_desc(),
          pd.diff_weights_desc(), pd.scratchpad_desc()};
}

std::mutex& cache_mutex() {
  static std::mutex mu;
  return mu;
}

std::map<std::vector<int64_t>, std::shared_ptr<const Conv>>& conv_cache() {
  static std::map<std::vector<int64_t>, std::shared_ptr<const Conv>> cache;
  return cache;
}

// The cached primitive for `key`; `created` says whether this call made it.
// oneDNN allows one primitive to execute on several threads at once.
// Shapes are concrete, so a run over many batch sizes or image sizes would
// grow the cache without end: past this many primitives it starts over
// (primitives in use stay alive through their shared_ptr).
constexpr size_t kMaxPrimitives = 512;

std::shared_ptr<const Conv> conv_primitive(const Key& key, bool* created) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  if (conv_cache().size() >= kMaxPrimitives && !conv_cache().count(key.flat())) conv_cache().clear();
  auto& slot = conv_cache()[key.flat()];
  *created = !slot;
  if (!slot) slot = std::make_shared<const Conv>(make_conv(key));
  return slot;
}

// Reorders are cached too, by the bytes of both descriptors.
struct Reorder {
  dnnl::reorder prim;
  memory::desc scratchpad;
  void execute(dnnl::stream& s, const memory& from, const memory& to) const {
    std::unordered_map<int, memory> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    bind_scratchpad(scratchpad, args);
    prim.execute(s, args);
  }
};

std::shared_ptr<const Reorder> reorder_primitive(const memory::desc& from, const memory::desc& to) {
  static std::map<std::string, std::shared_ptr<const Reorder>> cache;
  std::string key(reinterpret_cast<const char*>(&from.data), sizeof(from.data));
  key.append(reinterpret_cast<const char*>(&to.data), sizeof(to.data));
  std::lock_guard<std::mutex> lock(cache_mutex());
  if (cache.size() >= kMaxPrimitives && !cache.count(key)) cache.clear();
  auto& slot = cache[key];
  if (!slot) {
    dnnl::reorder::primitive_desc pd(onednn_cpu_engine(), from, onednn_cpu_engine(), to, onednn_attr());
    slot = std::make_shared<const Reorder>(Reorder{dnnl::reorder(pd), pd.scratchpad_desc()});
  }
  return slot;
}

// A caller's buffer bound to one argument of a primitive. When the primitive
// wants another layout, the argument gets a scratch buffer in that layout,
// filled from (input) or copied back to (output) the caller's buffer.
class Arg {
 public:
  Arg(const memory::desc& user, const memory::desc& wanted, const void* p, bool output,
      bool weights = false)
      : user_(user, onednn_cpu_engine(), const_cast<void*>(p)), output_(output), weights_(weights) {
    if (wanted == user) {
      bound_ = user_;
      return;
    }
    bound_ = memory(wanted, onednn_cpu_engine());
    reordered_ = true;
  }
  const memory& bound() const { return bound_; }
  bool reordered() const { return reordered_; }
  bool weights() const { return weights_; }
  void before(dnnl::stream& s) {
    if (reordered_ && !output_) reorder_primitive(user_.get_desc(), bound_.get_desc())->execute(s, user_, bound_);
  }
  void after(dnnl::stream& s) {
    if (reordered_ && output_) reorder_primitive(bound_.get_desc(), user_.get_desc())->execute(s, bound_, user_);
  }

 private:
  memory user_, bound_;
  bool output_, weights_;
  bool reordered_ = false;
};

ConvRun execute(const Conv& conv, bool created, std::unordered_map<int, memory> extra,
                std::vector<std::pair<int, Arg>> args) {
  ConvRun r{true, created, 0, 0};
  dnnl::stream stream(onednn_cpu_engine());
  std::unordered_map<int, memory> bound = std::move(extra);
  for (auto& [id, arg] : args) {
    arg.before(stream);
    (arg.weights() ? r.weight_reorders : r.act_reorders) += arg.reordered();
    bound.emplace(id, arg.bound());
  }
  bind_scratchpad(conv.scratchpad, bound);  // after the reorders, which may bind theirs
  conv.prim.execute(stream, bound);
  for (auto& [id, arg] : args) arg.after(stream);
  stream.wait();
  return r;
}

void check(const ConvShape& s) {
  auto out = [](int64_t in, int64_t k, int64_t st, int64_t p, int64_t d) {
    return (in + 2 * p - d * (k - 1) - 1) / st + 1;
  };
  const bool ok = s.groups >= 1 && s.in_channels % s.groups == 0 && s.out_channels % s.groups == 0 &&
                  s.stride[0] >= 1 && s.stride[1] >= 1 && s.dilation[0] >= 1 && s.dilation[1] >= 1 &&
                  s.padding[0] >= 0 && s.padding[1] >= 0 &&
                  s.out_h == out(s.in_h, s.kernel_h, s.stride[0], s.padding[0], s.dilation[0]) &&
                  s.out_w == out(s.in_w, s.kernel_w, s.stride[1], s.padding[1], s.dilation[1]);
  if (!ok) throw std::invalid_argument("onednn_conv: inconsistent convolution sizes");
}

bool empty_output(const ConvShape& s, bool data_grad) {
  return data_grad ? s.batch * s.in_channels * s.in_h * s.in_w == 0
                   : s.batch * s.out_channels * s.out_h * s.out_w == 0;
}

int64_t weight_count(const ConvShape& s) {
  return s.out_channels * (s.in_channels / s.groups) * s.kernel_h * s.kernel_w;
}

}  // namespace

ConvRun onednn_conv_forward(const ConvForward& c) {
  const ConvShape& s = c.shape;
  check(s);
  if (empty_output(s, false)) return {};
  if (s.in_channels == 0) {  // no products: the output is the bias (rectified)
    const bool bf16 = c.layout.type == ConvType::kBFloat16;
    const int64_t plane = s.out_h * s.out_w;
    for (int64_t n = 0; n < s.batch; ++n)
      for (int64_t o = 0; o < s.out_channels; ++o)
        for (int64_t i = 0; i < plane; ++i) {
          float v = 0.f;
          if (c.bias) v = bf16 ? bf16_to_float(static_cast<const uint16_t*>(c.bias)[o])
                               : static_cast<const float*>(c.bias)[o];
          if (c.relu) v = std::max(v, 0.f);
          const int64_t at = c.layout.act == ActLayout::kNhwc ? (n * plane + i) * s.out_channels + o
                                                               : (n * s.out_channels + o) * plane + i;
          if (bf16) static_cast<uint16_t*>(c.dst)[at] = float_to_bf16(v);
          else static_cast<float*>(c.dst)[at] = v;
        }
    return {};
  }
  const Key key{Kind::kForward, s, c.layout, c.bias != nullptr, c.relu};
  bool created = false;
  std::shared_ptr<const Conv> conv = conv_primitive(key, &created);
  std::unordered_map<int, memory> extra;
  if (c.bias)
    extra.emplace(DNNL_ARG_BIAS,
                  memory(bias_md(s, c.layout.type), onednn_cpu_engine(), const_cast<void*>(c.bias)));
  std::vector<std::pair<int, Arg>> args;
  args.emplace_back(DNNL_ARG_SRC, Arg(act_md(s, true, c.layout), conv->in0, c.src, false));
  args.emplace_back(DNNL_ARG_WEIGHTS,
                    Arg(weights_md(s, c.layout.type), conv->in1, c.weights, false, true));
  args.emplace_back(DNNL_ARG_DST, Arg(act_md(s, false, c.layout), conv->out0, c.dst, true));
  return execute(*conv, created, std::move(extra), std::move(args));
}

ConvRun onednn_conv_backward_data(const ConvBackwardData& c) {
  const ConvShape& s = c.shape;
  check(s);
  if (empty_output(s, true)) return {};
  if (s.out_channels == 0 || s.out_h * s.out_w == 0) {  // nothing flows back (0 bits: +0)
    std::memset(c.diff_src, 0,
                s.batch * s.in_channels * s.in_h * s.in_w * element_size(c.layout.type));
    return {};
  }
  const Key key{Kind::kBackwardData, s, c.layout, false, false};
  bool created = false;
  std::shared_ptr<const Conv> conv = conv_primitive(key, &created);
  std::vector<std::pair<int, Arg>> args;
  args.emplace_back(DNNL_ARG_DIFF_DST, Arg(act_md(s, false, c.layout), conv->in0, c.diff_dst, false));
  args.emplace_back(DNNL_ARG_WEIGHTS,
                    Arg(weights_md(s, c.layout.type), conv->in1, c.weights, false, true));
  args.emplace_back(DNNL_ARG_DIFF_SRC, Arg(act_md(s, true, c.layout), conv->out0, c.diff_src, true));
  return execute(*conv, created, {}, std::move(args));
}

ConvRun onednn_conv_backward_weights(const ConvBackwardWeights& c) {
  const ConvShape& s = c.shape;
  check(s);
  if (weight_count(s) == 0 && !(c.diff_bias && s.out_channels > 0)) return {};
  if (s.batch * s.out_h * s.out_w == 0 || s.in_channels == 0) {  // an empty sum (0 bits: +0)
    const size_t size = element_size(c.layout.type);
    std::memset(c.diff_weights, 0, weight_count(s) * size);
    if (c.diff_bias) std::memset(c.diff_bias, 0, s.out_channels * size);
    return {};
  }
  const Key key{Kind::kBackwardWeights, s, c.layout, c.diff_bias != nullptr, false};
  bool created = false;
  std::shared_ptr<const Conv> conv = conv_primitive(key, &created);
  std::unordered_map<int, memory> extra;
  if (c.diff_bias)
    extra.emplace(DNNL_ARG_DIFF_BIAS, memory(bias_md(s, c.layout.type), onednn_cpu_engine(), c.diff_bias));
  std::vector<std::pair<int, Arg>> args;
  args.emplace_back(DNNL_ARG_SRC, Arg(act_md(s, true, c.layout), conv->in0, c.src, false));
  args.emplace_back(DNNL_ARG_DIFF_DST, Arg(act_md(s, false, c.layout), conv->in1, c.diff_dst, false));
  args.emplace_back(DNNL_ARG_DIFF_WEIGHTS,
                    Arg(weights_md(s, c.layout.type), conv->out0, c.diff_weights, true, true));
  return execute(*conv, created, std::move(extra), std::move(args));
}

void clear_conv_primitives() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  conv_cache().clear();
}

}  // namespace disc::runtime
