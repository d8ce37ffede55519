// Hash mixing used by the structural graph hash.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace disc::ir {

inline uint64_t hash_mix(uint64_t seed, uint64_t v) {
  // splitmix64 finalizer over the combined value: cheap and well spread.
  uint64_t x = seed ^ (v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27; x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t hash_string(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : s) { h ^= c; h *= 0x100000001b3ULL; }
  return h;
}

// A hash as it is printed everywhere: 16 lowercase hex digits.
inline std::string hash_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace disc::ir
