#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "pie/error.h"
#include "pie/sampling.h"
#include "sampling/rng.h"
#include "sampling/vector_ops.h"

namespace pie {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Top-p first looks for the nucleus among this many best tokens (a cheap heap scan); most nuclei are
// that small. Larger ones are found through a histogram of the weights by logit: the vocabulary is never
// sorted, only the tokens of the one bucket where the nucleus ends.
constexpr std::size_t kNucleusProbe = 64;
constexpr float kBucketsPerNat = 64.0f;
constexpr std::size_t kBuckets = 88 * 64;  // weights below e^-87 are 0 and never land in a bucket

// The bucket of a token of positive weight: how far below the best it is, in 1/64 nat steps. Monotonic
// in the logit, so every token of a lower bucket is better than every token of a higher one.
inline std::size_t bucket_of(float logit, float max, float inv_t) {
  const float d = (max - logit) * inv_t * kBucketsPerNat;
  return d < static_cast<float>(kBuckets - 1) ? static_cast<std::size_t>(d) : kBuckets - 1;
}

template <class C>
bool better(const C& a, const C& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// out.logprob: the log-softmax of `logits` (whose maximum is `max`) at out.token; out.top: the `top` best
// tokens (lowest id first on ties) with theirs. One function for sampled tokens and prompt tokens, so that
// a token's logprob is the same number whichever way it is asked for. weights and sums: scratch.
void fill_logprobs(std::span<const float> logits, float max, std::int32_t top, std::vector<float>& weights,
                   std::vector<double>& sums, SampledToken& out) {
  const std::size_t n = logits.size();
  weights.resize(n);
  sums.resize((n + sampling_detail::kSumBlock - 1) / sampling_detail::kSumBlock);
  sampling_detail::exp_shifted(logits, max, 1.0f, 0.0f, weights.data());
  const double sum = sampling_detail::block_sums(weights, sums.data());
  const double lse = static_cast<double>(max) + std::log(sum);
  out.logprob = static_cast<float>(static_cast<double>(logits[std::size_t(out.token)]) - lse);
  if (top <= 0) return;
  // The best allowed tokens, lowest id first on ties: a small sorted array, one pass.
  const auto want = static_cast<std::size_t>(top);
  TokenLogprob best[20];
  std::size_t have = 0;
  float threshold = -kInf;  // the worst kept once full: only better logits can enter
  for (std::size_t i = sampling_detail::next_above(logits, 0, threshold); i < n;
       i = sampling_detail::next_above(logits, i + 1, threshold)) {
    const float x = logits[i];
    std::size_t pos = have < want ? have++ : want - 1;
    while (pos > 0 && best[pos - 1].logprob < x) {
      best[pos] = best[pos - 1];
      --pos;
    }
    best[pos] = {static_cast<std::int32_t>(i), x};
    if (have == want) threshold = best[want - 1].logprob;
  }
  out.top.reserve(have);
  for (std::size_t j = 0; j < have; ++j) {
    out.top.push_back({best[j].token, static_cast<float>(static_cast<double>(best[j].logprob) - lse)});
  }
}

// out = the k best finite logits, best first (lowest id on ties): a heap of k scanned over the
// vocabulary, so the cost is one compare per token plus rare heap updates.
template <class Vec>
void select_best(std::span<const float> logits, std::size_t k, Vec& out) {
  using C = typename Vec::value_type;
  const auto cmp = [](const C& a, const C& b) { return better(a, b); };  // heap front: the worst kept
  out.clear();
  // Only tokens above the worst kept one can enter: the scan skips the rest 16 at a time.
  float threshold = -std::numeric_limits<float>::infinity();
  for (std::size_t i = sampling_detail::next_above(logits, 0, threshold); i < logits.size();
       i = sampling_detail::next_above(logits, i + 1, threshold)) {
    const float x = logits[i];
    if (out.size() < k) {
      out.push_back({x, static_cast<std::int32_t>(i), 0.0f});
      std::push_heap(out.begin(), out.end(), cmp);
    } else {  // x > the worst kept; an equal logit would have a higher id, so is never better
      std::pop_heap(out.begin(), out.end(), cmp);
      out.back() = {x, static_cast<std::int32_t>(i), 0.0f};
      std::push_heap(out.begin(), out.end(), cmp);
    }
    if (out.size() == k) threshold = out.front().logit;
  }
  std::sort_heap(out.begin(), out.end(), cmp);
}

void check_tokens(std::span<const std::int32_t> tokens, std::size_t n_vocab, const char* what) {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::int32_t t = tokens[i];
    if (t < 0 || static_cast<std::size_t>(t) >= n_vocab) {
      throw RequestError("[sampler] " + std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(t) +
                             " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")",
                         what);
    }
  }
}

}  // namespace

