// Speculative decoding: a drafter guesses the tokens that follow a sequence, and the engine scores them
// all in one forward pass as extra query rows of that sequence, keeping the longest run the target model
// agrees with (pie/sampling.h's Sampler::verify: exact for greedy and sampled decoding alike). The
// grammar vets every drafted token before the pass, and a rejected tail is truncated from the KV cache.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pie/backend.h"
#include "pie/model.h"

namespace pie {

enum class DraftMode : std::uint8_t {
  off,
  // Prompt lookup (vLLM's ngram, transformers' prompt_lookup_num_tokens): the last few tokens matched
  // earlier in the prompt and output, proposing what followed them there. Free, and strong wherever the
  // output copies its input (extraction, edits, code).
  ngram,
  // A draft model (EngineOptions::draft_model): a smaller model of the same vocabulary, resident beside the
  // target with its own KV pages, drafts greedily.
  draft,
  // The engine's EngineOptions::custom_drafter (C++ only: benchmarks and tests, e.g. make_oracle_drafter).
  custom,
};
const char* draft_mode_name(DraftMode mode);  // "off", "ngram", "draft", "custom"
// "off", "ngram", "draft"; throws RequestError (param "speculative") on another name ("custom" included:
// it is not an API name).
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
// suffix recurs, or when the longest that does is followed by different tokens in different places.
std::vector<std::int32_t> prompt_lookup(std::span<const std::int32_t> context, std::int32_t max_tokens,
                                        std::int32_t min_ngram = 1, std::int32_t max_ngram = 3);

// Prompt lookup by text, for copies whose tokens differ from their source's (a JSON string's "Lisbon" after
// its quote is L·is·bon, the prose's " Lisbon" one token): the longest suffix of the context's text (up to
// 32 bytes, 3 of them letters or digits) that occurs earlier in it, in one place or going on alike in every
// place, and what followed it
// there as `tokenizer` spells it from the start of the context's last tokens covering that suffix: up to
// max_tokens of the tokens past the context's end, but the span's last (it may merge with what follows).
// Empty when no suffix recurs, places disagree, or the spelling does not end where the context does.
std::vector<std::int32_t> text_lookup(std::span<const std::int32_t> context, std::int32_t max_tokens,
                                      const tokenizers::Tokenizer& tokenizer);

// What a step costs as a function of its tokens, learned from the steps the engine runs: each size's own
// running mean (a CPU's step of two tokens can cost half again a step of one, then each further token a
// quarter: no line fits both), sizes not seen yet interpolated between seen ones, and beyond the largest
// seen, a least-squares line t = base + per_token * n over recent steps (exponentially weighted). A
// drafted token's cost, relative to a step of n tokens, is what speculation weighs its expected gain against.
class StepCost {
 public:
  static constexpr std::int32_t kMaxSize = 64;  // sizes with a mean of their own
  // A step of n_tokens that took `seconds`, n_logit_rows of them with logits (-1: all). Only a step with
  // logits on every token (decoding, verifying a draft) counts in its size's mean: a prompt chunk's
  // tokens, without the output head, cost less.
  void record(std::int32_t n_tokens, double seconds, std::int32_t n_logit_rows = -1);
  // The seconds a step of n_tokens takes (0 until a step was seen).
  double seconds(std::int32_t n_tokens) const;
  // The cost of one more token in a step of n_tokens, as a fraction of that step, on the line (a prior of
  // 0.3 until steps of different sizes were seen).
  double relative_token_cost(std::int32_t n_tokens) const;
  // costs[k], k = 0..max_k: a step of n_tokens + k tokens against one of n_tokens (costs[0] = 1, never
  // decreasing in k); each token a relative_token_cost() until steps of two sizes were seen.
  std::vector<double> relative_costs(std::int32_t n_tokens, std::int32_t max_k) const;

 private:
  double line(std::int32_t n_tokens) const;  // the line's seconds (0 when it has no slope to read)
  double w_ = 0, n_ = 0, t_ = 0, nn_ = 0, nt_ = 0;  // weighted sums
  double mean_[kMaxSize + 1] = {};
  std::int32_t count_[kMaxSize + 1] = {};
};

// How many tokens a request drafts next (adaptive K): the K in [0, max_k] that maximizes the tokens the
// step it joins yields per unit of that step's cost, (R - 1 + (1 - a^(K+1)) / (1 - a)) / costs[K], for
// the request's running acceptance rate a, the R rows of the step (this one and R - 1 others, a token
// each) and the cost of the step with K drafted tokens against the step without them (StepCost); 0 when
// no K yields more than R tokens per the draftless step's cost (by 2%). In a batch a drafted token must pay
// for the growth of every row's step: at R = 4 a draft needs four times the accepted tokens it needs at
// batch 1. A fixed K (SpeculativeOptions::k) drafts K whatever the rate.
class DraftLength {
 public:
  explicit DraftLength(std::int32_t max_k = 8, bool fixed = false);
  // costs[k] for k = 0..max_k (costs[0] = 1); a shorter span caps K at its size - 1. n_rows: the rows
  // of the step the draft joins, this one included.
  std::int32_t next(std::span<const double> costs, std::int32_t n_rows = 1);
  // Each drafted token a fraction token_cost of a step: costs[k] = 1 + token_cost * k.
  std::int32_t next(double token_cost);
  void record(std::int32_t drafted, std::int32_t accepted);
  double acceptance() const { return acceptance_; }
  std::int32_t max_k() const { return max_k_; }

