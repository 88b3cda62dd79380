// The sampler's passes over the whole vocabulary, written as fixed-width lane loops that the compiler
// vectorizes without -ffast-math (the lane order is explicit, so results do not depend on it): max with a
// NaN / +inf check, exp of scaled logits, and blocked sums that let a weighted draw skip whole blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pie::sampling_detail {

inline constexpr std::size_t kSumBlock = 256;  // elements per block of block_sums

struct MaxResult {
  float max;           // -inf when every value is -inf
  std::int64_t first;  // index of the first value equal to max (lowest id on ties); -1 when max is -inf
  std::int64_t bad;    // index of the first NaN or +inf, or -1
};
MaxResult find_max(std::span<const float> x);

// out[i] = exp((x[i] - max) * scale), 0 where that is below ~1e-38 (so exactly 0 for -inf); max must be
// >= every x[i] and scale > 0. When floor > 0, results below it are set to 0 as well.
void exp_shifted(std::span<const float> x, float max, float scale, float floor, float* out);

// The first index k >= from with x[k] > threshold, or x.size(): whole blocks of 16 that hold nothing
// above the threshold are skipped with vector compares.
std::size_t next_above(std::span<const float> x, std::size_t from, float threshold);

// Sums of w over consecutive blocks of kSumBlock elements into block_sums[ceil(n / kSumBlock)]; returns
// the total (of the block sums, in order).
double block_sums(std::span<const float> w, double* block_sums);

// The first index i with w[0] + ... + w[i] > target among positive weights (the last positive weight when
// rounding leaves target unreached). block_sums as computed above; total > 0.
std::size_t pick_weighted(std::span<const float> w, const double* block_sums, double target);

}  // namespace pie::sampling_detail
