// The engine's state, shared by the files that make up its loop: engine.cpp (construction, the loop, the
// public API), engine_requests.cpp (a request's life: submit, events, finish, cancellation),
// engine_step.cpp (one step: schedule -> forward pass || masks -> sample -> tokens into their samples),
// engine_speculation.cpp (drafts before the step, their verification after it) and
// engine_device_sampling.cpp (rows sampled where their logits are). Internal: nothing outside src/engine/
// includes it.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/lora_registry.h"
#include "grammar_cache.h"
#include "pie/engine.h"
#include "pie/kv_cache.h"
#include "pie/runner.h"
#include "pie/scheduler.h"
#include "pse/matcher.h"
#include "pse/thread_pool.h"
#include "request_stream.h"
#include "tensor/thread_pool.h"

namespace pie::detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The scheduler's view of the KV cache (Scheduler knows pages through KvPages only).
class KvCachePages final : public KvPages {
 public:
  explicit KvCachePages(KvCache& kv) : kv_(kv) {}
  SeqId create(std::uint64_t prefix_namespace) override { return kv_.create(prefix_namespace); }
  std::int32_t attach_prefix(SeqId seq, std::span<const std::int32_t> tokens) override {
    return kv_.attach_prefix(seq, tokens);
  }
  bool reserve(SeqId seq, std::int32_t n_tokens) override { return kv_.reserve(seq, n_tokens); }
  void commit(SeqId seq, std::span<const std::int32_t> tokens, std::int32_t n_computed) override {
    kv_.commit(seq, tokens, n_computed);
  }
  SeqId fork(SeqId seq) override { return kv_.fork(seq); }
  void release(SeqId seq) override { kv_.release(seq); }
  bool truncate(SeqId seq, std::int32_t n_keep) override { return kv_.truncate(seq, n_keep); }

 private:
  KvCache& kv_;
};

struct Request;

// The tokens a mask allows among the model's n_vocab rows.
inline std::int32_t count_allowed(std::span<const std::uint32_t> mask, std::int32_t n_vocab) {
  std::int32_t n = 0;
  const auto full = static_cast<std::size_t>(n_vocab / 32);
  for (std::size_t w = 0; w < full && w < mask.size(); ++w) n += std::popcount(mask[w]);
  if (n_vocab % 32 != 0 && full < mask.size()) {
    n += std::popcount(mask[full] & ((1u << (n_vocab % 32)) - 1u));
  }
  return n;
}

// A drafted token: the drafter's guess, a token the grammar forces there (appended as jump-forward appends
// it, not verified: a free draft), or the model's own earlier spelling of text the grammar forces there
// (verified as a guess is).
enum class DraftKind : std::uint8_t { guess, forced, spelling };

// One of a request's n samples: its sequence, sampler, grammar cursor, detokenizer and stop matcher.
struct Sample {
  Request* request = nullptr;
  std::int32_t index = 0;
  std::optional<SequenceId> seq;
  std::optional<Sampler> sampler;
  std::optional<pse::Matcher> matcher;
  std::optional<tokenizers::StreamingDetokenizer> detok;
  std::optional<StopStringMatcher> stops;
  std::vector<std::int32_t> output;
  // Speculative decoding: the tokens drafted for the coming step (empty: none), what each one is, and how
  // many the drafter proposes.
  std::vector<std::int32_t> draft;
  std::vector<DraftKind> draft_kinds;
  DraftLength draft_length;
  std::uint64_t draft_key = 0;  // the sample for the drafter (Drafter::Row::key)
  bool finished = false;
  bool hit_stop_string = false;  // the text after it (and what the stop matcher holds back) is dropped
  std::int32_t end_token = -1;    // the end-of-sequence token sampled last, for the last event
  std::int32_t end_allowed = -1;  // and the number of tokens its mask allowed
};

