// oneDNN matmul primitives: generic ones with runtime sizes, cached by rank,
// operand layouts, bias and post-op; and, for small GEMMs, ones made for
// their exact sizes (see "Primitives specialized to exact sizes" below).
//
// Threading: Debian's libdnnl 2.6 is built with the OpenMP runtime
// (DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP in dnnl_config.h) against
// libgomp.so.1. The torch wheel ships its own libgomp under the same soname
// (torch/lib/libgomp.so.1) and loads it first, so the dynamic loader binds
// libdnnl to torch's copy: one OpenMP runtime and one thread pool in the
// process, and at::set_num_threads (omp_set_num_threads on the calling
// thread) also sizes oneDNN's parallel regions. The wheel's own oneDNN
// (3.x, inside libtorch_cpu) exports no dnnl_* symbols, so the two versions
// do not collide. Without torch (test_runtime) the system libgomp serves.
//
// Runtime dims: oneDNN 2.6's CPU matmul takes DNNL_RUNTIME_DIM_VAL for m, n,
// k and the batch when the layouts are fixed by format tags (ab / ba, abc /
// acb), and then runs its JIT sgemm ("gemm:jit" in DNNL_VERBOSE). Runtime
// *strides* are accepted too, but select the reference implementation
// ("ref:any", orders of magnitude slower), so layouts are part of the key
// and only dense operands are taken.
#include "runtime/cpu/onednn_gemm.h"
#include "runtime/bf16.h"
#include "runtime/cpu/onednn_engine.h"
#include "runtime/options.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

namespace disc::runtime {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr int64_t kRt = DNNL_RUNTIME_DIM_VAL;

// One stream per thread, made once: a CPU stream is a handle to run
// primitives in order on the calling thread, and making one per GEMM was a
// heap allocation and a few hundred instructions each time.
dnnl::stream& cpu_stream() {
  thread_local dnnl::stream s(onednn_cpu_engine());
  return s;
}

enum class Layout : uint8_t { kRowMajor, kColMajor, kOther };

// Dense row- or column-major; a size-1 dim's stride does not matter.
Layout layout_of(const GemmOperand& x, int64_t rows, int64_t cols, int64_t batch) {
  auto fits = [&](int64_t size, int64_t stride, int64_t want) { return size <= 1 || stride == want; };
  if (!fits(batch, x.batch_stride, rows * cols)) return Layout::kOther;
  if (fits(rows, x.row_stride, cols) && fits(cols, x.col_stride, 1)) return Layout::kRowMajor;
  if (fits(rows, x.row_stride, 1) && fits(cols, x.col_stride, rows)) return Layout::kColMajor;
  return Layout::kOther;
}

Tag tag_of(bool batched, Layout l) {
  if (batched) return l == Layout::kRowMajor ? Tag::abc : Tag::acb;
  return l == Layout::kRowMajor ? Tag::ab : Tag::ba;
}

memory::data_type data_type(GemmType t) {
  return t == GemmType::kBFloat16 ? memory::data_type::bf16 : memory::data_type::f32;
}

// What the generated code depends on; sizes are not in it.
struct Key {
  GemmType type;
  bool batched;
  Layout a, b;
  bool bias;
  Activation act;
  bool operator<(const Key& o) const {
    return std::tie(type, batched, a, b, bias, act) <
           std::tie(o.type, o.batched, o.a, o.b, o.bias, o.act);
  }
};

// Descriptors with every size `size` (kRt when making the primitive).
struct Descs {
  memory::desc a, b, bias, c;
};
Descs descs(const Key& key, int64_t batch, int64_t m, int64_t n, int64_t k) {
  auto md = [&](int64_t rows, int64_t cols, Layout l) {
    memory::dims dims = key.batched ? memory::dims{batch, rows, cols} : memory::dims{rows, cols};
    return memory::desc(dims, data_type(key.type), tag_of(key.batched, l));
  };
  Descs d{md(m, k, key.a), md(k, n, key.b), {}, md(m, n, Layout::kRowMajor)};
  if (key.bias) d.bias = memory::desc({1, n}, data_type(key.type), Tag::ab);
  return d;
}

// The activation as a post-op; the scratchpad is the caller's.
dnnl::primitive_attr attr_for(Activation act) {
  dnnl::primitive_attr attr = onednn_attr();
  if (act != Activation::kNone) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.f, act == Activation::kRelu ? dnnl::algorithm::eltwise_relu
                                                     : dnnl::algorithm::eltwise_gelu_erf,
                       0.f, 0.f);
    attr.set_post_ops(ops);
  }
  return attr;
}

