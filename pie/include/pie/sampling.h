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

  // Speculative decoding: decides a drafted token at this position, for a drafter that proposed it with
  // certainty (prompt lookup). Draws the token as sample() would, with the same single draw from the
  // seeded stream, and keeps the draft iff it is that token: kept with probability p(draft) under this
  // sampler's distribution (as rejection sampling keeps it, Leviathan et al. 2023), and the text is the
  // one sample() gives for the seed whatever was drafted. Sets `accepted`; logprobs as sample(). Throws as
  // sample(), and pie::Error for a draft outside the logits.
  SampledToken verify(std::span<float> logits, std::span<const std::uint32_t> mask,
                      std::span<const std::int32_t> prompt, std::span<const std::int32_t> output,
                      std::int32_t draft, bool& accepted);

  // sample() at the draw u in [0, 1) instead of the stream's next one (the stream is left as it is): what a
  // row sampled elsewhere at a draw taken by next_draw() must give (device_sampling.h). Throws as sample(),
  // and pie::Error for u outside [0, 1).
  SampledToken sample_at(std::span<float> logits, std::span<const std::uint32_t> mask,
                         std::span<const std::int32_t> prompt, std::span<const std::int32_t> output, double u);

  // The draw sample() would take now, for a token sampled elsewhere (on the device: device_sampling.h):
  // advances the stream as sample() does, so the stream position stays the number of tokens sampled.
  double next_draw();
  // The draw the (n + 1)-th next sample() would take, the stream left as it is: the draws of a drafted row's
  // positions, taken ahead for the device, of which next_draw() then moves past those verified.
  double draw_ahead(std::size_t n) const;

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float logit;
    std::int32_t id;
    float weight;  // exp((logit - max) / temperature)
  };
  // The processed logits' maximum and best token (lowest id on ties), after steps 1-4 of sample().
  struct Prepared {
    float max;
    std::int32_t best;
  };
  Prepared prepare(std::span<float> logits, std::span<const std::uint32_t> mask,
                   std::span<const std::int32_t> prompt, std::span<const std::int32_t> output);
  // Temperature > 0: what top-k, top-p and min-p keep of the processed logits, as weights: dense
  // (weights_ over every id, with block_sums_) or sparse (candidates_[0, n_sparse)), total their sum.
  struct Kept {
    bool dense;
    std::size_t n_sparse;
    double total;
  };
  Kept keep(std::span<const float> logits, float max);
  // Top-p alone when the nucleus is wide: weights_ hold every token's weight, need is top_p of their sum.
  Kept keep_wide_nucleus(std::span<const float> logits, float max, float inv_t, double need);
  std::int32_t pick(const Kept& kept, double u) const;  // the draw at u in [0, 1)

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