struct Request {
  GenerateRequest req;
  std::shared_ptr<detail::RequestChannel> channel;
  std::uint64_t seed = 0;
  std::optional<pse::CompiledGrammar> grammar;
  std::vector<Sample> samples;
  bool forked = false;     // samples 1..n-1 exist (after the prompt's prefill)
  bool admitted = false;   // the prompt was admitted once (cached_prompt_tokens recorded)
  std::int32_t n_finished = 0;
  bool failed = false;
  Usage usage;
  // prompt_logprobs: entry p is prompt token p + 1's, from the logits at position p, filled as the prompt's
  // chunks run (again, identically, when a preempted prompt runs again); sent once it is whole.
  std::vector<SampledToken> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  SpeculativeOptions speculative;  // the request's, or the engine's default
  detail::ResolvedLoras loras;     // held until the request ends (a detach never pulls them away)
};

// A drafted row of the step: its sample, its first logits row and how many (the row's token and its
// draft), and the first position's index into the step's masks (one mask per position, when constrained).
struct DraftedRow {
  Sample* sample = nullptr;
  std::int32_t first_position = 0;  // the position of the row's last token before its draft
  std::size_t first_logits = 0;
  std::size_t n = 0;
  std::size_t first_mask = 0;
};

// A prompt position whose logits give the logprob of the token after it, and its row of the step's logits.
struct PromptRow {
  Sample* sample = nullptr;
  std::int32_t position = 0;
  std::size_t logits_row = 0;
};

// What a step samples once its forward pass is done: its plain rows (samples[i]'s logits at row
// logits_rows[i] of the step's, under mask i when constrained) and its drafted rows (one logits row and,
// when constrained, one mask per position), with the masks' errors (empty: none).
struct StepRows {
  std::span<Sample* const> samples;
  std::span<const std::size_t> logits_rows;
  std::span<const std::uint32_t> masks;  // [samples.size() * words]
  std::span<const std::string> mask_errors;
  std::span<const DraftedRow> drafted;
  std::span<const std::uint32_t> draft_masks;  // DraftedRow::first_mask indexes these
  std::span<const std::string> draft_mask_errors;
};

// A drafted row's token at position i (its logits row i) under `mask`, where the draft holds `draft` (-1:
// the position after the draft): drawn from the host's logits or taken from the device's result. Throws
// what Sampler::sample throws.
using PositionSampler =
    std::function<SampledToken(std::size_t i, std::span<const std::uint32_t> mask, std::int32_t draft)>;

// Prompt tokens a prompt_logprobs sequence computes per step: each asks for a row of logits (n_vocab
// floats), so this bounds the step's logits to a few tens of megabytes whatever the batch size.
inline constexpr std::int32_t kPromptLogprobsChunk = 64;

}  // namespace pie::detail

namespace pie {

struct Engine::Impl {
  using Request = detail::Request;
  using Sample = detail::Sample;
  std::shared_ptr<const Model> model;
  EngineOptions options;
  DeviceChoice device;
  std::int32_t context_length = 0;
  std::int32_t n_vocab = 0;
  std::unique_ptr<pse::ThreadPool> mask_pool;
  // The forward pass's threads when a draft model shares them with the target on the CPU.
  std::unique_ptr<tensor::ThreadPool> cpu_pool;
  std::unique_ptr<ModelRunner> runner;
  bool device_sampling = false;  // the backend samples on the device and the options let it
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<detail::KvCachePages> pages;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<detail::GrammarCache> grammars;
  std::unique_ptr<detail::LoraRegistry> lora_registry;
  std::vector<std::uint32_t> no_eos_mask;  // ignore_eos: every row but the end-of-sequence ids
  std::vector<std::int32_t> eos_ids;

  std::shared_ptr<detail::EngineSignal> signal = std::make_shared<detail::EngineSignal>();
  // Guarded by signal->mutex.
  std::deque<std::unique_ptr<Request>> incoming;
  bool accepting = true;
  bool stop_loop = false;
  bool cancel_all = false;
  bool loop_idle = true;
  std::condition_variable idle_cv;

  // Loop-owned.
  std::vector<std::unique_ptr<Request>> active;
  std::unordered_map<SequenceId, Sample*> by_seq;
  // A step's logits and masks, reused across steps: rows x vocabulary is megabytes with a large vocabulary,
  // which a fresh allocation would page-fault in (and zero) at every step.
  std::vector<float> step_logits;
  std::vector<std::uint32_t> step_masks;
  std::vector<std::uint32_t> step_draft_masks;
  StepCost step_cost;  // what a step's tokens cost, for the draft lengths
  // The drafters of the speculative modes (nullptr: the mode is not available).
  std::unique_ptr<Drafter> ngram_drafter;
  std::unique_ptr<Drafter> draft_model_drafter;
  std::shared_ptr<Drafter> custom_drafter;
  std::atomic<std::uint64_t> next_draft_key{1};  // submit() numbers samples on callers' threads

