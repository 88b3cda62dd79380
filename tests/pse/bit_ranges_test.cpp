// The bit-range helpers of the token walks (pse/src/bit_ranges.h) against a bit-by-bit reading, on
// random bitsets and every range boundary near word edges.
#include "bit_ranges.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace {

using namespace pse::detail;

bool bit(const std::vector<std::uint64_t>& v, std::uint32_t p) { return ((v[p >> 6] >> (p & 63)) & 1) != 0; }

std::vector<std::uint32_t> edges() {  // positions around the word boundaries of 4 words
  std::vector<std::uint32_t> out;
  for (std::uint32_t w = 0; w <= 4; ++w)
    for (const int d : {-2, -1, 0, 1, 2, 31})
      if (static_cast<int>(w * 64) + d >= 0 && w * 64 + d <= 256) out.push_back(static_cast<std::uint32_t>(w * 64 + d));
  return out;
}

TEST(BitRanges, SetBitsSetsExactlyTheRange) {
  for (const std::uint32_t lo : edges()) {
    for (const std::uint32_t hi : edges()) {
      std::vector<std::uint64_t> v(4, 0);
      set_bits(v.data(), lo, hi);
      for (std::uint32_t p = 0; p < 256; ++p) {
        ASSERT_EQ(bit(v, p), p >= lo && p < hi) << lo << ".." << hi << " at " << p;
      }
    }
  }
}

TEST(BitRanges, OrBitRangeMovesTheRangeDownByTheShift) {
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> src(5);
  for (auto& w : src) w = rng();
  for (const std::uint32_t lo : edges()) {
    for (const std::uint32_t hi : edges()) {
      if (hi > 256) continue;
      for (const std::uint32_t shift : {0u, 1u, 3u, 63u, 64u, 65u, 130u}) {
        if (shift > lo) continue;
        std::vector<std::uint64_t> dst(5, 0);
        dst[4] = 0xF0F0;  // bits already set stay set
        const std::vector<std::uint64_t> before = dst;
        or_bit_range(dst.data(), src.data(), lo, hi, shift);
        for (std::uint32_t q = 0; q < 320; ++q) {
          const bool moved = q + shift >= lo && q + shift < hi && bit(src, q + shift);
          ASSERT_EQ(bit(dst, q), bit(before, q) || moved) << lo << ".." << hi << " shift " << shift << " at " << q;
        }
      }
    }
  }
}

TEST(BitRanges, NextClearFindsTheFirstClearBitBeforeTheEnd) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::uint64_t> v(4);
    for (auto& w : v) w = round % 3 == 0 ? ~std::uint64_t{0} : rng() | rng();  // long runs of set bits
    for (const std::uint32_t p : edges()) {
      for (const std::uint32_t end : edges()) {
        if (end > 256) continue;
        std::uint32_t expected = p;
        while (expected < end && bit(v, expected)) ++expected;
        ASSERT_EQ(next_clear(v.data(), p, end), p >= end ? end : expected) << p << ".." << end;
      }
    }
  }
}

}  // namespace
