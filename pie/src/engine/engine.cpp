// The engine: submit() validates and compiles on the caller's thread; one loop thread owns the KV cache,
// the scheduler and the runner, and runs steps: schedule -> (forward pass || grammar masks) -> sample,
// accept, append forced tokens, detokenize, stop checks -> events.
#include "pie/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "grammar_cache.h"
#include "pie/device_sampling.h"
#include "pie/kv_cache.h"
#include "pie/runner.h"
#include "pie/scheduler.h"
#include "pse/matcher.h"
#include "pse/thread_pool.h"
#include "tensor/thread_pool.h"
#include "request_check.h"
#include "engine/lora_registry.h"
#include "request_stream.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/memory_pool.h"

namespace pie {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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

// The longest text token of `vocab` whose bytes start `text`, or -1.
std::int32_t longest_prefix_token(const pse::Vocabulary& vocab, std::string_view text) {
  return vocab.longest_text_prefix(text).value_or(-1);
}

// The length of the longest prefix of text[from..] that ends on a whole UTF-8 character (the forced text
// may stop inside one).
std::size_t whole_characters_end(const std::string& text, std::size_t from) {
  std::size_t end = text.size();
  std::size_t start = end;
  while (start > from && (static_cast<unsigned char>(text[start - 1]) & 0xC0) == 0x80) --start;
  if (start > from) {
    const auto lead = static_cast<unsigned char>(text[start - 1]);
    const std::size_t need = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
    if (end - (start - 1) < need) end = start - 1;
  }
  return end;
}

// Tokens that spell a prefix of `text`: the tokenizer's own tokenization as far as its tokens spell the
// text byte for byte (SentencePiece's dummy prefix, for one, does not), then the longest vocabulary
// token at each position. The tokenizer sees whole characters only: bytes that finish a character the
// last token began, and a character the text leaves unfinished, are spelled by the longest tokens.
std::vector<std::int32_t> spell(const tokenizers::Tokenizer& tokenizer, const pse::Vocabulary& vocab,
                                const std::string& text) {
  std::vector<std::int32_t> out;
  std::size_t pos = 0;
  while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) {
    const std::int32_t id = longest_prefix_token(vocab, std::string_view(text).substr(pos, 1));
    if (id < 0) return out;
    out.push_back(id);
    pos += 1;
  }
  const std::size_t end = whole_characters_end(text, pos);
  std::vector<std::int32_t> encoded;
  try {
    encoded = tokenizer.encode(text.substr(pos, end - pos));
  } catch (const std::exception&) {
    encoded.clear();  // not valid UTF-8 inside (a grammar may force any bytes): the longest tokens below
  }
  for (const std::int32_t id : encoded) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab.n_tokens() || vocab.is_special(id)) break;
    const std::string& bytes = vocab.token_bytes(id);
    if (bytes.empty() || text.compare(pos, bytes.size(), bytes) != 0) break;
    out.push_back(id);
    pos += bytes.size();
  }
  while (pos < text.size()) {
    const std::int32_t id = longest_prefix_token(vocab, std::string_view(text).substr(pos));
    if (id < 0) break;
    out.push_back(id);
    pos += vocab.token_bytes(id).size();
  }
  return out;
}

// The first token of the latest span among the last tokens of `tokens` that spells exactly `text`, or -1:
// how the model spelled that text before, where the grammar forced it and jump-forward left its last
// token to the model (a JSON key's `":"`, which the model may spell `":` then `"`).
std::int32_t earlier_spelling(std::span<const std::int32_t> tokens, const pse::Vocabulary& vocab,
                              const std::string& text) {
  constexpr std::size_t kWindow = 1024;
  const std::size_t n = tokens.size(), from = n > kWindow ? n - kWindow : 0;
  const auto is_text = [&](std::int32_t t) {
    return t >= 0 && static_cast<std::size_t>(t) < vocab.n_tokens() && !vocab.is_special(t);
  };
  for (std::size_t j = n; j-- > from;) {
    std::size_t pos = 0;
    for (std::size_t t = j; t < n && pos < text.size() && is_text(tokens[t]); ++t) {
      const std::string& bytes = vocab.token_bytes(tokens[t]);
      if (bytes.empty() || bytes.size() > text.size() - pos || text.compare(pos, bytes.size(), bytes) != 0) break;
      pos += bytes.size();
    }
    if (pos == text.size() && !text.empty()) return tokens[j];
  }
  return -1;
}

// The tokens a mask allows among the model's n_vocab rows.
std::int32_t count_allowed(std::span<const std::uint32_t> mask, std::int32_t n_vocab) {
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

// Prompt tokens a prompt_logprobs sequence computes per step: each asks for a row of logits (n_vocab
// floats), so this bounds the step's logits to a few tens of megabytes whatever the batch size.
constexpr std::int32_t kPromptLogprobsChunk = 64;

// The KV pool's pages on CUDA: what `fraction` of the GPU's memory leaves once the weights are resident
// (free memory now, the pool's cached blocks counted free, less the (1 - fraction) share kept back for
// activations and everything else). Throws pie::Error, with the figures, when it holds no full context.
std::int64_t gpu_kv_pages(double fraction, std::size_t page_bytes, std::int64_t context_pages) {
  const tensor::cuda::MemoryInfo mem = tensor::cuda::memory_info();
  const double free =
      static_cast<double>(mem.free) + static_cast<double>(tensor::cuda::MemoryPool::global().bytes_cached());
  const double budget = free - (1.0 - fraction) * static_cast<double>(mem.total);
  const std::int64_t n_pages = budget > 0 ? static_cast<std::int64_t>(budget / static_cast<double>(page_bytes)) : 0;
  if (n_pages < context_pages + 1) {
    throw Error(fmt::format("[engine] gpu_memory {}: {:.2f} GiB of the GPU's {:.2f} GiB are free after the weights, "
                            "which leaves {:.2f} GiB for the KV pool; one context needs {:.2f} GiB ({} pages of {} "
                            "bytes)",
                            fraction, free / (1 << 30), static_cast<double>(mem.total) / (1 << 30),
                            std::max(budget, 0.0) / (1 << 30),
                            static_cast<double>(context_pages + 1) * static_cast<double>(page_bytes) / (1 << 30),
                            context_pages + 1, page_bytes));
  }
  // At most 2^20 pages (16M tokens): a small model's pages are small, and the host's page tables grow with
  // their count.
  return std::min<std::int64_t>(n_pages, std::int64_t{1} << 20);
}

}  // namespace