Sampler::Kept Sampler::keep(std::span<const float> logits, float max) {
  const std::size_t n = logits.size();
  const float inv_t = 1.0f / params_.temperature;
  const bool use_k = params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < n;
  const bool use_p = params_.top_p < 1.0f;
  const float min_p = params_.min_p;
  const std::size_t n_blocks = (n + sampling_detail::kSumBlock - 1) / sampling_detail::kSumBlock;

  if (!use_k && !use_p) {
    // Nothing needs an order: weights in id order (min-p is a threshold on the weight, the best being 1).
    weights_.resize(n);
    block_sums_.resize(n_blocks);
    sampling_detail::exp_shifted(logits, max, inv_t, min_p, weights_.data());
    return {true, 0, sampling_detail::block_sums(weights_, block_sums_.data())};
  }

  std::size_t m = 0;  // candidates_[0, m): what top-k and top-p keep
  if (use_k) {
    select_best(logits, static_cast<std::size_t>(params_.top_k), candidates_);
    m = candidates_.size();
    double total = 0;
    for (Candidate& c : candidates_) total += c.weight = std::exp((c.logit - max) * inv_t);
    if (use_p) {
      const double need = static_cast<double>(params_.top_p) * total;
      double cum = 0;
      for (std::size_t j = 0; j < m; ++j) {
        cum += candidates_[j].weight;
        if (cum >= need) {
          m = j + 1;
          break;
        }
      }
    }
  } else {
    weights_.resize(n);
    block_sums_.resize(n_blocks);
    sampling_detail::exp_shifted(logits, max, inv_t, 0.0f, weights_.data());
    const double need = static_cast<double>(params_.top_p) * sampling_detail::block_sums(weights_, block_sums_.data());
    select_best(logits, kNucleusProbe, candidates_);
    double cum = 0;
    bool found = false;
    for (std::size_t j = 0; j < candidates_.size() && !found; ++j) {
      cum += candidates_[j].weight = weights_[std::size_t(candidates_[j].id)];
      if (cum >= need) {
        m = j + 1;
        found = true;
      }
    }
    if (!found) return keep_wide_nucleus(logits, max, inv_t, need);
  }
  // min-p: weights of at least min_p times the best one's (which is 1, and kept by top-k and top-p).
  double kept = 0;
  std::size_t k = 0;
  for (std::size_t j = 0; j < m; ++j) {
    if (candidates_[j].weight >= min_p) {
      candidates_[k++] = candidates_[j];
      kept += candidates_[j].weight;
    }
  }
  return {false, k, kept};
}

std::int32_t Sampler::pick(const Kept& kept, double u) const {
  if (kept.dense) {
    return static_cast<std::int32_t>(sampling_detail::pick_weighted(weights_, block_sums_.data(), u * kept.total));
  }
  const double target = u * kept.total;
  double cum = 0;
  std::int32_t chosen = candidates_[0].id;
  for (std::size_t j = 0; j < kept.n_sparse; ++j) {
    if (candidates_[j].weight == 0) continue;  // dropped
    cum += candidates_[j].weight;
    chosen = candidates_[j].id;
    if (cum > target) break;
  }
  return chosen;
}

Sampler::Kept Sampler::keep_wide_nucleus(std::span<const float> logits, float max, float inv_t, double need) {
  const std::size_t n = logits.size();
  // Mass per bucket, then the bucket where the running mass (best first) reaches need.
  bucket_mass_.assign(kBuckets, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (weights_[i] > 0) bucket_mass_[bucket_of(logits[i], max, inv_t)] += weights_[i];
  }
  std::size_t boundary = kBuckets - 1;
  double before = 0;
  for (std::size_t b = 0; b < kBuckets; ++b) {
    if (before + bucket_mass_[b] >= need) {
      boundary = b;
      break;
    }
    before += bucket_mass_[b];
  }
  // Order only that bucket's tokens; the nucleus ends at the token where the running mass reaches need.
  candidates_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (weights_[i] > 0 && bucket_of(logits[i], max, inv_t) == boundary) {
      candidates_.push_back({logits[i], static_cast<std::int32_t>(i), weights_[i]});
    }
  }
  std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) { return better(a, b); });
  Candidate cut = candidates_.empty() ? Candidate{max, 0, 1.0f} : candidates_.back();
  double cum = before;
  for (const Candidate& c : candidates_) {
    cum += c.weight;
    if (cum >= need) {
      cut = c;
      break;
    }
  }
  // The nucleus is every token at least as good as `cut`; min-p drops weights below min_p (the best is 1).
  const float min_p = params_.min_p;
  for (std::size_t i = 0; i < n; ++i) {
    const float l = logits[i];
    const bool in = l > cut.logit || (l == cut.logit && static_cast<std::int32_t>(i) <= cut.id);
    if (!in || weights_[i] < min_p) weights_[i] = 0.0f;
  }
  return {true, 0, sampling_detail::block_sums(weights_, block_sums_.data())};
}

