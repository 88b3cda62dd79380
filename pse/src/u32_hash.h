// The hash of a sequence of 32-bit ids (interned configurations, closures, chains, signatures): one
// definition for every table keyed by such a sequence in pse.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pse::detail {

inline std::uint64_t hash_u32s(std::span<const std::uint32_t> v) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ v.size();
  for (std::uint32_t x : v) h = (h ^ x) * 0xff51afd7ed558ccdULL;
  return h ^ (h >> 31);
}

struct U32VectorHash {
  std::size_t operator()(const std::vector<std::uint32_t>& v) const { return static_cast<std::size_t>(hash_u32s(v)); }
};

}  // namespace pse::detail
