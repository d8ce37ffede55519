// The one oneDNN CPU engine of the process, made after oneDNN's ISA is
// capped to disc's (cpu_isa.h): oneDNN fixes its maximum ISA at its first
// primitive, so every use of oneDNN goes through here.
//
// Scratchpads: every primitive disc makes takes its scratchpad from the
// caller (scratchpad_mode::user, through onednn_attr()). In oneDNN's own
// mode many implementations use a global scratchpad of the *creating*
// thread, sized when the primitive is made; disc caches primitives across
// threads (the graph worker, the syncing thread, torch.compile's callers),
// and a primitive run on a thread whose global scratchpad is smaller or
// absent writes past its end (AVX2's convolution backward-weights reduces
// per-thread partial weights there).
#pragma once
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

namespace disc::runtime {

dnnl::engine& onednn_cpu_engine();

// Attributes every disc primitive starts from: the scratchpad is the caller's.
dnnl::primitive_attr onednn_attr();

// Binds a scratchpad of layout `md` (the primitive descriptor's
// scratchpad_desc()) into `args` when it needs one. The memory is this
// thread's scratch buffer, grown as needed: bind right before executing,
// after anything else on this thread that may bind one (a reorder).
void bind_scratchpad(const dnnl::memory::desc& md, std::unordered_map<int, dnnl::memory>& args);

}  // namespace disc::runtime
