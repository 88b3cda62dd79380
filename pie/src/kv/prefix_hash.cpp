#include "kv/prefix_hash.h"

namespace pie::kv_detail {

namespace {

constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ULL;  // xxHash64 primes
constexpr std::uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;

inline std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

PageHashFn g_hash = &default_page_hash;

}  // namespace

std::uint64_t default_page_hash(std::uint64_t parent, std::span<const std::int32_t> tokens) {
  std::uint64_t h = parent ^ kP2;
  for (std::int32_t t : tokens) {
    h ^= rotl((static_cast<std::uint64_t>(static_cast<std::uint32_t>(t)) + 1) * kP2, 31) * kP1;
    h = rotl(h, 27) * kP1 + 0x85EBCA77C2B2AE63ULL;
  }
  // murmur3 fmix64: every input bit reaches every output bit.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

std::uint64_t page_hash(std::uint64_t parent, std::span<const std::int32_t> tokens) {
  return g_hash(parent, tokens);
}

void set_page_hash_for_testing(PageHashFn fn) { g_hash = fn != nullptr ? fn : &default_page_hash; }

}  // namespace pie::kv_detail
