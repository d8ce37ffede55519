#include "runtime/cpu/onednn_engine.h"

#include <cstdlib>
#include <new>
#include <unordered_map>

#include "runtime/cpu/cpu_isa.h"

namespace disc::runtime {

namespace {

dnnl::cpu_isa onednn_isa(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric:
    case CpuIsa::kSse42: return dnnl::cpu_isa::sse41;
    case CpuIsa::kAvx2: return dnnl::cpu_isa::avx2;
    case CpuIsa::kAvx512: return dnnl::cpu_isa::avx512_core;
    case CpuIsa::kAvx512Bf16: return dnnl::cpu_isa::avx512_core_bf16;
    case CpuIsa::kAmx:
    case CpuIsa::kNeon:
    case CpuIsa::kSve:
    case CpuIsa::kSveBf16: break;
  }
  return dnnl::cpu_isa::all;
}

void cap_isa() {
  // Uncapped, oneDNN keeps its own default (ONEDNN_MAX_CPU_ISA, else all).
  // oneDNN's API caps x86 ISAs only: on AArch64 its own JIT kernels (SVE
  // ones where the CPU has SVE) stay whatever disc's cap.
#if defined(__x86_64__)
  if (cpu_isa_capped()) dnnl::set_max_cpu_isa(onednn_isa(cpu_isa()));
#endif
}

}  // namespace

dnnl::engine& onednn_cpu_engine() {
  static dnnl::engine e = [] {
    cap_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

dnnl::primitive_attr onednn_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void bind_scratchpad(const dnnl::memory::desc& md, std::unordered_map<int, dnnl::memory>& args) {
  const size_t size = md.get_size();
  if (size == 0) return;
  // One buffer per thread: primitives on a thread run one after another.
  struct Buffer {
    void* data = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buf;
  if (buf.size < size) {
    std::free(buf.data);
    buf.data = nullptr, buf.size = 0;
    if (posix_memalign(&buf.data, 64, size) != 0) throw std::bad_alloc();
    buf.size = size;
  }
  args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(md, onednn_cpu_engine(), buf.data);
}

}  // namespace disc::runtime