Sampler::Sampler(SamplingParams params, std::uint64_t seed) : params_(std::move(params)) {
  sampling_detail::seed_xoshiro(rng_state_, seed);
}

Sampler::Prepared Sampler::prepare(std::span<float> logits, std::span<const std::uint32_t> mask,
                                   std::span<const std::int32_t> prompt, std::span<const std::int32_t> output) {
  const std::size_t n = logits.size();
  if (n == 0 || n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw Error("[sampler] logits must hold 1 to 2^31 - 1 entries, got " + std::to_string(n));
  }
  check_tokens(prompt, n, "prompt");
  check_tokens(output, n, "output");
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token < 0 || static_cast<std::size_t>(token) >= n) {
      const std::string name = "logit_bias[" + std::to_string(token) + "]";
      throw RequestError("[sampler] " + name + ": token outside the vocabulary [0, " + std::to_string(n) + ")", name);
    }
  }

  // 1. Repetition penalty (HF / llama.cpp): once per distinct token of prompt and output.
  const float rep = params_.repetition_penalty;
  if (rep != 1.0f && (!prompt.empty() || !output.empty())) {
    if (seen_.size() != n) {
      seen_.assign(n, 0);
      seen_stamp_ = 0;
    }
    if (++seen_stamp_ == 0) {  // wrapped: old stamps could collide
      std::fill(seen_.begin(), seen_.end(), 0);
      seen_stamp_ = 1;
    }
    for (std::span<const std::int32_t> ts : {prompt, output}) {
      for (const std::int32_t t : ts) {
        if (seen_[std::size_t(t)] == seen_stamp_) continue;
        seen_[std::size_t(t)] = seen_stamp_;
        float& l = logits[std::size_t(t)];
        l = l > 0 ? l / rep : l * rep;
      }
    }
  }

  // 2. Frequency and presence penalties (OpenAI): l -= count * frequency + (count > 0) * presence.
  if ((params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) && !output.empty()) {
    if (counts_.size() != n) counts_.assign(n, 0);
    for (const std::int32_t t : output) ++counts_[std::size_t(t)];
    for (const std::int32_t t : output) {
      std::int32_t& c = counts_[std::size_t(t)];
      if (c == 0) continue;  // already applied
      logits[std::size_t(t)] -= static_cast<float>(c) * params_.frequency_penalty + params_.presence_penalty;
      c = 0;
    }
  }

  // 3. Logit bias.
  for (const auto& [token, bias] : params_.logit_bias) logits[std::size_t(token)] += bias;

  // 4. The grammar's mask: disallowed tokens, and any token past the mask's words, become -inf.
  if (!mask.empty()) {
    const std::size_t n_words = std::min(mask.size(), (n + 31) / 32);
    bool any = false;
    for (std::size_t w = 0; w < n_words; ++w) {
      std::uint32_t bits = mask[w];
      const std::size_t base = w * 32;
      const std::size_t width = std::min<std::size_t>(32, n - base);
      if (width < 32) bits &= (std::uint32_t{1} << width) - 1;
      any |= bits != 0;
      if (bits == 0xFFFFFFFFu) continue;
      for (std::size_t b = 0; b < width; ++b) {
        if ((bits >> b & 1u) == 0) logits[base + b] = -kInf;
      }
    }
    for (std::size_t i = n_words * 32; i < n; ++i) logits[i] = -kInf;
    if (!any) throw RequestError("[sampler] the constraint's mask allows no token");
  }

  // The best token (lowest id on ties), and a check that the logits are numbers.
  const sampling_detail::MaxResult mr = sampling_detail::find_max(logits);
  if (mr.bad >= 0) {  // NaN or +inf: a broken model output, not something to sample from
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", static_cast<double>(logits[std::size_t(mr.bad)]));
    throw Error("[sampler] logit of token " + std::to_string(mr.bad) + " is " + buf);
  }
  if (mr.first < 0) throw RequestError("[sampler] no token can be sampled: every allowed token has logit -inf");
  return {mr.max, static_cast<std::int32_t>(mr.first)};
}

