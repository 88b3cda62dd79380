// Bit ranges in bitsets over positions (bit p % 64 of word p / 64): the token walks mark and scan runs
// of sorted token positions a word at a time.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace pse::detail {

// Sets bits [lo, hi) of a bitset, a word at a time.
inline void set_bits(std::uint64_t* bits, std::uint32_t lo, std::uint32_t hi) {
  while (lo < hi) {
    const std::uint32_t w = lo >> 6, from = lo & 63, n = std::min<std::uint32_t>(64 - from, hi - lo);
    bits[w] |= (n == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << n) - 1)) << from;
    lo += n;
  }
}

// Ors bits [lo, hi) of `src` into `dst`, each at its position less `shift` (at most lo).
inline void or_bit_range(std::uint64_t* dst, const std::uint64_t* src, std::uint32_t lo, std::uint32_t hi,
                         std::uint32_t shift) {
  for (std::uint32_t p = lo; p < hi;) {
    const std::uint32_t from = p & 63, n = std::min<std::uint32_t>(64 - from, hi - p);
    std::uint64_t x = src[p >> 6] >> from;
    if (n < 64) x &= (std::uint64_t{1} << n) - 1;
    const std::uint32_t d = p - shift, at = d & 63;
    dst[d >> 6] |= x << at;
    if (at != 0 && at + n > 64) dst[(d >> 6) + 1] |= x >> (64 - at);
    p += n;
  }
}

// The first position in [p, end) whose bit is clear, or end.
inline std::uint32_t next_clear(const std::uint64_t* bits, std::uint32_t p, std::uint32_t end) {
  if (p >= end) return end;
  std::size_t w = p >> 6;
  std::uint64_t x = ~bits[w] & (~std::uint64_t{0} << (p & 63));
  while (x == 0) {
    if (++w * 64 >= end) return end;
    x = ~bits[w];
  }
  const std::size_t q = w * 64 + static_cast<std::size_t>(std::countr_zero(x));
  return std::min<std::uint32_t>(end, static_cast<std::uint32_t>(q));
}

}  // namespace pse::detail
