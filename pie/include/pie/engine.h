// The engine: continuous batching of many requests over one model. submit() validates a request (and
// compiles its grammar, so a bad constraint is an error to the caller, never to the loop) and returns a
// stream of events; a loop thread schedules prefill chunks and decode rows under a token budget, runs
// the forward pass while the pse matchers of constrained rows fill their masks, samples, appends forced
// (jump-forward) tokens, detokenizes, applies stop strings and emits events. A request that fails ends with
// an error event; the others carry on.
//
//   pie::Engine engine(pie::load_model("model.gguf"), {});
//   pie::GenerateRequest request;
//   request.prompt = engine.model().tokenizer->encode("Once upon a time", {.add_bos = true});
//   request.max_tokens = 64;
//   auto stream = engine.submit(std::move(request));
//   while (auto event = stream->next()) { std::cout << event->text; }
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pie/backend.h"
#include "pie/error.h"
#include "pie/model.h"
#include "pie/sampling.h"
#include "pie/speculation.h"
#include "pse/compiler.h"
#include "pse/grammar.h"

namespace pie {

struct LoraAdapter;  // pie/lora.h

// An adapter a request runs with: its attached name and a scale (stacked adapters add up:
// y = x W^T + sum_i scale_i * alpha_i / rank_i * (x A_i^T) B_i^T).
struct LoraRequest {
  std::string name;
  float scale = 1.0f;
};
inline constexpr std::size_t kMaxRequestLoras = 8;

// An attached adapter (Engine::loras).
struct LoraInfo {
  std::string name;
  std::filesystem::path path;   // empty when attached from memory
  std::int64_t rank = 0;        // the largest of its pairs'
  std::size_t bytes = 0;        // of its A and B matrices
  bool resident = true;         // false: evicted from memory (read again at its next use)
  std::int64_t in_use = 0;      // requests holding it
};

// A request names an adapter that is not attached (the server's 404).
class LoraNotFoundError : public RequestError {
 public:
  explicit LoraNotFoundError(const std::string& name)
      : RequestError("[lora] no adapter named '" + name + "' is loaded", "lora", "lora_not_found"), name_(name) {}
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

struct GenerateRequest {
  std::string id;                      // for logs and events; the engine makes one when empty
  std::vector<std::int32_t> prompt;    // token ids (chat template and BOS already applied)
  SamplingParams sampling;
  std::int32_t n = 1;                  // independent samples of the prompt (sharing its KV pages)
  std::int32_t max_tokens = 256;       // per sample; clipped to the context left (finish "length")
  std::vector<std::string> stop;       // stop strings (not part of the output)
  bool ignore_eos = false;             // keep going past end-of-sequence tokens (unconstrained only)
  // The constraint (nullopt: free text). The engine compiles it against the model's vocabulary (cached by
  // content). End-of-sequence is allowed exactly when the grammar may stop.
  std::optional<pse::Grammar> grammar;
  // Speculative decoding for this request (nullopt: the engine's EngineOptions::speculative). The output is
  // the same as without it: greedy tokens identical, sampled ones from the same distribution.
  std::optional<SpeculativeOptions> speculative;
  // Token texts that count as plain text for the grammar although the tokenizer marks them special
  // (tool-call markers such as "<tool_call>" or "[TOOL_CALLS]"), so a grammar can require them.
  std::vector<std::string> grammar_special_tokens;
  // Report the logprob of every prompt token after the first, with sampling.top_logprobs alternatives
  // (Event::prompt_logprobs). Their logits must be computed, so the prompt is not taken from the prefix
  // cache (its pages still go there for later requests; usage.cached_prompt_tokens is 0) and runs in
  // chunks of at most 64 tokens. The logprobs are bit-identical to those of the same tokens sampled.
  bool prompt_logprobs = false;
  // Polled while submit() compiles the grammar (every few thousand automaton states or tokens, as the
  // compile deadline is): true stops the compile and submit() throws CancelledError. For callers that
  // may go away meanwhile (a server whose client closed the connection).
  std::function<bool()> abandoned;
  // LoRA adapters (attached with Engine::attach_lora) and their scales; empty: the base model alone. Rows
  // of different adapters and none share a batch; the prefix cache keeps each adapter set's pages apart.
  std::vector<LoraRequest> loras;
};

enum class FinishReason : std::uint8_t { none, stop, length, cancelled, error };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", ...

struct Usage {
  std::int32_t prompt_tokens = 0;
  std::int32_t cached_prompt_tokens = 0;  // served from the prefix cache
  std::int32_t completion_tokens = 0;     // summed over samples
  std::int32_t draft_tokens = 0;          // speculative decoding: tokens drafted and scored
  std::int32_t accepted_draft_tokens = 0; // of those, kept (each one a forward pass saved)
};

// One event of a request's stream. Token events carry the sample's new token(s) and the text they
// completed (never a split UTF-8 character, never part of a stop string); the last event of each sample
// has finish != none; after every sample finished, one final event with `done` and the usage.
struct Event {
  std::int32_t index = 0;                 // which sample (0 .. n-1)
  // Tokens appended this step: tokens[0] was sampled, the rest (if any) forced: the grammar's jump-forward
  // spelled the only text it allowed there.
  std::vector<std::int32_t> tokens;
  // How many tokens the grammar's mask allowed at the step that sampled tokens[0], or, on a sample's last
  // event when it ended by sampling end-of-sequence, at that step (end-of-sequence tokens included);
  // -1 when the sample has no grammar or no token was sampled.
  std::int32_t n_allowed = -1;
  std::int32_t end_token = -1;            // the end-of-sequence token that ended the sample, if one did
  std::string text;                       // text delta
  std::vector<SampledToken> logprobs;     // one per sampled token when logprobs were asked for
  // prompt_logprobs, on one event of index 0 before any token (none for a one-token prompt): entry i is
  // prompt token i + 1's, from the model's raw logits (no penalties, bias, mask or temperature).
  std::vector<SampledToken> prompt_logprobs;
  FinishReason finish = FinishReason::none;
  std::string error;                      // finish == error: what went wrong
  bool done = false;                      // the request's last event
  Usage usage;                            // filled on the done event
  std::chrono::steady_clock::time_point time;
};

// The consumer side of a request. Thread-safe; dropping it cancels the request.
class RequestStream {
 public:
  virtual ~RequestStream() = default;
  // Blocks until the next event; nullopt after the done event was returned.
  virtual std::optional<Event> next() = 0;
  // Same, giving up after `timeout` (nullopt, with timed_out() true).
  virtual std::optional<Event> next_for(std::chrono::milliseconds timeout) = 0;
  virtual bool timed_out() const = 0;
  // Ends the request early: its samples finish with "cancelled" and its pages are freed.
  virtual void cancel() = 0;
  virtual const std::string& id() const = 0;
};

struct EngineOptions {
  // Where the forward pass runs: automatic takes CUDA when a usable GPU is present (Engine::device() says
  // which was chosen and why).
  DeviceRequest device = DeviceRequest::automatic;
  std::int32_t n_threads = 0;            // forward-pass threads (0: all cores; the CPU backend's)
  std::int32_t max_running = 16;         // sequences decoding at once
  std::int32_t max_batch_tokens = 512;   // tokens per step (decode rows + prefill chunks)
  std::int32_t context_length = 0;       // per sequence; 0: the model's trained context (capped at 8192)
  std::int64_t kv_cache_bytes = 0;       // 0: CPU: enough for max_running full contexts, capped at 4 GiB;
                                         // CUDA: what gpu_memory leaves after the weights (with a
                                         // draft_model: as on the CPU)
  // On CUDA, the fraction of the GPU's memory the engine may use (weights, KV pool, activations), as vLLM's
  // gpu_memory_utilization: with kv_cache_bytes 0 the KV pool takes what remains of it after the weights.
  double gpu_memory = 0.9;
  // On CUDA, a token's logits bit-identical whatever else the step holds (CudaOptions::batch_invariant):
  // off, prefill chunks and large batches run their products on tensor cores, faster, in an order of
  // summation that follows the step's size.
  bool batch_invariant = false;
  // The KV cache's element type, f32 or f16 (as llama.cpp's cache types); unset: the device's default, f32 on
  // the CPU, f16 on CUDA (half the memory a token; the engine's options() give the one chosen).
  std::optional<tensor::DType> kv_dtype;
  bool prefix_caching = true;
  // The KV pool committed at start (KvCacheConfig::resident): a server's memory stays level as its prefix
  // cache fills the pool; off, pages are committed on first use (a one-shot command touches few).
  bool kv_resident = false;
  // Bytes of LoRA adapters attached from files kept in memory (0: no bound); past it the least recently
  // used ones no request holds are evicted and read again at their next use.
  std::int64_t lora_memory_bytes = 0;
  std::int32_t max_queued = 1024;        // submit() throws QueueFullError past this
  std::int32_t grammar_cache = 64;       // compiled grammars kept
  std::int64_t grammar_cache_bytes = std::int64_t{256} << 20;  // and their bytes (automata and tables), at most
  double grammar_compile_ms = 10'000;    // compile-time bound per constraint
  // When a constraint's token tables are built. In the background (the default): a new constraint starts
  // decoding once its automaton is built, while its tables are built on other threads during its prefill;
  // a mask that comes first builds its table itself. In compile: the steadiest masks from the first step,
  // the longest time to first token. At first use: each build runs in a mask fill. The compile cache
  // keeps the built tables for the next request with the same constraint.
  pse::TableBuild grammar_tables = pse::TableBuild::kInBackground;
  // Speculative decoding for requests that do not choose (GenerateRequest::speculative). It runs only
  // while at most speculative_max_batch samples are live (decoding, prefilling or waiting; at most
  // max_running of them): larger batches are compute-bound on the CPU, where scoring drafts costs what it
  // saves.
  SpeculativeOptions speculative;
  std::int32_t speculative_max_batch = 4;
  // The draft model of DraftMode::draft (--spec draft=PATH): a model of the target's vocabulary, resident
  // beside it with its own backend and a KV pool of as many pages as the target's. The engine's
  // construction throws ModelError when its vocabulary differs or it does not fit in draft_memory_bytes
  // (0: the device's free memory once the target is loaded).
  std::shared_ptr<const Model> draft_model;
  std::int64_t draft_memory_bytes = 0;
  // A drafter of the caller's for DraftMode::custom: a developer hook (the oracle drafter of
  // scripts/bench-spec-oracle.sh, make_oracle_drafter), called on the engine's loop thread only.
  std::shared_ptr<Drafter> custom_drafter;
  // A developer hook (tests): wraps the backend the engine makes for the model (as with_injected_faults
  // does), e.g. to sample on the "device" on a machine without a GPU. Null: none.
  std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)> wrap_backend;
  // Rows sampled where the logits are when the backend can (Backend::samples_on_device: CUDA), so a step
  // whose rows are all sampled there copies no logits to the host; rows it does not cover (top_k above
  // kDeviceMaxTopK, prompt logprobs, speculative verification, a request's first step with n > 1) are
  // sampled on the host as before. ORCHARD_DEVICE_SAMPLING=0 in the environment turns it off.
  bool device_sampling = true;
};

struct EngineStats {
  std::uint64_t requests = 0, requests_failed = 0, requests_running = 0, requests_queued = 0;
  std::uint64_t prompt_tokens = 0, generated_tokens = 0, forced_tokens = 0, preemptions = 0;
  std::uint64_t draft_tokens = 0, accepted_draft_tokens = 0;  // speculative decoding
  std::int32_t kv_pages = 0, kv_pages_used = 0, kv_pages_cached = 0, kv_pages_free = 0;
  std::uint64_t prefix_lookup_tokens = 0, prefix_hit_tokens = 0;
  std::uint64_t grammar_compiles = 0, grammar_cache_hits = 0;
  std::uint64_t grammar_cache_bytes = 0;  // compiled grammars kept for reuse (as of the last compile)
  double grammar_compile_seconds = 0;
  double mask_seconds = 0;               // time spent filling masks (on the pool)
  double forward_seconds = 0;
  std::uint64_t steps = 0;
  std::uint64_t device_sampled_rows = 0;  // rows sampled on the device (EngineOptions::device_sampling)
  // Steps whose forward pass failed (a device fault inside the step: its requests ended with an error).
  std::uint64_t forward_failures = 0;
  std::string last_forward_error;  // the last such failure's message ("" when none)
};

// A constraint compiled by Engine::compile.
struct CompiledConstraint {
  pse::CompiledGrammar grammar;
  bool cached = false;   // found in the engine's compile cache
  double seconds = 0;    // time compile() took (the lookup when cached)
};

class Engine {
 public:
  // Starts the loop thread. Throws ModelError when the model cannot run, pie::Error on bad options.
  Engine(std::shared_ptr<const Model> model, EngineOptions options = {});
  // Cancels everything still running and joins the loop.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates (RequestError: empty prompt, token ids out of range, prompt longer than the context,
  // invalid sampling parameters, n < 1; pse errors from the constraint come back as RequestError naming
  // "grammar"), compiles the constraint (CancelledError when request.abandoned says so meanwhile) and
  // queues the request (QueueFullError past max_queued, CapacityError when shutting down). Thread-safe.
  std::shared_ptr<RequestStream> submit(GenerateRequest request);