float activate(Activation act, float v) {
  switch (act) {
    case Activation::kRelu: return std::max(v, 0.f);
    case Activation::kGelu: return 0.5f * v * (1.f + std::erf(v * 0.70710678118654752f));
    case Activation::kNone: break;
  }
  return v;
}

// A generic primitive and the scratchpad it needs per run.
struct Generic {
  dnnl::matmul prim;
  memory::desc scratchpad;
};

Generic make_primitive(const Key& key) {
  Descs d = descs(key, kRt, kRt, kRt, kRt);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d.a, d.b, d.bias, d.c), attr_for(key.act),
                                  onednn_cpu_engine());
  return {dnnl::matmul(pd), pd.scratchpad_desc()};
}

std::mutex& cache_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<Key, std::shared_ptr<const Generic>>& cache() {
  static std::map<Key, std::shared_ptr<const Generic>> c;
  return c;
}

// The cached primitive for `key`; `created` says whether this call made it.
// oneDNN allows one primitive to execute on several threads at once.
std::shared_ptr<const Generic> primitive(const Key& key, bool* created) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto& slot = cache()[key];
  *created = !slot;
  if (!slot) slot = std::make_shared<const Generic>(make_primitive(key));
  return slot;
}

// k == 0: the product is zero, so C is the bias (or 0), activated.
void fill_bias(const Gemm& g, int64_t batch) {
  const bool bf16 = g.type == GemmType::kBFloat16;
  for (int64_t r = 0; r < batch * g.m; ++r)
    for (int64_t j = 0; j < g.n; ++j) {
      float v = 0.f;
      if (g.bias) v = bf16 ? bf16_to_float(static_cast<const uint16_t*>(g.bias)[j])
                           : static_cast<const float*>(g.bias)[j];
      v = activate(g.act, v);
      if (bf16) static_cast<uint16_t*>(g.c)[r * g.n + j] = float_to_bf16(v);
      else static_cast<float*>(g.c)[r * g.n + j] = v;
    }
}

}  // namespace

bool gemm_operand_supported(const GemmOperand& x, int64_t rows, int64_t cols, int64_t batch) {
  return layout_of(x, rows, cols, batch) != Layout::kOther;
}

