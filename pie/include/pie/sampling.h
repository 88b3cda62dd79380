// Per-request sampling: logits processors (repetition / frequency / presence penalties, logit bias), the
// grammar's bitmask, then temperature, top-k, top-p, min-p and a seeded draw; logprobs; stop strings that
// may span token boundaries.
//
// Determinism: a Sampler owns its random stream (seeded per request, one draw per sampled token), so a
// request's tokens do not depend on what else is in the batch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pie {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy (argmax); [0, 100]
  std::int32_t top_k = 0;           // 0: off
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1: off (llama.cpp / HF rule over prompt and output tokens)
  float frequency_penalty = 0.0f;   // [-2, 2], OpenAI rule over output tokens
  float presence_penalty = 0.0f;    // [-2, 2], OpenAI rule over output tokens
  std::vector<std::pair<std::int32_t, float>> logit_bias;  // token -> bias in [-100, 100]
  std::optional<std::uint64_t> seed;  // none: a fresh random seed
  bool logprobs = false;            // report the chosen token's logprob
  std::int32_t top_logprobs = 0;    // [0, 20] alternatives per position

  // Throws RequestError naming the field when a value is out of range or a logit_bias token is outside
  // [0, n_vocab).
  void validate(std::int32_t n_vocab) const;
};

struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0;
};

struct SampledToken {
  std::int32_t token = 0;
  // log-softmax of the processed logits (after penalties, bias and the mask; before temperature and
  // truncation) at the chosen token, and the top_logprobs best of them. Filled when asked for.
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

class Sampler {
 public:
  // seed: the request's seed (params.seed, or one the engine drew for it).
  Sampler(SamplingParams params, std::uint64_t seed);

  // Samples one token from logits [n_vocab] (modified in place). mask: the grammar's bitmask
  // (ceil(n_vocab / 32) words, bit i % 32 of word i / 32 = token i allowed) or empty for none. prompt and
  // output: the tokens so far, for the penalties. Throws RequestError when the mask allows no token.
  SampledToken sample(std::span<float> logits, std::span<const std::uint32_t> mask,
                      std::span<const std::int32_t> prompt, std::span<const std::int32_t> output);

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float logit;
    std::int32_t id;
    float weight;  // exp((logit - max) / temperature)
  };
  // Temperature > 0: top-k, top-p, min-p and the draw at u in [0, 1) over the processed logits.
  std::int32_t sample_truncated(std::span<const float> logits, float max, double u);
  // Top-p alone when the nucleus is wide: weights_ hold every token's weight, need is top_p of their sum.
  std::int32_t sample_wide_nucleus(std::span<const float> logits, float max, float inv_t, double need, double u);

  SamplingParams params_;
  std::uint64_t rng_state_[4];
  // Scratch reused across calls (sized to the vocabulary once): no allocation per sampled token.
  std::vector<std::uint32_t> seen_;   // [n_vocab] repetition penalty: stamp of the call that penalized it
  std::uint32_t seen_stamp_ = 0;
  std::vector<std::int32_t> counts_;  // [n_vocab] output token counts, all zero between calls
  std::vector<float> weights_;        // [n_vocab] exp((logit - max) / temperature)
  std::vector<double> block_sums_;    // [n_vocab / 256] sums of weights_ by block, for the draw
  std::vector<Candidate> candidates_;  // the best tokens, when top-k / top-p need an order
  std::vector<double> bucket_mass_;    // [88 * 64] weight per 1/64-nat bucket below the best (wide top-p)
};

// The log-softmax of raw logits [n_vocab] at `token`, and the top_logprobs best tokens (lowest id first on
// ties) with theirs: a prompt token's logprob (no penalties, bias, mask or temperature; for a sampled
// token without those, the same number Sampler::sample reports). Throws pie::Error on a token outside the
// logits, top_logprobs outside [0, 20] or a logit that is NaN or +inf.
SampledToken token_logprob(std::span<const float> logits, std::int32_t token, std::int32_t top_logprobs);

// Finds stop strings in streamed text, even when one spans several pushes, and holds back any tail that
// could still begin a stop string so that no part of it is ever emitted.
class StopStringMatcher {
 public:
  // Throws RequestError on an empty stop string.
  explicit StopStringMatcher(std::vector<std::string> stops);
  struct Result {
    std::string text;      // safe to emit now (everything before a stop string when stopped)
    bool stopped = false;  // a stop string was found; nothing after it is emitted
    std::string matched;   // which one
  };
  // After a stop, every further push returns empty text with stopped set (and the same `matched`).
  Result push(std::string_view text);
  // The text held back, once the stream ends without a stop (empty after a stop).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace pie