struct Engine::Impl {
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
  std::unique_ptr<KvCachePages> pages;
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
  struct RowOutput;
  bool push_token(Sample& s, std::int32_t token, RowOutput& out);
  bool take_sampled(Sample& s, SampledToken sampled, RowOutput& out, bool& ended);
  // n_known: leading tokens of out.added the scheduler has already (a kept draft token).
  void close_row(Sample& s, RowOutput& out, bool going, std::size_t n_known = 0);
  void count_generated(std::size_t n_tokens, std::int32_t n_forced);
  void handle_row(Sample& s, std::span<float> logits, std::span<const std::uint32_t> mask);
  // Device sampling (EngineOptions::device_sampling): whether a row can be sampled where its logits are,
  // and the step's rows sampled there (Backend::sample_rows), each with its own sampler's draw.
  bool device_samples(const Sample& s) const;
  void sample_rows_on_device(std::span<Sample* const> row_samples, std::span<const std::size_t> sample_logits,
                             std::span<const std::uint32_t> masks, std::span<const std::string> mask_errors);
  void row_failed(Sample& s, const std::string& error);
  // Speculative decoding: drafts for the decoding rows before the step is scheduled, and a drafted row's
  // verification from its logits (one row per position) and masks.
  void propose_drafts();
  void verify_row(Sample& s, std::int32_t first_position, std::span<float> logits,
                  std::span<const std::uint32_t> masks);
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

Engine::Impl::Impl(std::shared_ptr<const Model> m, EngineOptions o) : model(std::move(m)), options(o) {
  if (!model) throw Error("[engine] no model");
  if (!model->tokenizer) throw ModelError("[engine] model '" + model->name + "' has no tokenizer");
  auto positive = [](const char* name, auto value) {
    if (value < 1) throw Error(fmt::format("[engine] {} must be at least 1, got {}", name, value));
  };
  positive("max_running", options.max_running);
  positive("max_batch_tokens", options.max_batch_tokens);
  positive("max_queued", options.max_queued);
  positive("grammar_cache", options.grammar_cache);
  if (options.grammar_cache_bytes < 0) {
    throw Error(fmt::format("[engine] grammar_cache_bytes must be >= 0, got {}", options.grammar_cache_bytes));
  }
  if (options.n_threads < 0) throw Error(fmt::format("[engine] n_threads must be >= 0, got {}", options.n_threads));
  if (options.context_length < 0) {
    throw Error(fmt::format("[engine] context_length must be >= 0, got {}", options.context_length));
  }
  if (options.kv_cache_bytes < 0) {
    throw Error(fmt::format("[engine] kv_cache_bytes must be >= 0, got {}", options.kv_cache_bytes));
  }
  if (!(options.grammar_compile_ms > 0)) {
    throw Error(fmt::format("[engine] grammar_compile_ms must be > 0, got {}", options.grammar_compile_ms));
  }
  if (options.kv_dtype != tensor::DType::f32 && options.kv_dtype != tensor::DType::f16) {
    throw Error("[engine] kv_dtype must be f32 or f16");
  }
  options.speculative.validate();
  if (!(options.gpu_memory > 0.0 && options.gpu_memory <= 1.0)) {
    throw Error(fmt::format("[engine] gpu_memory must be a fraction in (0, 1], got {}", options.gpu_memory));
  }
  if (options.speculative_max_batch < 0) {
    throw Error(fmt::format("[engine] speculative_max_batch must be >= 0, got {}", options.speculative_max_batch));
  }
  n_vocab = model->config.n_vocab;
  const std::int32_t trained = model->config.context_length > 0 ? model->config.context_length : 8192;
  context_length = options.context_length > 0 ? options.context_length : std::min(trained, 8192);
  options.context_length = context_length;

  // Masks fill on their own threads while the backend runs the forward pass on its own.
  const unsigned hw = std::max(2u, std::thread::hardware_concurrency());
  mask_pool = std::make_unique<pse::ThreadPool>(std::clamp<std::size_t>(hw / 4, 2, 8));
  device = choose_device(options.device);
  if (device.device == tensor::Device::cuda && options.kv_dtype == tensor::DType::f32) {
    options.kv_dtype = tensor::DType::f16;  // the CUDA backend's KV pages are f16
  }
  std::unique_ptr<Backend> backend;
  if (options.draft_model && device.device == tensor::Device::cpu) {
    // The draft model's passes and the target's alternate: one pool of threads serves both.
    cpu_pool = std::make_unique<tensor::ThreadPool>(options.n_threads);
    backend = make_cpu_backend(cpu_pool.get());
  } else {
    backend = make_backend(device.device, options.n_threads, {.batch_invariant = options.batch_invariant});
  }
  if (options.wrap_backend) backend = options.wrap_backend(std::move(backend));
  runner = std::make_unique<ModelRunner>(model, with_injected_faults(std::move(backend)));

  const char* device_sampling_env = std::getenv("ORCHARD_DEVICE_SAMPLING");
  device_sampling = options.device_sampling && runner->backend().samples_on_device() &&
                    !(device_sampling_env != nullptr && std::string_view(device_sampling_env) == "0");

  const std::size_t page_bytes = runner->kv_config(1, options.kv_dtype).page_bytes();
  const std::int64_t context_pages = (context_length + kKvPageSize - 1) / kKvPageSize;
  std::int64_t n_pages;
  if (options.kv_cache_bytes > 0) {
    n_pages = options.kv_cache_bytes / static_cast<std::int64_t>(page_bytes);
    if (n_pages < context_pages + 1) {
      throw Error(fmt::format("[engine] kv_cache_bytes {} holds {} pages of {} bytes; one context of {} tokens "
                              "needs {}",
                              options.kv_cache_bytes, n_pages, page_bytes, context_length, context_pages + 1));
    }
  } else if (device.device == tensor::Device::cuda && !options.draft_model) {
    // (With a draft model, whose weights and KV pages come later, the CPU's sizing below.)
    n_pages = gpu_kv_pages(options.gpu_memory, page_bytes, context_pages);
    options.kv_cache_bytes = n_pages * static_cast<std::int64_t>(page_bytes);
  } else {
    const std::int64_t cap = (std::int64_t{4} << 30) / static_cast<std::int64_t>(page_bytes);
    n_pages = std::min<std::int64_t>(options.max_running * context_pages + 1, cap);
    if (n_pages < context_pages + 1) {
      // A huge model: shrink the context to what 4 GiB holds rather than fail.
      context_length = static_cast<std::int32_t>((n_pages - 1) * kKvPageSize);
      options.context_length = context_length;
    }
    options.kv_cache_bytes = n_pages * static_cast<std::int64_t>(page_bytes);
  }
  if (n_pages > std::numeric_limits<std::int32_t>::max()) n_pages = std::numeric_limits<std::int32_t>::max();
  KvCacheConfig kv_config = runner->kv_config(static_cast<std::int32_t>(n_pages), options.kv_dtype);
  kv_config.prefix_caching = options.prefix_caching;
  kv_config.resident = options.kv_resident;
  kv = std::make_unique<KvCache>(runner->make_kv_storage(kv_config));
  pages = std::make_unique<KvCachePages>(*kv);
  scheduler = std::make_unique<Scheduler>(
      SchedulerConfig{options.max_running, std::max(options.max_batch_tokens, options.max_running)}, *pages);

  pse::CompileOptions compile;
  compile.max_compile_ms = options.grammar_compile_ms;
  compile.tables = options.grammar_tables;
  lora_registry = std::make_unique<detail::LoraRegistry>(model, options.lora_memory_bytes);
  grammars = std::make_unique<detail::GrammarCache>(model->tokenizer, static_cast<std::size_t>(n_vocab), compile,
                                                    static_cast<std::size_t>(options.grammar_cache),
                                                    static_cast<std::size_t>(options.grammar_cache_bytes));

  const tokenizers::SpecialTokens& st = model->tokenizer->special_tokens();
  eos_ids.assign(st.end_of_generation.begin(), st.end_of_generation.end());
  if (st.eos && !is_eos(*st.eos)) eos_ids.push_back(*st.eos);
  no_eos_mask.assign((static_cast<std::size_t>(n_vocab) + 31) / 32, 0xFFFFFFFFu);
  for (std::int32_t id : eos_ids) {
    if (id >= 0 && id < n_vocab) no_eos_mask[static_cast<std::size_t>(id) / 32] &= ~(1u << (id % 32));
  }
  stats.kv_pages = static_cast<std::int32_t>(n_pages);
  stats.kv_pages_free = static_cast<std::int32_t>(n_pages);

  ngram_drafter = make_prompt_lookup_drafter(model->tokenizer.get());
  custom_drafter = options.custom_drafter;
  if (options.draft_model) {
    DraftModelOptions d;
    d.device = device.device;
    d.pool = cpu_pool.get();
    d.n_pages = static_cast<std::int32_t>(n_pages);
    d.kv_dtype = options.kv_dtype;
    d.max_batch_tokens = options.max_batch_tokens;
    d.memory_bytes = options.draft_memory_bytes;
    draft_model_drafter = std::make_unique<DraftModelDrafter>(options.draft_model, *model, d);
  } else if (options.draft_memory_bytes < 0) {
    throw Error(fmt::format("[engine] draft_memory_bytes must be >= 0, got {}", options.draft_memory_bytes));
  }
  if (options.speculative.mode != DraftMode::off && !drafter_for(options.speculative.mode)) {
    throw Error(fmt::format("[engine] speculative mode \"{}\" needs {}", draft_mode_name(options.speculative.mode),
                            options.speculative.mode == DraftMode::draft ? "a draft model (draft_model)"
                                                                         : "a drafter (custom_drafter)"));
  }
}

void Engine::Impl::publish_stats() {
  const KvCacheStats k = kv->stats();
  std::uint64_t running = 0, queued = 0;
  for (const auto& r : active) (r->admitted ? running : queued) += 1;
  grammars->trim();  // cached grammars grow while their tables are built in the background
  const detail::GrammarCacheStats g = grammars->stats();
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats.requests_running = running;
  stats.requests_queued = queued;
  stats.kv_pages = k.n_pages;
  stats.kv_pages_used = k.n_used;
  stats.kv_pages_cached = k.n_cached;
  stats.kv_pages_free = k.n_free;
  stats.prefix_lookup_tokens = k.prefix_lookup_tokens;
  stats.prefix_hit_tokens = k.prefix_hit_tokens;
  stats.grammar_compiles = g.compiles;
  stats.grammar_cache_hits = g.hits;
  stats.grammar_cache_bytes = g.cached_bytes;
  stats.grammar_compile_seconds = g.compile_seconds;
  stats.preemptions = scheduler->n_preemptions();
}

void Engine::Impl::emit(Sample& s, std::vector<std::int32_t> tokens, std::string text,
                        std::vector<SampledToken> logprobs, FinishReason reason, std::string error,
                        std::int32_t n_allowed, std::int32_t end_token) {
  Event e;
  e.index = s.index;
  e.tokens = std::move(tokens);
  e.n_allowed = n_allowed;
  e.end_token = end_token;
  e.text = std::move(text);
  e.logprobs = std::move(logprobs);
  e.finish = reason;
  e.error = std::move(error);
  e.time = Clock::now();
  s.request->channel->push(std::move(e));
}

// Ends a sample: frees its sequence, flushes held-back text (unless a stop string ended it), and when it
// was the request's last, sends the done event.
void Engine::Impl::finish(Sample& s, FinishReason reason, std::string error) {
  if (s.finished) return;
  s.finished = true;
  if (Drafter* d = drafter_for(s.request->speculative.mode)) d->release(s.draft_key);
  if (s.seq) {
    by_seq.erase(*s.seq);
    scheduler->remove(*s.seq);
    s.seq.reset();
  }
  std::string tail;
  if (reason != FinishReason::error && reason != FinishReason::cancelled) {
    if (s.detok) {
      std::string rest = s.detok->finish();
      if (s.stops && !rest.empty()) {
        auto r = s.stops->push(rest);
        tail += r.text;
      } else {
        tail += rest;
      }
    }
    if (s.stops && !s.hit_stop_string) tail += s.stops->flush();
  }
  Request& r = *s.request;
  if (reason == FinishReason::error) r.failed = true;
  emit(s, {}, std::move(tail), {}, reason, std::move(error), s.end_allowed, s.end_token);
  r.usage.completion_tokens += static_cast<std::int32_t>(s.output.size());
  if (++r.n_finished == static_cast<std::int32_t>(r.samples.size())) {
    if (!r.admitted) {
      r.admitted = true;  // never will be: it leaves the queue
      n_unadmitted.fetch_sub(1);
    }
    Event done;
    done.index = 0;
    done.done = true;
    done.usage = r.usage;
    done.time = Clock::now();
    r.channel->push(std::move(done));
    std::lock_guard<std::mutex> lock(stats_mutex);
    if (r.failed) ++stats.requests_failed;
  }
}

void Engine::Impl::finish_at_end(Sample& s, std::int32_t token, std::int32_t n_allowed) {
  s.end_token = token;
  s.end_allowed = n_allowed;
  finish(s, FinishReason::stop);
}

void Engine::Impl::fail_request(Request& r, const std::string& error) {
  for (Sample& s : r.samples) finish(s, FinishReason::error, error);
}

void Engine::Impl::take_incoming(std::deque<std::unique_ptr<Request>>& batch) {
  for (auto& r : batch) {
    Sample& s0 = r->samples[0];
    // Prompt logprobs need the logits of every prompt position: no cached prefix, bounded chunks.
    SequenceOptions options;
    if (r->req.prompt_logprobs) options = {.reuse_prefix = false, .max_chunk = kPromptLogprobsChunk};
    options.prefix_namespace = r->loras.prefix_namespace;
    s0.seq = scheduler->add(r->req.prompt, options);
    by_seq[*s0.seq] = &s0;
    active.push_back(std::move(r));
  }
  batch.clear();
}

void Engine::Impl::process_cancellations() {
  for (auto& r : active) {
    if (r->n_finished == static_cast<std::int32_t>(r->samples.size())) continue;
    if (cancel_all || r->channel->cancelled()) {
      for (Sample& s : r->samples) finish(s, FinishReason::cancelled);
    }
  }
}

void Engine::Impl::drop_finished() {
  std::erase_if(active, [](const std::unique_ptr<Request>& r) {
    return r->n_finished == static_cast<std::int32_t>(r->samples.size());
  });
}

// n > 1: the other samples start from the prompt's K/V (pages shared) once its prefill is done.
void Engine::Impl::fork_samples(Request& r) {
  r.forked = true;
  Sample& s0 = r.samples[0];
  for (std::size_t i = 1; i < r.samples.size(); ++i) {
    Sample& s = r.samples[i];
    if (s.finished) continue;
    if (s0.matcher) s.matcher = s0.matcher->fork();
    s.seq = scheduler->fork(*s0.seq);
    by_seq[*s.seq] = &s;
  }
}

// What a row's tokens add to its sample in one step, emitted as one event.
struct Engine::Impl::RowOutput {
  std::vector<std::int32_t> added;  // added[0] sampled (or verified), the rest forced
  std::vector<SampledToken> logprobs;
  std::string text;
  FinishReason reason = FinishReason::none;
  std::int32_t n_allowed = -1;  // tokens the mask allowed when added[0] was sampled (-1: no grammar)
};

// Appends one token: grammar, detokenizer, stop strings, limits. Returns false when the sample ended (with
// out.reason set).
bool Engine::Impl::push_token(Sample& s, std::int32_t token, RowOutput& out) {
  const GenerateRequest& q = s.request->req;
  const std::int32_t limit = std::min(q.max_tokens, context_length - static_cast<std::int32_t>(q.prompt.size()));
  s.output.push_back(token);
  out.added.push_back(token);
  std::string piece = s.detok->push(token);
  if (s.stops) {
    auto res = s.stops->push(piece);
    out.text += res.text;
    if (res.stopped) {
      s.hit_stop_string = true;
      out.reason = FinishReason::stop;
      return false;
    }
  } else {
    out.text += piece;
  }
  if (s.matcher && s.matcher->must_stop()) {
    out.reason = FinishReason::stop;
    return false;
  }
  if (static_cast<std::int32_t>(s.output.size()) >= limit) {
    out.reason = FinishReason::length;
    return false;
  }
  return true;
}

// A sampled (or verified) token: the end of the sample when it is an end-of-sequence token the grammar
// allows (then the sample is finished here, with what `out` holds), else accepted by the grammar and
// pushed. Returns whether the sample goes on; `ended` tells that it was finished here.
bool Engine::Impl::take_sampled(Sample& s, SampledToken sampled, RowOutput& out, bool& ended) {
  const GenerateRequest& q = s.request->req;
  const std::int32_t token = sampled.token;
  ended = false;
  if (is_eos(token) && (s.matcher ? s.matcher->can_stop() : !q.ignore_eos)) {
    // The end-of-sequence token is not part of the output.
    if (q.sampling.logprobs) out.logprobs.push_back(std::move(sampled));
    count_generated(out.added.size(), 0);
    if (!out.added.empty() || !out.logprobs.empty() || !out.text.empty()) {
      emit(s, std::move(out.added), std::move(out.text), std::move(out.logprobs), FinishReason::none);
    }
    finish_at_end(s, token, out.n_allowed);
    ended = true;
    return false;
  }
  if (s.matcher && !s.matcher->accept_token(token)) {
    finish(s, FinishReason::error,
           fmt::format("the grammar rejected token {} that its own mask allowed (a dead end)", token));
    ended = true;
    return false;
  }
  if (q.sampling.logprobs) out.logprobs.push_back(std::move(sampled));
  return push_token(s, token, out);
}

// After a row's sampled tokens: the forced continuation (jump-forward: tokens that lie entirely inside the
// text the grammar forces are appended without sampling; the last one is kept back for sampling when the
// output can still go on, since it could merge with what follows), the context limit, the scheduler, the
// event, and the end of the sample when it ended.
void Engine::Impl::close_row(Sample& s, RowOutput& out, bool going, std::size_t n_known) {
  const auto prompt_len = static_cast<std::int32_t>(s.request->req.prompt.size());
  const std::size_t sampled = out.added.size();
  std::int32_t n_forced = 0;
  if (going && s.matcher) {
    try {
      const std::string forced = s.matcher->forced_continuation();
      if (!forced.empty()) {
        const std::vector<std::int32_t> ids = spell(*model->tokenizer, s.matcher->grammar().vocabulary(), forced);
        for (std::size_t i = 0; i < ids.size() && going; ++i) {
          if (!s.matcher->accept_token(ids[i])) break;
          if (i + 1 == ids.size() && !s.matcher->must_stop()) {
            s.matcher->rollback(1);
            break;
          }
          ++n_forced;
          going = push_token(s, ids[i], out);
        }
      }
    } catch (const std::exception& e) {
      finish(s, FinishReason::error, fmt::format("forced continuation failed: {}", e.what()));
      return;
    }
  }
  count_generated(sampled + static_cast<std::size_t>(n_forced), n_forced);
  if (going && prompt_len + static_cast<std::int32_t>(s.output.size()) >= context_length) {
    out.reason = FinishReason::length;
    going = false;
  }
  if (going && out.added.size() > n_known) {
    scheduler->append(*s.seq, std::span<const std::int32_t>(out.added).subspan(n_known));
  } else if (going) {
    // A kept draft token before forced text that gave no token of its own (the one it spells is kept back
    // for sampling): its K/V is computed, but the next token needs its logits, so it is computed again.
    const std::int32_t last = s.output.back();
    scheduler->truncate(*s.seq, static_cast<std::int32_t>(scheduler->tokens(*s.seq).size()) - 1);
    scheduler->append(*s.seq, std::span<const std::int32_t>(&last, 1));
  }
  emit(s, std::move(out.added), std::move(out.text), std::move(out.logprobs), FinishReason::none, {},
       out.n_allowed);
  if (!going) finish(s, out.reason);
}

void Engine::Impl::count_generated(std::size_t n_tokens, std::int32_t n_forced) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats.generated_tokens += n_tokens;
  stats.forced_tokens += static_cast<std::uint64_t>(n_forced);
}