 private:
  std::int32_t max_k_;
  bool fixed_;
  double acceptance_ = 0.6;  // running rate per drafted token (a hopeful prior)
  std::int32_t idle_ = 0;    // steps without drafting since the last verification
};

// A source of drafts. Each step the engine asks for the drafts of the rows that speculate in it (all at
// once: a draft model batches them), verifies them, and tells the drafter how much of each row it kept;
// a row's sample ending releases what the drafter holds for it. Drafters run on the engine's loop thread.
class Drafter {
 public:
  struct Row {
    std::uint64_t key = 0;                  // the sample, the same from its first step to its release
    std::span<const std::int32_t> context;  // its tokens so far: the prompt, then the output
    std::int32_t max_tokens = 0;            // draft at most this many (>= 1)
    std::vector<std::int32_t> draft;        // out: the proposed continuation (empty: none)
  };
  virtual ~Drafter() = default;
  // Fills each row's draft. Throws pie::Error when drafting failed (the engine then drafts nothing).
  virtual void propose(std::span<Row> rows) = 0;
  // Verification kept the first n_keep tokens of the row's context and draft.
  virtual void keep(std::uint64_t key, std::int32_t n_keep) { (void)key, (void)n_keep; }
  virtual void release(std::uint64_t key) { (void)key; }
  // The seconds drafting costs per drafted token of a row, for a step of n_rows drafting rows (what the
  // adaptive length weighs beside verification's cost); 0 for a drafter that costs nothing to speak of.
  virtual double token_seconds(std::int32_t n_rows) const {
    (void)n_rows;
    return 0;
  }
};

// Prompt lookup (prompt_lookup() above) as a Drafter; with a tokenizer, text_lookup() where the tokens find
// nothing.
std::unique_ptr<Drafter> make_prompt_lookup_drafter(const tokenizers::Tokenizer* tokenizer = nullptr);

// The draft model's place beside the target: its backend, its KV pool and its step size.
struct DraftModelOptions {
  tensor::Device device = tensor::Device::cpu;
  // CPU: the pool its forward passes run on (the target's threads; nullptr: one thread).
  tensor::ThreadPool* pool = nullptr;
  std::int32_t n_pages = 0;             // KV pages (16 tokens each): as many as the target's pool holds
  tensor::DType kv_dtype = tensor::DType::f32;
  std::int32_t max_batch_tokens = 512;  // tokens per forward pass while catching up
  // Bytes its weights and KV pool may take (0: what the device has free now, the target already loaded).
  std::int64_t memory_bytes = 0;
};

// Throws ModelError when `draft` cannot draft for `target`: another vocabulary (naming both sizes), other
// special or end-of-generation ids, other token texts.
void check_draft_vocabulary(const Model& draft, const Model& target);

// A draft model as a Drafter: resident beside the target with its own backend and KV pages. Each proposal
// first catches every row's draft sequence up with its context (the tokens since the kept prefix, run
// through the draft model in chunks of max_batch_tokens, rows batched), then drafts max_tokens tokens
// greedily, one batched forward pass per token. keep() truncates the draft's KV to the kept prefix; the
// target's correction token is computed at the next catch-up.
class DraftModelDrafter final : public Drafter {
 public:
  // Throws ModelError on a vocabulary that differs (check_draft_vocabulary), a draft that does not fit in
  // options.memory_bytes (naming what it needs and what there is), or an architecture without a forward pass.
  DraftModelDrafter(std::shared_ptr<const Model> draft, const Model& target, const DraftModelOptions& options);
  ~DraftModelDrafter() override;
  void propose(std::span<Row> rows) override;
  void keep(std::uint64_t key, std::int32_t n_keep) override;
  void release(std::uint64_t key) override;
  double token_seconds(std::int32_t n_rows) const override;

  // For tests: the tokens whose K/V the draft cache holds for `key` (empty when none), and its pages in use.
  std::vector<std::int32_t> cached_tokens(std::uint64_t key) const;
  std::int32_t pages_in_use() const;
  // Bytes the draft takes beside the target (weights and KV pool).
  std::int64_t resident_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The oracle drafter of the benchmark of speculation's ceiling (scripts/bench-spec-oracle.sh): it knows
// the target's greedy continuation (`sequence`: prompt and output, recorded from a run without
// speculation) and replays it, each drafted token replaced by a wrong one with probability
// 1 - acceptance (a seeded stream: the same run twice drafts the same), so that greedy verification keeps
// a share `acceptance` of what it is shown. A context that leaves the sequence gets no draft. Throws
// pie::Error on an acceptance outside [0, 1] or n_vocab < 2.
std::unique_ptr<Drafter> make_oracle_drafter(std::vector<std::int32_t> sequence, double acceptance,
                                             std::uint64_t seed, std::int32_t n_vocab);

}  // namespace pie
