// Seeded test data for the runtime's kernel tests.
#pragma once
#include <cstddef>
#include <random>
#include <vector>

namespace disc::testing {

// n standard-normal floats, the same ones for a seed on every run.
inline std::vector<float> normal_floats(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

}  // namespace disc::testing