// Samples the sample's next token from its logits row, then appends the forced continuation, and emits.
void Engine::Impl::handle_row(Sample& s, std::span<float> logits, std::span<const std::uint32_t> mask) {
  const GenerateRequest& q = s.request->req;
  SampledToken sampled;
  try {
    sampled = s.sampler->sample(logits, mask, q.prompt, s.output);
  } catch (const std::exception& e) {
    finish(s, FinishReason::error, fmt::format("sampling failed: {}", e.what()));
    return;
  }
  RowOutput out;
  out.n_allowed = s.matcher ? count_allowed(mask, n_vocab) : -1;
  bool ended = false;
  const bool going = take_sampled(s, std::move(sampled), out, ended);
  if (!ended) close_row(s, out, going);
}

bool Engine::Impl::device_samples(const Sample& s) const {
  const Request& r = *s.request;
  if (!s.sampler || !device_sampling_covers(s.sampler->params(), n_vocab)) return false;
  // Steps that do more than sample this row stay on the host: the prompt's logprobs go out before its
  // first token, and a first row with n > 1 forks the other samples from its logits.
  if (r.req.prompt_logprobs && !r.prompt_logprobs_sent) return false;
  return !(s.index == 0 && !r.forked && r.samples.size() > 1);
}

void Engine::Impl::row_failed(Sample& s, const std::string& error) {
  // Before the fork, the prompt's sequence stands for every sample.
  if (s.request->forked) {
    finish(s, FinishReason::error, error);
  } else {
    fail_request(*s.request, error);
  }
}

