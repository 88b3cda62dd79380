// Keys of the prefix cache: a full page is addressed by a 64-bit hash chained over every page before it,
// key(i) = page_hash(key(i - 1), tokens of page i), key(-1) = kRootKey. Lookups verify the stored tokens and
// parent key, so a hash collision costs a cache miss, never a wrong page.
#pragma once

#include <cstdint>
#include <span>

namespace pie::kv_detail {

inline constexpr std::uint64_t kRootKey = 0x6a09e667f3bcc909ULL;

using PageHashFn = std::uint64_t (*)(std::uint64_t parent, std::span<const std::int32_t> tokens);

// The hash in use (the default, or the one a test installed).
std::uint64_t page_hash(std::uint64_t parent, std::span<const std::int32_t> tokens);
std::uint64_t default_page_hash(std::uint64_t parent, std::span<const std::int32_t> tokens);
// Test hook: replaces the hash (nullptr restores the default), so that tests can force collisions.
void set_page_hash_for_testing(PageHashFn fn);

}  // namespace pie::kv_detail
