// The disc random generator: a (seed, offset) pair. Each random op takes the
// current pair as runtime data and advances the offset, so dropout masks are
// reproducible under torch.manual_seed and a new seed never recompiles.
#pragma once
#include <ATen/core/Generator.h>

#include <cstdint>
#include <utility>

namespace disc {

// (seed, offset) for the next random op; advances the default generator.
std::pair<uint64_t, uint64_t> next_random_draw();

at::Generator& default_disc_generator();

}  // namespace disc