namespace {

// Primitives specialized to exact sizes: at fixed sizes oneDNN picks its
// brgemm kernels instead of the runtime-size JIT sgemm, which re-blocks on
// every call (measured, 1 thread: [64 x 128] @ [128 x 10] 3.5 -> 1.9 us;
// 2 threads: [64 x 784] @ [784 x 256] 108 -> 69 us), and the memory objects
// stay bound (rebinding a pointer is free; making the four objects and the
// argument map cost ~3 us a call). Every small GEMM (below) runs one, from
// its sizes' first call: the two kernels round differently, so choosing by history
// (say, from the second call on) would make a result depend on what ran
// before it, or on the thread. Making one costs ~0.3 ms, less when oneDNN's
// own primitive cache has the shape. Per thread, because the memory objects
// are rebound on each call.
struct SizedKey {
  Key key;
  int64_t m, n, k;
  int threads;
  bool operator<(const SizedKey& o) const {
    return std::tie(key, m, n, k, threads) < std::tie(o.key, o.m, o.n, o.k, o.threads);
  }
};

struct Sized {
  dnnl::matmul prim;
  memory a, b, bias, c, scratchpad;  // the scratchpad is its own: sizes are fixed
  std::unordered_map<int, memory> args;
};

// A workload of endlessly new shapes starts over rather than grow without
// bound.
constexpr size_t kMaxSized = 1024;
// Only small GEMMs, where the per-call setup and the runtime-size blocking
// are a large part of the time (an MNIST MLP's, at most 64 x 256 x 784 =
// 12.8M multiply-adds). Larger ones run as fast either way in isolation, and a
// MiniLM training step (m = 8 x length, k, n = 384..1536) ran ~10% slower
// with sized primitives; batched GEMMs (attention) keep the generic one too.
// bf16 GEMMs are sized at every size: oneDNN 2.6's generic bf16 primitive is
// its runtime-size JIT gemm, and the sized one its brgemm, 25% faster at
// MiniLM's [1024 x 384] @ [384 x 1536] on an AMD EPYC with native bf16 (2
// threads: 1.86 -> 1.41 ms), and 22% less GEMM time in its autocast step.
// The choice depends on the dtype and sizes alone, so it is deterministic.
constexpr int64_t kMaxSizedMacs = int64_t{1} << 24;

std::atomic<uint64_t> sized_generation{0};  // bumped by clear_gemm_primitives

struct SizedCache {
  uint64_t generation = 0;
  std::map<SizedKey, std::unique_ptr<Sized>> ready;
};

SizedCache& sized_cache() {
  thread_local SizedCache c;
  if (c.generation != sized_generation.load()) {
    c = SizedCache{};
    c.generation = sized_generation.load();
  }
  return c;
}

bool sizing() { return options::flag(options::Id::kGemmSized); }

bool runs_sized(const Gemm& g) {
  return sizing() && !g.batched &&
         (g.type == GemmType::kBFloat16 || g.m * g.n * g.k <= kMaxSizedMacs);
}

std::unique_ptr<Sized> make_sized(const SizedKey& sk) {
  const Key& key = sk.key;
  Descs d = descs(key, 1, sk.m, sk.n, sk.k);
  dnnl::engine& eng = onednn_cpu_engine();
  auto s = std::make_unique<Sized>();
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d.a, d.b, d.bias, d.c), attr_for(key.act), eng);
  s->prim = dnnl::matmul(pd);
  s->a = memory(d.a, eng, DNNL_MEMORY_NONE);
  s->b = memory(d.b, eng, DNNL_MEMORY_NONE);
  s->c = memory(d.c, eng, DNNL_MEMORY_NONE);
  s->args = {{DNNL_ARG_SRC, s->a}, {DNNL_ARG_WEIGHTS, s->b}, {DNNL_ARG_DST, s->c}};
  if (key.bias) {
    s->bias = memory(d.bias, eng, DNNL_MEMORY_NONE);
    s->args.emplace(DNNL_ARG_BIAS, s->bias);
  }
  if (pd.scratchpad_desc().get_size() > 0) {
    s->scratchpad = memory(pd.scratchpad_desc(), eng);
    s->args.emplace(DNNL_ARG_SCRATCHPAD, s->scratchpad);
  }
  return s;
}

// The specialized primitive for `sk`, made on its first call.
Sized* sized_primitive(const SizedKey& sk, bool* created) {
  SizedCache& cache = sized_cache();
  auto it = cache.ready.find(sk);
  if (it != cache.ready.end()) return it->second.get();
  if (cache.ready.size() >= kMaxSized) cache.ready.clear();
  *created = true;
  return (cache.ready[sk] = make_sized(sk)).get();
}

}  // namespace