void Engine::Impl::sample_rows_on_device(std::span<Sample* const> row_samples,
                                         std::span<const std::size_t> sample_logits,
                                         std::span<const std::uint32_t> masks,
                                         std::span<const std::string> mask_errors) {
  const std::size_t words = (static_cast<std::size_t>(n_vocab) + 31) / 32;
  std::vector<DeviceSampleRow> rows;
  std::vector<Sample*> samples;
  std::vector<std::span<const std::uint32_t>> row_masks;
  std::vector<std::vector<std::int32_t>> penalized(row_samples.size());
  std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>> counts(row_samples.size());
  for (std::size_t row = 0; row < row_samples.size(); ++row) {
    Sample& s = *row_samples[row];
    if (s.finished) continue;
    if (!mask_errors[row].empty()) {
      row_failed(s, "grammar mask failed: " + mask_errors[row]);
      continue;
    }
    std::span<const std::uint32_t> mask;
    if (s.matcher) {
      mask = masks.subspan(row * words, words);
    } else if (s.request->req.ignore_eos) {
      mask = no_eos_mask;
    }
    const SamplingParams& params = s.sampler->params();
    try {
      // What Sampler::sample checks before its draw, in its order.
      penalty_inputs(params, s.request->req.prompt, s.output, n_vocab, penalized[row], counts[row]);
      if (mask_allows_nothing(mask, n_vocab)) throw RequestError("[sampler] the constraint's mask allows no token");
    } catch (const std::exception& e) {
      finish(s, FinishReason::error, fmt::format("sampling failed: {}", e.what()));
      continue;
    }
    DeviceSampleRow d;
    d.logits_row = static_cast<std::int32_t>(sample_logits[row]);
    d.params = &params;
    d.mask = mask;
    d.penalized = penalized[row];
    d.counts = counts[row];
    d.u = s.sampler->next_draw();
    rows.push_back(d);
    samples.push_back(&s);
    row_masks.push_back(mask);
  }
  std::vector<DeviceSampleResult> results(rows.size());
  try {
    runner->backend().sample_rows(rows, results);
  } catch (const std::exception& e) {
    for (Sample* s : samples) {
      if (!s->finished) row_failed(*s, fmt::format("sampling failed: {}", e.what()));
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats.device_sampled_rows += rows.size();
  }
  for (std::size_t i = 0; i < samples.size(); ++i) {
    Sample& s = *samples[i];
    if (s.finished) continue;  // its request failed with an earlier row
    try {
      throw_unless_sampled(results[i]);
    } catch (const std::exception& e) {
      finish(s, FinishReason::error, fmt::format("sampling failed: {}", e.what()));
      continue;
    }
    RowOutput out;
    out.n_allowed = s.matcher ? count_allowed(row_masks[i], n_vocab) : -1;
    bool ended = false;
    const bool going = take_sampled(s, std::move(results[i].sampled), out, ended);
    if (!ended) close_row(s, out, going);
  }
}

bool Engine::Impl::step() {
  propose_drafts();
  Step plan = scheduler->schedule();
  // A preempted sequence's draft was dropped; a short budget may have cut one.
  for (auto& [id, sample] : by_seq) {
    if (sample->draft.empty()) continue;
    const std::int32_t left = scheduler->contains(id) ? scheduler->n_draft(id) : 0;  // failed: removed
    sample->draft.resize(static_cast<std::size_t>(left));
    sample->draft_kinds.resize(static_cast<std::size_t>(left));
  }
  for (SequenceId id : plan.failed) {
    auto it = by_seq.find(id);
    if (it == by_seq.end()) continue;
    Sample& s = *it->second;
    by_seq.erase(it);
    s.seq.reset();  // already removed by the scheduler
    const std::string why =
        fmt::format("the sequence needs more KV cache than the engine has ({} pages)", kv->config().n_pages);
    // Before the fork, the prompt's sequence stands for every sample.
    if (s.request->forked) {
      finish(s, FinishReason::error, why);
    } else {
      fail_request(*s.request, why);
    }
  }
  for (const auto& [id, covered] : plan.admitted) {
    auto it = by_seq.find(id);
    if (it == by_seq.end()) continue;
    Request& r = *it->second->request;
    if (!r.admitted) {
      r.admitted = true;
      r.usage.cached_prompt_tokens = covered;
      n_unadmitted.fetch_sub(1);
    }
  }
  if (plan.empty()) return false;

  // The batch. Logit rows, in token order: each chunk's prompt rows (prompt_logprobs), then its sampling
  // row (row_samples[i]'s logits are row sample_logits[i]).
  std::vector<std::int32_t> tokens, qo_indptr{0}, seq_lens, page_indptr{0}, page_indices, logit_rows;
  std::vector<Sample*> row_samples;
  std::vector<std::size_t> sample_logits;
  std::vector<PromptRow> prompt_rows;
  std::vector<DraftedRow> drafted;
  std::vector<LoraGroup> lora_groups;  // rows grouped by (adapter, scale)
  std::size_t n_draft_masks = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    const auto seq_tokens = scheduler->tokens(c.id);
    const auto chunk_first = static_cast<std::int32_t>(tokens.size());
    for (const ScaledLora& l : by_seq.at(c.id)->request->loras.adapters) {
      auto g = std::find_if(lora_groups.begin(), lora_groups.end(), [&](const LoraGroup& x) {
        return x.adapter == l.adapter.get() && x.scale == l.scale;
      });
      if (g == lora_groups.end()) g = lora_groups.insert(lora_groups.end(), LoraGroup{l.adapter.get(), l.scale, {}, {}});
      for (std::int32_t i = 0; i < c.n_tokens; ++i) g->rows.push_back(chunk_first + i);
    }
    tokens.insert(tokens.end(), seq_tokens.begin() + c.begin, seq_tokens.begin() + c.begin + c.n_tokens);
    qo_indptr.push_back(static_cast<std::int32_t>(tokens.size()));
    const std::int32_t len = c.begin + c.n_tokens;
    seq_lens.push_back(len);
    const auto seq_pages = kv->pages(c.kv_seq);
    const std::size_t n_pages = static_cast<std::size_t>((len + kKvPageSize - 1) / kKvPageSize);
    page_indices.insert(page_indices.end(), seq_pages.begin(),
                        seq_pages.begin() + static_cast<std::ptrdiff_t>(std::min(n_pages, seq_pages.size())));
    page_indptr.push_back(static_cast<std::int32_t>(page_indices.size()));
    Sample* sample = by_seq.at(c.id);
    const Request& r = *sample->request;
    if (r.req.prompt_logprobs && !r.prompt_logprobs_sent) {
      // Positions before the prompt's last: the logits at p give the logprob of prompt token p + 1.
      const auto last = static_cast<std::int32_t>(r.req.prompt.size()) - 1;
      const auto first_index = static_cast<std::int32_t>(tokens.size()) - c.n_tokens;
      for (std::int32_t p = c.begin; p < std::min(c.begin + c.n_tokens, last); ++p) {
        prompt_rows.push_back({sample, p, logit_rows.size()});
        logit_rows.push_back(first_index + (p - c.begin));
      }
    }
    if (c.wants_logits && !sample->draft.empty()) {
      // A drafted row: the logits of its token and of each drafted token, one mask per position.
      const std::size_t n = sample->draft.size() + 1;
      const auto first = c.begin + c.n_tokens - static_cast<std::int32_t>(n);
      drafted.push_back({sample, first, logit_rows.size(), n, sample->matcher ? n_draft_masks : 0});
      if (sample->matcher) n_draft_masks += n;
      for (std::size_t i = 0; i < n; ++i) logit_rows.push_back(static_cast<std::int32_t>(tokens.size() - n + i));
    } else if (c.wants_logits) {
      sample_logits.push_back(logit_rows.size());
      logit_rows.push_back(static_cast<std::int32_t>(tokens.size()) - 1);
      row_samples.push_back(sample);
    }
  }
  ForwardBatch batch{tokens, qo_indptr, seq_lens, page_indptr, page_indices, logit_rows, lora_groups};

  // Masks of the constrained rows, filled while the forward pass runs.
  const std::size_t words = (static_cast<std::size_t>(n_vocab) + 31) / 32;
  step_masks.resize(row_samples.size() * words);
  std::span<std::uint32_t> masks(step_masks);
  std::vector<std::size_t> mask_rows;
  for (std::size_t i = 0; i < row_samples.size(); ++i) {
    if (row_samples[i]->matcher) mask_rows.push_back(i);
  }
  std::vector<std::string> mask_errors(row_samples.size());
  // A drafted row's masks: one per position, the matcher walked through the draft and back.
  step_draft_masks.resize(n_draft_masks * words);
  std::span<std::uint32_t> draft_masks(step_draft_masks);
  std::vector<std::size_t> drafted_masks;
  for (std::size_t i = 0; i < drafted.size(); ++i) {
    if (drafted[i].sample->matcher) drafted_masks.push_back(i);
  }
  std::vector<std::string> draft_mask_errors(drafted.size());
  // Every row sampled on the device: the logits stay there.
  const bool device_step = device_sampling && prompt_rows.empty() && drafted.empty() && !row_samples.empty() &&
                           std::all_of(row_samples.begin(), row_samples.end(),
                                       [&](const Sample* s) { return device_samples(*s); });
  step_logits.resize(logit_rows.size() * static_cast<std::size_t>(n_vocab));
  std::span<float> logits(step_logits);
  std::string forward_error;
  std::atomic<double> mask_time{0.0};
  bool begun = false;
  try {
    runner->begin(batch, *kv, logits, !device_step);
    begun = true;
  } catch (const std::exception& e) {
    forward_error = e.what();
  }
  mask_pool->parallel_for(mask_rows.size() + drafted_masks.size(), [&](std::size_t i) {
    const auto t0 = Clock::now();
    if (i >= mask_rows.size()) {
      const DraftedRow& d = drafted[drafted_masks[i - mask_rows.size()]];
      pse::Matcher& m = *d.sample->matcher;
      std::size_t walked = 0;
      try {
        for (std::size_t p = 0; p < d.n; ++p) {
          if (p > 0) {
            if (!m.accept_token(d.sample->draft[p - 1])) throw Error("a drafted token the grammar vetted was rejected");
            ++walked;
          }
          // A forced token is appended unverified: no mask needed for it.
          if (p + 1 < d.n && d.sample->draft_kinds[p] == DraftKind::forced) continue;
          m.fill_next_token_bitmask(draft_masks.subspan((d.first_mask + p) * words, words));
        }
      } catch (const std::exception& e) {
        draft_mask_errors[drafted_masks[i - mask_rows.size()]] = e.what();
      }
      if (walked > 0) m.rollback(static_cast<std::int32_t>(walked));
    } else {
      const std::size_t row = mask_rows[i];
      try {
        row_samples[row]->matcher->fill_next_token_bitmask(masks.subspan(row * words, words));
      } catch (const std::exception& e) {
        mask_errors[row] = e.what();
      }
    }
    double cur = mask_time.load();
    while (!mask_time.compare_exchange_weak(cur, cur + seconds_since(t0))) {
    }
  });
  double forward_time = 0;
  if (begun) {
    try {
      runner->wait();
      forward_time = runner->last_step_seconds();
      step_cost.record(static_cast<std::int32_t>(tokens.size()), forward_time,
                       static_cast<std::int32_t>(logit_rows.size()));
    } catch (const std::exception& e) {
      forward_error = e.what();
    }
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    ++stats.steps;
    stats.forward_seconds += forward_time;
    stats.mask_seconds += mask_time.load();
    for (const ScheduledChunk& c : plan.chunks) {
      // Prompt tokens computed (recomputation after a preemption counts again: it is work done).
      const auto n_prompt = static_cast<std::int32_t>(by_seq.at(c.id)->request->req.prompt.size());
      if (c.begin < n_prompt) stats.prompt_tokens += static_cast<std::uint64_t>(std::min(c.n_tokens, n_prompt - c.begin));
    }
  }
  if (!forward_error.empty()) {
    // Nothing was sampled; every request in the batch fails (the batch was inconsistent, or the device
    // faulted inside the step); the engine goes on with the next step, and the stats keep the fault.
    {
      std::lock_guard<std::mutex> lock(stats_mutex);
      ++stats.forward_failures;
      stats.last_forward_error = forward_error;
    }
    for (Sample* s : row_samples) fail_request(*s->request, "forward pass failed: " + forward_error);
    for (const DraftedRow& d : drafted) fail_request(*d.sample->request, "forward pass failed: " + forward_error);
    for (const ScheduledChunk& c : plan.chunks) {
      auto it = by_seq.find(c.id);
      if (it != by_seq.end()) fail_request(*it->second->request, "forward pass failed: " + forward_error);
    }
    return true;
  }
  scheduler->complete(plan);

  // Prompt logprobs from their rows (on the mask threads: a log-softmax over the vocabulary each).
  std::vector<std::string> prompt_errors(prompt_rows.size());
  mask_pool->parallel_for(prompt_rows.size(), [&](std::size_t i) {
    const PromptRow& pr = prompt_rows[i];
    Request& r = *pr.sample->request;
    const std::span<const float> row(logits.data() + pr.logits_row * static_cast<std::size_t>(n_vocab),
                                     static_cast<std::size_t>(n_vocab));
    try {
      r.prompt_logprobs[static_cast<std::size_t>(pr.position)] =
          token_logprob(row, r.req.prompt[static_cast<std::size_t>(pr.position) + 1], r.req.sampling.top_logprobs);
    } catch (const std::exception& e) {
      prompt_errors[i] = e.what();
    }
  });
  for (std::size_t i = 0; i < prompt_rows.size(); ++i) {
    Request& r = *prompt_rows[i].sample->request;
    if (!prompt_errors[i].empty() && !r.failed) fail_request(r, "prompt logprobs failed: " + prompt_errors[i]);
  }

  if (device_step) sample_rows_on_device(row_samples, sample_logits, masks, mask_errors);
  for (std::size_t row = 0; row < row_samples.size() && !device_step; ++row) {
    Sample& s = *row_samples[row];
    if (s.finished) continue;
    if (!mask_errors[row].empty()) {
      row_failed(s, "grammar mask failed: " + mask_errors[row]);
      continue;
    }
    std::span<float> row_logits(logits.data() + sample_logits[row] * static_cast<std::size_t>(n_vocab),
                                static_cast<std::size_t>(n_vocab));
    std::span<const std::uint32_t> mask;
    if (s.matcher) {
      mask = masks.subspan(row * words, words);
    } else if (s.request->req.ignore_eos) {
      mask = no_eos_mask;
    }
    Request& r = *s.request;
    if (r.req.prompt_logprobs && !r.prompt_logprobs_sent) {
      // The prompt is whole: its logprobs go out before the first token, and from now on the sequence
      // (and its forks) is scheduled as any other.
      r.prompt_logprobs_sent = true;
      scheduler->set_options(*s.seq, {});
      Event e;
      e.index = 0;
      e.prompt_logprobs = std::move(r.prompt_logprobs);
      e.time = Clock::now();
      r.channel->push(std::move(e));
    }
    if (s.index == 0 && !r.forked && r.samples.size() > 1) {
      // The prompt's logits serve every sample: each takes its own copy.
      fork_samples(r);
      for (std::size_t i = 1; i < r.samples.size(); ++i) {
        Sample& other = r.samples[i];
        if (other.finished || !other.seq || !scheduler->is_running(*other.seq)) continue;
        std::vector<float> copy(row_logits.begin(), row_logits.end());
        handle_row(other, copy, mask);
      }
    }
    handle_row(s, row_logits, mask);
  }

  for (std::size_t i = 0; i < drafted.size(); ++i) {
    const DraftedRow& d = drafted[i];
    Sample& s = *d.sample;
    if (s.finished) continue;
    if (!draft_mask_errors[i].empty()) {
      finish(s, FinishReason::error, "grammar mask failed: " + draft_mask_errors[i]);
      continue;
    }
    std::span<const std::uint32_t> row_masks;
    if (s.matcher) {
      row_masks = draft_masks.subspan(d.first_mask * words, d.n * words);
    } else if (s.request->req.ignore_eos) {
      row_masks = no_eos_mask;  // the same mask at every position
    }
    verify_row(s, d.first_position, logits.subspan(d.first_logits * static_cast<std::size_t>(n_vocab),
                                                   d.n * static_cast<std::size_t>(n_vocab)),
               row_masks);
  }
  return true;
}