  // Compiles a constraint against the model's vocabulary as submit() does, through the same cache (a
  // request with it that follows finds it compiled; the compile counts in stats()). Throws pse's errors
  // as they are (pse::GrammarError, pse::LimitError, ...), pie::RequestError (param
  // "grammar_special_tokens") when a listed text is not a special token. `abandoned`: as
  // GenerateRequest::abandoned (a pse::LimitError when it stopped the compile). Thread-safe.
  CompiledConstraint compile(const pse::Grammar& grammar, const std::vector<std::string>& special_tokens = {},
                             const std::function<bool()>& abandoned = {});

  // LoRA adapters, attached without reloading the base: read from a PEFT folder or GGUF adapter and fitted
  // to the model (LoraError when it does not fit: shapes, architecture, NaN/Inf, rank > 256; RequestError
  // on an empty name), or given in memory (fitted in place). A name attached again is replaced; requests
  // already running keep the adapter they started with. Thread-safe.
  LoraInfo attach_lora(const std::string& name, const std::filesystem::path& path);
  LoraInfo attach_lora(const std::string& name, std::shared_ptr<LoraAdapter> adapter);
  // Detaches at once: new requests naming it are refused (LoraNotFoundError), running ones finish with it
  // (they hold it). Throws LoraNotFoundError when no adapter has that name.
  void detach_lora(const std::string& name);
  std::vector<LoraInfo> loras() const;

  const Model& model() const;
  const EngineOptions& options() const;
  // The device the forward pass runs on and why it was chosen (for the log).
  const DeviceChoice& device() const;
  EngineStats stats() const;
  // Stops taking requests, finishes or cancels the running ones, returns when the loop is idle.
  void shutdown(bool cancel_running);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The embedded random-weight model, "orchard-random": a small llama with random weights and a byte-level
// tokenizer that orchard generates deterministically from a seed (no file needed). Its output is fluent in
// nothing; it exists so that constrained generation, the server and the unit tests run anywhere. Never a
// fallback for a missing model: commands use it only when it is named (pie/model_store.h).
std::shared_ptr<const Model> random_model();

}  // namespace pie