PrimitiveUse onednn_gemm(const Gemm& g) {
  const int64_t batch = g.batched ? g.batch : 1;
  if (g.m == 0 || g.n == 0 || batch == 0) return PrimitiveUse::kNone;
  if (g.k == 0) {
    fill_bias(g, batch);
    return PrimitiveUse::kNone;
  }
  const Key key{g.type, g.batched, layout_of(g.a, g.m, g.k, batch),
                layout_of(g.b, g.k, g.n, batch), g.bias != nullptr, g.act};
  if (key.a == Layout::kOther || key.b == Layout::kOther)
    throw std::invalid_argument("onednn_gemm: an operand is neither dense row- nor column-major");
  // oneDNN 2.6 creates no matmul with a runtime batch and a bias ({1, 1, n}).
  if (g.batched && g.bias) throw std::invalid_argument("onednn_gemm: a batched GEMM takes no bias");

  dnnl::engine& eng = onednn_cpu_engine();
  dnnl::stream& stream = cpu_stream();
  bool created = false;
  if (runs_sized(g)) {
    Sized* s = sized_primitive({key, g.m, g.n, g.k, g.threads}, &created);
    s->a.set_data_handle(const_cast<void*>(g.a.data));
    s->b.set_data_handle(const_cast<void*>(g.b.data));
    s->c.set_data_handle(g.c);
    if (g.bias) s->bias.set_data_handle(const_cast<void*>(g.bias));
    s->prim.execute(stream, s->args);
    stream.wait();
    return created ? PrimitiveUse::kSizedCreated : PrimitiveUse::kSized;
  }
  std::shared_ptr<const Generic> prim = primitive(key, &created);
  Descs d = descs(key, batch, g.m, g.n, g.k);
  auto mem = [&](const memory::desc& md, const void* p) {
    return memory(md, eng, const_cast<void*>(p));
  };
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, mem(d.a, g.a.data)},
      {DNNL_ARG_WEIGHTS, mem(d.b, g.b.data)},
      {DNNL_ARG_DST, mem(d.c, g.c)},
  };
  if (g.bias) args.emplace(DNNL_ARG_BIAS, mem(d.bias, g.bias));
  bind_scratchpad(prim->scratchpad, args);
  prim->prim.execute(stream, args);
  stream.wait();
  return created ? PrimitiveUse::kCreated : PrimitiveUse::kReused;
}

namespace {

// Packed primitives have every size fixed, so they are keyed by them.
struct PackedKey {
  int64_t m, n, k;
  Layout a;
  bool bias;
  Activation act;
  int threads;
  bool operator<(const PackedKey& o) const {
    return std::tie(m, n, k, a, bias, act, threads) < std::tie(o.m, o.n, o.k, o.a, o.bias, o.act, o.threads);
  }
};

struct PackedPrimitive {
  dnnl::matmul prim;
  memory::desc weights, scratchpad;
};

std::map<PackedKey, std::shared_ptr<const PackedPrimitive>>& packed_cache() {
  static std::map<PackedKey, std::shared_ptr<const PackedPrimitive>> c;
  return c;
}

std::shared_ptr<const PackedPrimitive> packed_primitive(const Gemm& g) {
  const PackedKey key{g.m, g.n, g.k, layout_of(g.a, g.m, g.k, 1), g.bias != nullptr, g.act, g.threads};
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto& slot = packed_cache()[key];
  if (slot) return slot;
  // A's layout only matters for the source descriptor; any dense one works.
  const Tag a_tag = key.a == Layout::kColMajor ? Tag::ba : Tag::ab;
  memory::desc a({g.m, g.k}, memory::data_type::f32, a_tag);
  memory::desc b({g.k, g.n}, memory::data_type::f32, Tag::any);
  memory::desc c({g.m, g.n}, memory::data_type::f32, Tag::ab);
  memory::desc bias = g.bias ? memory::desc({1, g.n}, memory::data_type::f32, Tag::ab) : memory::desc();
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, c), attr_for(g.act), onednn_cpu_engine());
  slot = std::make_shared<const PackedPrimitive>(
      PackedPrimitive{dnnl::matmul(pd), pd.weights_desc(), pd.scratchpad_desc()});
  return slot;
}

}  // namespace