void Engine::Impl::propose_drafts() {
  // Decoding rows (running, their tokens to compute being output tokens: the last one, or the forced ones
  // jump-forward appended) of requests that speculate, the tokens those rows compute, and how many samples
  // are live (decoding, prefilling, waiting, or not forked yet): the batch a draft joins, up to max_running.
  // Rows that are still prefilling decode in the next steps: counting only those decoding now would let a
  // large batch draft while it fills, at the cost of the compute-bound steps it is about to run.
  std::vector<Sample*> rows;
  std::int32_t n_step_tokens = 0, n_live = 0;
  for (auto& r : active) {
    for (Sample& s : r->samples) {
      if (!s.finished) ++n_live;
      if (s.finished || !s.seq || !scheduler->is_running(*s.seq) || !s.draft.empty() || s.output.empty()) continue;
      const auto n_tokens = static_cast<std::int32_t>(scheduler->tokens(*s.seq).size());
      const std::int32_t computed = scheduler->n_computed(*s.seq);
      if (n_tokens - computed < 1 || computed < static_cast<std::int32_t>(r->req.prompt.size())) continue;
      n_step_tokens += n_tokens - computed;
      if (r->speculative.mode != DraftMode::off) rows.push_back(&s);
    }
  }
  // Samples past max_running wait for a slot, not for this batch: it never grows past that.
  n_live = std::min(n_live, options.max_running);
  if (rows.empty() || n_live > options.speculative_max_batch) return;
  // A row's draft as it is built: the grammar's matcher walked through it (rolled back at the end).
  struct Plan {
    Sample* s = nullptr;
    std::int32_t room = 0;  // tokens the draft may hold (output and context limits)
    std::vector<std::int32_t> tokens;
    std::vector<DraftKind> kinds;
    std::int32_t walked = 0;
    std::vector<std::int32_t> context;  // the row's tokens and the draft so far, for the drafter
    std::int32_t ask = 0;               // guesses asked of the drafter
    bool cut = false;                   // the room ran out inside forced text (its tokens are dropped)
    bool full() const { return static_cast<std::int32_t>(tokens.size()) >= room; }
  };
  const auto is_text = [&](std::int32_t t) {
    return t >= 0 && t < n_vocab && !is_eos(t) && !model->tokenizer->is_special(t);
  };
  // The text the grammar forces after the draft so far, as decoding takes it: jump-forward's tokens (its
  // spelling but the last, which is kept back for sampling unless the grammar must stop after it), then the
  // token the model spelled that kept-back text with before (a draft to verify); again while text is
  // forced. Returns whether the drafter's guesses may follow (no text forced there).
  const auto extend_forced = [&](Plan& p) {
    pse::Matcher& m = *p.s->matcher;
    for (;;) {
      const std::string forced = m.forced_continuation();
      if (forced.empty()) return true;
      const std::vector<std::int32_t> ids = spell(*model->tokenizer, m.grammar().vocabulary(), forced);
      if (ids.empty()) return false;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (!m.accept_token(ids[i])) return false;  // decoding stops appending there too
        if (i + 1 == ids.size() && !m.must_stop()) {
          m.rollback(1);
          break;
        }
        if (p.full()) {
          m.rollback(1);
          p.cut = true;
          return false;
        }
        ++p.walked;
        p.tokens.push_back(ids[i]);
        p.kinds.push_back(DraftKind::forced);
        if (m.must_stop()) return false;
      }
      const std::string kept_back = m.forced_continuation();
      if (kept_back.empty() || p.full()) return false;
      std::vector<std::int32_t> context(scheduler->tokens(*p.s->seq).begin(), scheduler->tokens(*p.s->seq).end());
      context.insert(context.end(), p.tokens.begin(), p.tokens.end());
      const std::int32_t token = earlier_spelling(context, m.grammar().vocabulary(), kept_back);
      if (!is_text(token) || !m.accept_token(token)) return false;
      ++p.walked;
      p.tokens.push_back(token);
      p.kinds.push_back(DraftKind::spelling);
      if (m.must_stop()) return false;
    }
  };
  for (const DraftMode mode : {DraftMode::ngram, DraftMode::draft, DraftMode::custom}) {
    Drafter* drafter = drafter_for(mode);
    if (drafter == nullptr) continue;
    std::vector<Plan> plans;
    for (Sample* s : rows) {
      if (s->request->speculative.mode == mode) plans.push_back({s});
    }
    if (plans.empty()) continue;
    // A drafted token costs the growth of the verifying step, plus the drafter's own time for it.
    const double drafter_seconds = drafter->token_seconds(static_cast<std::int32_t>(plans.size()));
    for (Plan& p : plans) {
      Sample* s = p.s;
      const GenerateRequest& q = s->request->req;
      const auto n_tokens = static_cast<std::int32_t>(scheduler->tokens(*s->seq).size());
      const std::int32_t limit =
          std::min(q.max_tokens, context_length - static_cast<std::int32_t>(q.prompt.size()));
      // Each kept draft token is an output token (the last may reach the limit: no token is sampled after
      // it then), and each takes a position of the context.
      p.room = std::min({limit - static_cast<std::int32_t>(s->output.size()), context_length - n_tokens,
                         kMaxDraftTokens});
      if (p.room <= 0) continue;
      bool open = true;
      if (s->matcher) {
        try {
          open = extend_forced(p);  // text forced after the row's tokens (kept back for the model) first
        } catch (const std::exception&) {
          open = false;
        }
      }
      if (open && !p.full()) {
        // The step as it is (every row's tokens, this row's draft so far) against it with k more tokens.
        const auto n = n_step_tokens + static_cast<std::int32_t>(p.tokens.size());
        std::vector<double> costs = step_cost.relative_costs(n, s->draft_length.max_k());
        const double base = step_cost.seconds(n);
        if (base > 0) {
          for (std::size_t k = 1; k < costs.size(); ++k) costs[k] += static_cast<double>(k) * drafter_seconds / base;
        }
        p.ask = std::min(p.room - static_cast<std::int32_t>(p.tokens.size()), s->draft_length.next(costs));
      }
    }
    std::vector<Drafter::Row> asks;
    std::vector<Plan*> asked;
    for (Plan& p : plans) {
      if (p.ask <= 0) continue;
      const std::span<const std::int32_t> tokens = scheduler->tokens(*p.s->seq);
      std::span<const std::int32_t> context = tokens;
      if (!p.tokens.empty()) {
        p.context.assign(tokens.begin(), tokens.end());
        p.context.insert(p.context.end(), p.tokens.begin(), p.tokens.end());
        context = p.context;
      }
      asks.push_back({p.s->draft_key, context, p.ask, {}});
      asked.push_back(&p);
    }
    if (!asks.empty()) {
      try {
        drafter->propose(asks);
      } catch (const std::exception&) {
        for (Drafter::Row& a : asks) a.draft.clear();  // no guesses this step
      }
    }
    for (std::size_t i = 0; i < asks.size(); ++i) {
      Plan& p = *asked[i];
      std::vector<std::int32_t>& guesses = asks[i].draft;
      if (guesses.size() > static_cast<std::size_t>(p.ask)) guesses.resize(static_cast<std::size_t>(p.ask));
      // A guess is text: the draft stops before a token that ends generation, is special or is not a logits
      // row, before the first token the grammar rejects, and after one past which the grammar forces text
      // (close_row appends it; drafting it after a guess was measured to cost more rows than it saves).
      try {
        for (const std::int32_t t : guesses) {
          if (!is_text(t) || p.full()) break;
          if (p.s->matcher) {
            if (!p.s->matcher->accept_token(t)) break;
            ++p.walked;
          }
          p.tokens.push_back(t);
          p.kinds.push_back(DraftKind::guess);
          if (p.s->matcher && (p.s->matcher->must_stop() || !p.s->matcher->forced_continuation().empty())) break;
        }
      } catch (const std::exception&) {
        // The draft so far stands: each of its tokens was accepted.
      }
    }
    for (Plan& p : plans) {
      Sample* s = p.s;
      if (p.walked > 0) s->matcher->rollback(static_cast<std::size_t>(p.walked));
      // Forced text cut short would be sampled where decoding appends the rest of it: the draft ends
      // before it instead (close_row appends it after the draft's last token).
      while (p.cut && !p.kinds.empty() && p.kinds.back() == DraftKind::forced) {
        p.kinds.pop_back();
        p.tokens.pop_back();
      }
      if (p.tokens.empty()) continue;
      scheduler->draft(*s->seq, p.tokens);
      s->draft = std::move(p.tokens);
      s->draft_kinds = std::move(p.kinds);
    }
  }
}

