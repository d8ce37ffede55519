// Dtype casts of parameters, kept across graphs in inference: autocast
// casts every weight to bf16 (f16) in every forward, and a model evaluated
// in no-grad mode casts the same values each time. A cast is kept when its
// graph does not change the parameter and grad mode is off, keyed, as
// pre-packed weights are (prepack.h), by the parameter buffer's TensorImpl
// (a weak reference) and version, never by data address alone. An entry
// whose parameter died or whose version moved on (an optimizer step,
// load_state_dict, w.add_(1)) is never used again, and is dropped when
// the next cast is kept. The cache
// holds a reference to the kept tensor, so the executor never writes it in
// place (sole_buffer).
//
// Memory: one cast copy of each weight stays while the model lives, as
// torch.compile's frozen weights do; DISC_CAST_CACHE=0 turns it off.
//
// Metrics: cast_cache.hits, cast_cache.misses.
#pragma once
#include <ATen/Tensor.h>

#include <cstddef>
#include <optional>

namespace disc {

bool cast_cache_enabled();

// The kept cast of `param` to `dtype`, if its buffer is the one it was made
// from at the same version.
std::optional<at::Tensor> kept_cast(const at::Tensor& param, at::ScalarType dtype);

// Keeps `cast`, the value of `param` cast to cast's dtype.
void keep_cast(const at::Tensor& param, const at::Tensor& cast);

// Drops every kept cast (tests; turning the option off).
void clear_kept_casts();
size_t kept_casts_size();

}  // namespace disc
