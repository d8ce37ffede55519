// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011): a counter-based generator. Any block of four 32-bit random
// words is a function of (key, counter) alone, so threads draw disjoint
// parts of one stream with no shared state, and a node's random numbers
// depend only on its seed: the same on every executor and thread count.
#pragma once
#include <array>
#include <cstdint>

#include "runtime/cpu/vector_level.h"

namespace disc::runtime {

using PhiloxBlock = std::array<uint32_t, 4>;

PhiloxBlock philox4x32(PhiloxBlock counter, std::array<uint32_t, 2> key);

// The key of a random node's stream: the disc generator's (seed, offset)
// when the node was traced, mixed into one number.
uint64_t stream_seed(uint64_t seed, uint64_t offset);

// Dropout of elements [begin, end) of a float32 stream keyed by `seed`:
// element i keeps with probability `keep` by word (i / 16) % 4 of block
// 16 * (i / 64) + i % 16 (its top 24 bits as a uniform in [0, 1)), so 16
// neighbouring elements take one word of 16 blocks drawn side by side (one
// AVX-512 register each; two at AVX2, four at SSE2: the same words at every
// level); mask[i] says so, and y[i] = x[i] * mask[i] * scale
// (ATen's product: a dropped inf or NaN is NaN, a dropped negative -0).
// x, y and mask hold elements begin .. end - 1 (x[0] is element `begin`).
// `x` may be null: then only the mask.
// Vectorized at vector_level() (vector_level.h).
void dropout_f32(uint64_t seed, float keep, float scale, int64_t begin, int64_t end, const float* x,
                 float* y, bool* mask);

// The same at a given level, which the CPU must run (tests compare levels).
void dropout_f32_at(VectorLevel level, uint64_t seed, float keep, float scale, int64_t begin,
                    int64_t end, const float* x, float* y, bool* mask);

enum class ReducedFloat : uint8_t { kBFloat16, kHalf };

// The same for bfloat16 or float16 elements (x and y hold their bits): the
// same mask, and y = x * mask * scale with the scale rounded to the element
// type, computed in float and rounded to nearest even once, as ATen's CPU
// kernel computes `input.mul(mask).mul_(scale)`.
void dropout_reduced(ReducedFloat type, uint64_t seed, float keep, float scale, int64_t begin,
                     int64_t end, const uint16_t* x, uint16_t* y, bool* mask);

void dropout_reduced_at(VectorLevel level, ReducedFloat type, uint64_t seed, float keep, float scale,
                        int64_t begin, int64_t end, const uint16_t* x, uint16_t* y, bool* mask);

}  // namespace disc::runtime