// Verifies a drafted row: position by position, a guessed token is kept or replaced (Sampler::verify,
// each position under its own mask), a forced one appended as jump-forward appends it; the first
// replacement, or the token after a fully kept draft, ends the row. Kept tokens are events of their own
// (events carry one sampled token, then forced ones). The K/V of the row's tokens and of the kept drafts
// stay; the rest is truncated.
void Engine::Impl::verify_row(Sample& s, std::int32_t first_position, std::span<float> logits,
                              std::span<const std::uint32_t> masks) {
  Request& r = *s.request;
  const GenerateRequest& q = r.req;
  const std::vector<std::int32_t> draft = std::move(s.draft);
  const std::vector<DraftKind> kinds = std::move(s.draft_kinds);
  s.draft.clear();
  s.draft_kinds.clear();
  const auto vocab = static_cast<std::size_t>(n_vocab);
  const std::size_t words = (vocab + 31) / 32;
  const bool per_position = s.matcher.has_value();
  std::int32_t kept = 0;           // draft positions kept, forced ones included
  std::int32_t verified_kept = 0;  // guesses and spellings kept
  std::size_t n_known = 0;         // leading tokens of out that are kept draft positions
  std::int32_t n_forced = 0;       // forced tokens in out
  bool going = true, ended = false;
  RowOutput out;
  for (std::size_t i = 0; i <= draft.size(); ++i) {
    if (i < draft.size() && kinds[i] == DraftKind::forced) {
      // Text the grammar forces after the kept tokens: appended unverified, as decoding appends it.
      if (!s.matcher->accept_token(draft[i])) {
        finish(s, FinishReason::error, "a forced draft token was rejected by the grammar");
        ended = true;
        break;
      }
      ++kept, ++n_known, ++n_forced;
      going = push_token(s, draft[i], out);
      if (!going) break;
      continue;
    }
    if (!out.added.empty()) {  // the kept tokens before this position: their own event
      count_generated(out.added.size(), n_forced);
      emit(s, std::move(out.added), std::move(out.text), std::move(out.logprobs), FinishReason::none, {},
           out.n_allowed);
      n_forced = 0;
      n_known = 0;
    }
    const std::span<float> row = logits.subspan(i * vocab, vocab);
    const std::span<const std::uint32_t> mask = per_position ? masks.subspan(i * words, words) : masks;
    out = RowOutput{};
    out.n_allowed = per_position ? count_allowed(mask, n_vocab) : -1;
    SampledToken sampled;
    bool accepted = false;
    try {
      sampled = i < draft.size() ? s.sampler->verify(row, mask, q.prompt, s.output, draft[i], accepted)
                                 : s.sampler->sample(row, mask, q.prompt, s.output);
    } catch (const std::exception& e) {
      finish(s, FinishReason::error, fmt::format("sampling failed: {}", e.what()));
      ended = true;
      break;
    }
    going = take_sampled(s, std::move(sampled), out, ended);
    if (ended || !accepted) break;
    ++kept, ++verified_kept, ++n_known;
    if (!going) break;  // a kept draft token that ends the sample (a limit, a stop string)
    // Text the grammar forces after the draft's last token: close_row appends it, as decoding does (a draft
    // goes on past forced text only with the tokens decoding appends there).
    if (i + 1 == draft.size() && s.matcher && !s.matcher->forced_continuation().empty()) break;
  }
  // Drafted and kept counts are of verified tokens; the drafter's guesses alone feed the draft length.
  std::int32_t n_verified = 0, n_guesses = 0, guesses_kept = 0, first_guess = -1;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == DraftKind::forced) continue;
    ++n_verified;
    if (kinds[i] != DraftKind::guess) continue;
    if (first_guess < 0) first_guess = static_cast<std::int32_t>(i);
    ++n_guesses;
    if (static_cast<std::int32_t>(i) < kept) ++guesses_kept;
  }
  if (Drafter* d = drafter_for(r.speculative.mode)) d->keep(s.draft_key, first_position + 1 + kept);
  // Guesses the verification reached (a rejected spelling before them leaves them untried).
  if (n_guesses > 0 && kept >= first_guess) s.draft_length.record(n_guesses, guesses_kept);
  r.usage.draft_tokens += n_verified;
  r.usage.accepted_draft_tokens += verified_kept;
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats.draft_tokens += static_cast<std::uint64_t>(n_verified);
    stats.accepted_draft_tokens += static_cast<std::uint64_t>(verified_kept);
    stats.forced_tokens += static_cast<std::uint64_t>(n_forced);  // close_row counts them as generated
  }
  if (ended) return;
  if (going) scheduler->truncate(*s.seq, first_position + 1 + kept);
  // The row's last kept draft tokens are the scheduler's already (their K/V computed).
  close_row(s, out, going, n_known);
}