struct PackedB {
  memory::desc desc;
  memory mem;  // owns the packed buffer
};

std::shared_ptr<const PackedB> pack_b(const Gemm& g) {
  if (g.type != GemmType::kFloat32) throw std::invalid_argument("pack_b: float32 weights only");
  const Layout bl = layout_of(g.b, g.k, g.n, 1);
  if (bl == Layout::kOther || layout_of(g.a, g.m, g.k, 1) == Layout::kOther)
    throw std::invalid_argument("pack_b: an operand is neither dense row- nor column-major");
  std::shared_ptr<const PackedPrimitive> pp = packed_primitive(g);
  dnnl::engine& eng = onednn_cpu_engine();
  memory src(memory::desc({g.k, g.n}, memory::data_type::f32, tag_of(false, bl)), eng,
             const_cast<void*>(g.b.data));
  auto packed = std::make_shared<PackedB>(PackedB{pp->weights, memory(pp->weights, eng)});
  dnnl::stream& stream = cpu_stream();
  dnnl::reorder::primitive_desc rpd(eng, src.get_desc(), eng, packed->mem.get_desc(), onednn_attr());
  std::unordered_map<int, memory> args{{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, packed->mem}};
  bind_scratchpad(rpd.scratchpad_desc(), args);
  dnnl::reorder(rpd).execute(stream, args);
  stream.wait();
  return packed;
}

bool packed_b_fits(const PackedB& p, const Gemm& g) {
  return !g.batched && g.m > 0 && g.k > 0 && g.n > 0 && packed_primitive(g)->weights == p.desc;
}

PrimitiveUse onednn_gemm_packed(const Gemm& g, const PackedB& p) {
  std::shared_ptr<const PackedPrimitive> pp = packed_primitive(g);
  if (g.batched || !(pp->weights == p.desc) || g.type != GemmType::kFloat32)
    throw std::invalid_argument("onednn_gemm_packed: weights packed for another shape or type");
  dnnl::engine& eng = onednn_cpu_engine();
  const Layout al = layout_of(g.a, g.m, g.k, 1);
  auto md = [&](int64_t r, int64_t c, Tag t) { return memory::desc({r, c}, memory::data_type::f32, t); };
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(md(g.m, g.k, tag_of(false, al)), eng, const_cast<void*>(g.a.data))},
      {DNNL_ARG_WEIGHTS, p.mem},
      {DNNL_ARG_DST, memory(md(g.m, g.n, Tag::ab), eng, g.c)},
  };
  if (g.bias) args.emplace(DNNL_ARG_BIAS, memory(md(1, g.n, Tag::ab), eng, const_cast<void*>(g.bias)));
  dnnl::stream& stream = cpu_stream();
  bind_scratchpad(pp->scratchpad, args);
  pp->prim.execute(stream, args);
  stream.wait();
  return PrimitiveUse::kReused;
}

bool onednn_bf16_native() {
#if defined(__x86_64__)
  // An ISA value is the bit set of what it includes (AMX includes BF16).
  // After the engine: it caps oneDNN's ISA to disc's (DISC_CPU_ISA).
  static const bool native = [] {
    onednn_cpu_engine();
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & bf16) == bf16;
  }();
  return native;
#else
  // oneDNN's AArch64 bf16 GEMMs and convolutions come from the Arm Compute
  // Library, which Debian's oneDNN is built without: bf16 is widened to f32.
  return false;
#endif
}

void set_sized_gemms(bool on) { options::set(options::Id::kGemmSized, on ? "1" : "0"); }

void clear_gemm_primitives() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  cache().clear();
  packed_cache().clear();
  ++sized_generation;  // each thread drops its specialized primitives on its next GEMM
}

}  // namespace disc::runtime
