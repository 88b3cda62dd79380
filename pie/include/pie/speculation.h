// Speculative decoding: a drafter guesses the tokens that follow a sequence, and the engine scores them
// all in one forward pass as extra query rows of that sequence, keeping the longest run the target model
// agrees with (pie/sampling.h's Sampler::verify: exact for greedy and sampled decoding alike). The
// grammar vets every drafted token before the pass, and a rejected tail is truncated from the KV cache.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pie {

enum class DraftMode : std::uint8_t {
  off,
  // Prompt lookup (vLLM's ngram, transformers' prompt_lookup_num_tokens): the last few tokens matched
  // earlier in the prompt and output, proposing what followed them there. Free, and strong wherever the
  // output copies its input (extraction, edits, code).
  ngram,
};
const char* draft_mode_name(DraftMode mode);  // "off", "ngram"
// Throws RequestError (param "speculative") on another name.
DraftMode draft_mode_from_name(const std::string& name);

inline constexpr std::int32_t kMaxDraftTokens = 16;

struct SpeculativeOptions {
  DraftMode mode = DraftMode::off;
  // Tokens drafted per step, 1..16; 0: adaptive (follows the request's measured acceptance rate, up to 8).
  std::int32_t k = 0;
  // Throws RequestError (param "speculative.k") when k is outside 0..16.
  void validate() const;
};

// Prompt lookup: the longest suffix of `context` of max_ngram down to min_ngram tokens that also occurs
// earlier in it (the latest such place), and up to max_tokens of what followed it there; empty when no
// suffix recurs.
std::vector<std::int32_t> prompt_lookup(std::span<const std::int32_t> context, std::int32_t max_tokens,
                                        std::int32_t min_ngram = 1, std::int32_t max_ngram = 3);

// What a step costs as a function of its tokens, learned from the steps the engine runs: a least-squares
// line t = base + per_token * n over recent steps (exponentially weighted). A drafted token's cost,
// relative to a step of n tokens, is what speculation weighs its expected gain against.
class StepCost {
 public:
  void record(std::int32_t n_tokens, double seconds);
  // The cost of one more token in a step of n_tokens, as a fraction of that step (a prior of 0.3 until
  // steps of different sizes were seen).
  double relative_token_cost(std::int32_t n_tokens) const;

 private:
  double w_ = 0, n_ = 0, t_ = 0, nn_ = 0, nt_ = 0;  // weighted sums
};

// How many tokens a request drafts next (adaptive K): the K in [0, max_k] that maximizes the tokens a
// step yields per unit of its cost, (1 - a^(K+1)) / (1 - a) / (1 + c K), for the request's running
// acceptance rate a and a drafted token's relative cost c (StepCost); 0 when drafting does not pay. A
// fixed K (SpeculativeOptions::k) drafts K whatever the rate.
class DraftLength {
 public:
  explicit DraftLength(std::int32_t max_k = 8, bool fixed = false);
  std::int32_t next(double token_cost);
  void record(std::int32_t drafted, std::int32_t accepted);
  double acceptance() const { return acceptance_; }

 private:
  std::int32_t max_k_;
  bool fixed_;
  double acceptance_ = 0.6;  // running rate per drafted token (a hopeful prior)
  std::int32_t idle_ = 0;    // steps without drafting since the last verification
};

}  // namespace pie