void Engine::Impl::run_loop() {
  std::deque<std::unique_ptr<Request>> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(signal->mutex);
      for (;;) {
        batch.swap(incoming);
        const bool cancels = std::any_of(active.begin(), active.end(), [&](const auto& r) {
          return cancel_all || r->channel->cancelled();
        });
        if (!batch.empty() || !scheduler->idle() || cancels) break;
        loop_idle = true;
        idle_cv.notify_all();
        if (stop_loop) return;
        signal->pending = false;
        signal->cv.wait(lock, [&] { return signal->pending || stop_loop; });
      }
      loop_idle = false;
    }
    take_incoming(batch);
    process_cancellations();
    drop_finished();
    try {
      step();
    } catch (const std::exception& e) {
      // An internal failure of the step: every request in flight fails, the loop goes on.
      for (auto& r : active) fail_request(*r, fmt::format("engine step failed: {}", e.what()));
    }
    drop_finished();
    publish_stats();
  }
}

Engine::Engine(std::shared_ptr<const Model> model, EngineOptions options)
    : impl_(std::make_unique<Impl>(std::move(model), options)) {
  impl_->loop = std::thread([impl = impl_.get()] { impl->run_loop(); });
}

Engine::~Engine() {
  shutdown(true);
  {
    std::lock_guard<std::mutex> lock(impl_->signal->mutex);
    impl_->stop_loop = true;
    impl_->signal->pending = true;
  }
  impl_->signal->cv.notify_all();
  if (impl_->loop.joinable()) impl_->loop.join();
}