  mutable std::mutex stats_mutex;
  EngineStats stats;
  std::atomic<std::uint64_t> next_id{1};
  // Requests submitted and not yet admitted (max_queued counts these; exact, unlike the published stats).
  std::atomic<std::int64_t> n_unadmitted{0};

  std::thread loop;

  Impl(std::shared_ptr<const Model> m, EngineOptions o);
  void run_loop();
  bool step();
  void take_incoming(std::deque<std::unique_ptr<Request>>& batch);
  void process_cancellations();
  void finish(Sample& s, FinishReason reason, std::string error = {});
  // finish() for a sample that sampled end-of-sequence `token` under a mask allowing n_allowed tokens.
  void finish_at_end(Sample& s, std::int32_t token, std::int32_t n_allowed);
  void emit(Sample& s, std::vector<std::int32_t> tokens, std::string text, std::vector<SampledToken> logprobs,
            FinishReason reason, std::string error = {}, std::int32_t n_allowed = -1, std::int32_t end_token = -1);
  void fail_request(Request& r, const std::string& error);
  // What a row's tokens add to its sample in one step, emitted as one event.
  struct RowOutput {
    std::vector<std::int32_t> added;  // added[0] sampled (or verified), the rest forced
    std::vector<SampledToken> logprobs;
    std::string text;
    FinishReason reason = FinishReason::none;
    std::int32_t n_allowed = -1;  // tokens the mask allowed when added[0] was sampled (-1: no grammar)
  };
  bool push_token(Sample& s, std::int32_t token, RowOutput& out);
  bool take_sampled(Sample& s, SampledToken sampled, RowOutput& out, bool& ended);
  // n_known: leading tokens of out.added the scheduler has already (a kept draft token).
  void close_row(Sample& s, RowOutput& out, bool going, std::size_t n_known = 0);
  void count_generated(std::size_t n_tokens, std::int32_t n_forced);
  void handle_row(Sample& s, std::span<float> logits, std::span<const std::uint32_t> mask);
  // The step's rows sampled from the logits in host memory.
  void sample_on_host(const detail::StepRows& rows, std::span<float> logits);
  // The mask plain row `row` samples under: its grammar's, ignore_eos's ban of the end-of-sequence ids, or
  // none; and a drafted row's: one per position (a grammar) or the one ban for every position.
  std::span<const std::uint32_t> plain_mask(const Sample& s, const detail::StepRows& rows, std::size_t row) const;
  std::span<const std::uint32_t> drafted_masks(const Sample& s, const detail::StepRows& rows,
                                               const detail::DraftedRow& d) const;
  // Device sampling (EngineOptions::device_sampling): whether a row can be sampled where its logits are,
  // and the step's rows sampled there (Backend::sample_rows; a drafted row's every verified position),
  // each at its own sampler's draw.
  bool device_samples(const Sample& s) const;
  void sample_on_device(const detail::StepRows& rows);
  void row_failed(Sample& s, const std::string& error);
  // Speculative decoding: drafts for the decoding rows before the step is scheduled, and a drafted row's
  // verification, position by position under its masks, with the tokens `sample_position` gives.
  void propose_drafts();
  void verify_row(Sample& s, std::int32_t first_position, std::span<const std::uint32_t> masks,
                  const detail::PositionSampler& sample_position);
  void fork_samples(Request& r);
  void drop_finished();
  void publish_stats();
  Drafter* drafter_for(DraftMode mode) const {
    switch (mode) {
      case DraftMode::ngram: return ngram_drafter.get();
      case DraftMode::draft: return draft_model_drafter.get();
      case DraftMode::custom: return custom_drafter.get();
      case DraftMode::off: return nullptr;
    }
    return nullptr;
  }
  bool is_eos(std::int32_t token) const {
    return std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
  }
};

}  // namespace pie
