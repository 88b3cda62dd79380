// The sampler's random stream: xoshiro256** (Blackman and Vigna), seeded through splitmix64 so that any
// 64-bit seed, including 0, gives a well-mixed non-zero state.
#pragma once

#include <cstdint>

namespace pie::sampling_detail {

inline std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline void seed_xoshiro(std::uint64_t (&s)[4], std::uint64_t seed) {
  for (std::uint64_t& w : s) w = splitmix64(seed);
}

inline std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

inline std::uint64_t next_xoshiro(std::uint64_t (&s)[4]) {
  const std::uint64_t result = rotl(s[1] * 5, 7) * 9;
  const std::uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

// Uniform in [0, 1) with 53 random bits.
inline double next_uniform(std::uint64_t (&s)[4]) {
  return static_cast<double>(next_xoshiro(s) >> 11) * 0x1.0p-53;
}

}  // namespace pie::sampling_detail