std::shared_ptr<RequestStream> Engine::submit(GenerateRequest request) {
  Impl& m = *impl_;
  detail::check_request(request, *m.model, m.context_length);
  auto r = std::make_unique<Request>();
  r->loras = m.lora_registry->resolve(request.loras);
  if (request.grammar) {
    r->grammar = m.grammars->compile(*request.grammar, request.grammar_special_tokens, request.abandoned);
  }
  r->seed = request.sampling.seed ? *request.sampling.seed : std::random_device{}() * 0x9E3779B97F4A7C15ULL ^
                                                                  std::random_device{}();
  if (request.id.empty()) request.id = fmt::format("req-{}", m.next_id.fetch_add(1));
  r->req = std::move(request);
  r->speculative = r->req.speculative.value_or(m.options.speculative);
  if (r->speculative.mode != DraftMode::off && !m.drafter_for(r->speculative.mode)) {
    throw RequestError(fmt::format("[speculative] mode \"{}\" needs {}, and the engine has none",
                                   draft_mode_name(r->speculative.mode),
                                   r->speculative.mode == DraftMode::draft ? "a draft model (--spec draft=PATH)"
                                                                           : "a custom drafter"),
                       "speculative");
  }
  r->usage.prompt_tokens = static_cast<std::int32_t>(r->req.prompt.size());
  if (r->req.prompt_logprobs) r->prompt_logprobs.resize(r->req.prompt.size() - 1);
  r->channel = std::make_shared<detail::RequestChannel>(r->req.id, m.signal);
  r->samples.resize(static_cast<std::size_t>(r->req.n));
  for (std::int32_t i = 0; i < r->req.n; ++i) {
    Sample& s = r->samples[static_cast<std::size_t>(i)];
    s.request = r.get();
    s.index = i;
    s.sampler.emplace(r->req.sampling, r->seed + static_cast<std::uint64_t>(i));
    s.draft_key = m.next_draft_key.fetch_add(1);
    if (r->speculative.k > 0) s.draft_length = DraftLength(r->speculative.k, /*fixed=*/true);
    s.detok.emplace(*m.model->tokenizer, tokenizers::DecodeOptions{.skip_special = true});
    if (!r->req.stop.empty()) s.stops.emplace(r->req.stop);
  }
  if (r->grammar) r->samples[0].matcher.emplace(*r->grammar);
  auto stream = std::make_shared<detail::ChannelStream>(r->channel);
  {
    std::lock_guard<std::mutex> lock(m.signal->mutex);
    if (!m.accepting) throw CapacityError("[engine] shutting down: no new requests");
    const std::int64_t queued = m.n_unadmitted.load();
    if (queued >= m.options.max_queued) {
      throw QueueFullError(fmt::format("[engine] the queue is full ({} requests waiting)", queued));
    }
    m.n_unadmitted.fetch_add(1);
    m.incoming.push_back(std::move(r));
    m.signal->pending = true;
  }
  {
    std::lock_guard<std::mutex> lock(m.stats_mutex);
    ++m.stats.requests;
  }
  m.signal->cv.notify_all();
  return stream;
}

CompiledConstraint Engine::compile(const pse::Grammar& grammar, const std::vector<std::string>& special_tokens,
                                   const std::function<bool()>& abandoned) {
  return impl_->grammars->compile_typed(grammar, special_tokens, abandoned);
}

// Attaching places the adapter's pairs where the backend reads them (device memory on a GPU) at once, so
// that the first request naming it does not wait for the copy; detaching drops that copy.
LoraInfo Engine::attach_lora(const std::string& name, const std::filesystem::path& path) {
  LoraInfo info = impl_->lora_registry->attach(name, path);
  if (auto adapter = impl_->lora_registry->find(name)) impl_->runner->backend().prepare_lora(*adapter);
  return info;
}

LoraInfo Engine::attach_lora(const std::string& name, std::shared_ptr<LoraAdapter> adapter) {
  LoraInfo info = impl_->lora_registry->attach(name, std::move(adapter));
  if (auto placed = impl_->lora_registry->find(name)) impl_->runner->backend().prepare_lora(*placed);
  return info;
}

void Engine::detach_lora(const std::string& name) {
  std::shared_ptr<const LoraAdapter> adapter = impl_->lora_registry->find(name);
  impl_->lora_registry->detach(name);
  if (adapter) impl_->runner->backend().release_lora(*adapter);
}

std::vector<LoraInfo> Engine::loras() const { return impl_->lora_registry->list(); }

const Model& Engine::model() const { return *impl_->model; }

const EngineOptions& Engine::options() const { return impl_->options; }
const DeviceChoice& Engine::device() const { return impl_->device; }

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->stats_mutex);
    s = impl_->stats;
  }
  // Read now, not as the loop last published them: compiles run on callers' threads (submit, compile),
  // also while the loop is idle.
  const detail::GrammarCacheStats g = impl_->grammars->stats();
  s.grammar_compiles = g.compiles;
  s.grammar_cache_hits = g.hits;
  s.grammar_compile_seconds = g.compile_seconds;
  return s;
}

void Engine::shutdown(bool cancel_running) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.signal->mutex);
  m.accepting = false;
  if (cancel_running) m.cancel_all = true;
  m.signal->pending = true;
  m.signal->cv.notify_all();
  m.idle_cv.wait(lock, [&] { return m.loop_idle && m.incoming.empty(); });
}

}  // namespace pie