SampledToken Sampler::sample(std::span<float> logits, std::span<const std::uint32_t> mask,
                             std::span<const std::int32_t> prompt, std::span<const std::int32_t> output) {
  const Prepared pr = prepare(logits, mask, prompt, output);
  // Exactly one draw per call, whatever the path, so the stream position is the number of tokens sampled.
  const double u = sampling_detail::next_uniform(rng_state_);
  SampledToken out;
  out.token = params_.temperature > 0.0f ? pick(keep(logits, pr.max), u) : pr.best;
  if (params_.logprobs || params_.top_logprobs > 0) {
    fill_logprobs(logits, pr.max, params_.top_logprobs, weights_, block_sums_, out);
  }
  return out;
}

SampledToken Sampler::verify(std::span<float> logits, std::span<const std::uint32_t> mask,
                             std::span<const std::int32_t> prompt, std::span<const std::int32_t> output,
                             std::int32_t draft, bool& accepted) {
  if (draft < 0 || static_cast<std::size_t>(draft) >= logits.size()) {
    throw Error("[sampler] verify: draft token " + std::to_string(draft) + " is outside the " +
                std::to_string(logits.size()) + " logits");
  }
  const Prepared pr = prepare(logits, mask, prompt, output);
  // The token is drawn exactly as sample() draws it (the same single draw from the stream), and the draft
  // is kept iff it is that token. For a drafter certain of its draft this keeps it with probability
  // p(draft), as rejection sampling does, and more: the output is the one sample() would give with the
  // same seed, whatever was drafted, so a seed reproduces its text with speculation on or off.
  const double u = sampling_detail::next_uniform(rng_state_);
  SampledToken out;
  out.token = params_.temperature > 0.0f ? pick(keep(logits, pr.max), u) : pr.best;
  accepted = out.token == draft;
  if (params_.logprobs || params_.top_logprobs > 0) {
    fill_logprobs(logits, pr.max, params_.top_logprobs, weights_, block_sums_, out);
  }
  return out;
}

SampledToken Sampler::sample_at(std::span<float> logits, std::span<const std::uint32_t> mask,
                                std::span<const std::int32_t> prompt, std::span<const std::int32_t> output, double u) {
  if (!(u >= 0.0 && u < 1.0)) throw Error("[sampler] sample_at: the draw must be in [0, 1), got " + std::to_string(u));
  const Prepared pr = prepare(logits, mask, prompt, output);
  SampledToken out;
  out.token = params_.temperature > 0.0f ? pick(keep(logits, pr.max), u) : pr.best;
  if (params_.logprobs || params_.top_logprobs > 0) {
    fill_logprobs(logits, pr.max, params_.top_logprobs, weights_, block_sums_, out);
  }
  return out;
}

double Sampler::next_draw() { return sampling_detail::next_uniform(rng_state_); }

double Sampler::draw_ahead(std::size_t n) const {
  std::uint64_t state[4] = {rng_state_[0], rng_state_[1], rng_state_[2], rng_state_[3]};
  for (std::size_t i = 0; i < n; ++i) sampling_detail::next_xoshiro(state);
  return sampling_detail::next_uniform(state);
}

SampledToken token_logprob(std::span<const float> logits, std::int32_t token, std::int32_t top_logprobs) {
  if (token < 0 || static_cast<std::size_t>(token) >= logits.size()) {
    throw Error("[sampler] token_logprob: token " + std::to_string(token) + " is outside the " +
                std::to_string(logits.size()) + " logits");
  }
  if (top_logprobs < 0 || top_logprobs > 20) {
    throw Error("[sampler] token_logprob: top_logprobs must be in [0, 20], got " + std::to_string(top_logprobs));
  }
  const sampling_detail::MaxResult mr = sampling_detail::find_max(logits);
  if (mr.bad >= 0) throw Error("[sampler] token_logprob: logit of token " + std::to_string(mr.bad) + " is not finite");
  if (mr.first < 0) throw Error("[sampler] token_logprob: every logit is -inf");
  SampledToken out;
  out.token = token;
  std::vector<float> weights;
  std::vector<double> sums;
  fill_logprobs(logits, mr.max, top_logprobs, weights, sums, out);
  return out;
}

}  // namespace pie
