// Sampling where the logits are (on the GPU), so that only a token id and its logprobs come back: what a
// row to sample carries across the backend seam (Backend::sample_rows), and the host side's part of it.
//
// The device follows Sampler::sample's order and rules (penalties, logit bias, the mask, then greedy or
// temperature, top-k, top-p, min-p and the draw), with the row's uniform draw u taken by the host from the
// request's own stream (Sampler::next_draw), so a seed still reproduces its output. Tokens agree with the
// CPU's wherever the kept set and its weights agree; sums of weights may differ in their last bits (another
// summation order), which can move a draw that falls within that distance of a boundary.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pie/sampling.h"

namespace pie {

// The largest top_k (below the vocabulary) the device sorts for; larger ones are sampled on the host.
inline constexpr std::int32_t kDeviceMaxTopK = 1024;

// One row to sample from the last step's logits.
struct DeviceSampleRow {
  std::int32_t logits_row = 0;            // the step's logit row (several rows may read the same one)
  const SamplingParams* params = nullptr;  // alive until sample_rows returns
  std::span<const std::uint32_t> mask;     // the grammar's bitmask (ceil(n_vocab / 32) words) or empty
  // Repetition penalty: the distinct tokens of prompt and output. Frequency and presence penalties: each
  // distinct output token with its count. Built by penalty_inputs().
  std::span<const std::int32_t> penalized;
  std::span<const std::pair<std::int32_t, std::int32_t>> counts;
  double u = 0;  // the row's draw in [0, 1)
};

struct DeviceSampleResult {
  enum class Status : std::int32_t { ok = 0, bad_logit = 1, no_token = 2 };
  Status status = Status::ok;
  SampledToken sampled;  // logprob and top filled when the row's params ask for them
  std::int32_t bad_token = -1;  // bad_logit: the first NaN or +inf logit, and its value
  float bad_value = 0;
};

// Whether a row with these parameters is sampled on the device (else on the host): every greedy row; a
// sampled one unless its top_k is above kDeviceMaxTopK and below the vocabulary.
bool device_sampling_covers(const SamplingParams& params, std::int32_t n_vocab);

// The penalty inputs of a row: `penalized` the distinct tokens of prompt and output when the repetition
// penalty is on, `counts` each distinct output token's count (first-occurrence order) when the frequency
// or presence penalty is on; both cleared first. Throws RequestError naming a token outside [0, n_vocab).
void penalty_inputs(const SamplingParams& params, std::span<const std::int32_t> prompt,
                    std::span<const std::int32_t> output, std::int32_t n_vocab, std::vector<std::int32_t>& penalized,
                    std::vector<std::pair<std::int32_t, std::int32_t>>& counts);

// The mask allows no token among n_vocab (the CPU's RequestError, checked on the host before the device).
bool mask_allows_nothing(std::span<const std::uint32_t> mask, std::int32_t n_vocab);

// Throws what Sampler::sample throws for a result that is not ok (pie::Error for a NaN or +inf logit,
// RequestError when every allowed token is -inf); nothing for ok.
void throw_unless_sampled(const DeviceSampleResult& result);

}  // namespace pie
