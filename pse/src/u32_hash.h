// The hash of a sequence of 32-bit ids (interned configurations, closures, chains, signatures): one
// definition for every table keyed by such a sequence in pse.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pse::detail {

// Two ids per multiply (closures and signatures run to hundreds of ids): a multiply carries its input's
// upper half only upwards, so the end folds the upper half down before a last multiply, and every id
// reaches the low bits that tables index by.
inline std::uint64_t hash_u32s(std::span<const std::uint32_t> v) {
  constexpr std::uint64_t kMul = 0xff51afd7ed558ccdULL;
  std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ v.size();
  const std::size_t n = v.size();
  std::size_t i = 0;
  for (; i + 2 <= n; i += 2) h = (h ^ (v[i] | std::uint64_t{v[i + 1]} << 32)) * kMul;
  if (i < n) h = (h ^ v[i]) * kMul;
  h = (h ^ (h >> 32)) * kMul;
  return h ^ (h >> 29);
}

struct U32VectorHash {
  std::size_t operator()(const std::vector<std::uint32_t>& v) const { return static_cast<std::size_t>(hash_u32s(v)); }
};

}  // namespace pse::detail
