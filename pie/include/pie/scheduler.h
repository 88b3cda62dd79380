// Continuous batching: which tokens of which sequences run in the next forward pass. Pure logic over a page
// budget (the KV cache behind the KvPages interface), so it is tested without a model.
//
// Every sequence is a list of tokens of which the first n_computed have their K/V written; the rest run in
// chunks. A step takes, under max_batch_tokens: first one token for every decoding sequence (one token
// left to compute) in admission order, then prefill chunks (prompts, recomputation, forced tokens) of the
// running sequences, then admits waiting sequences in arrival order while fewer than max_running run. A
// long prompt is split over steps, so decoding never stalls behind it. When the KV cache has no page for a
// chunk, the most recently admitted running sequence is preempted: its pages are released and it goes back
// to the front of the queue with n_computed = 0; readmitted, it recomputes its tokens (prompt and
// generated), reusing what the prefix cache still holds.
//
// Not thread-safe: the engine loop owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "pie/kv_cache.h"

namespace pie {

// What the scheduler needs from the KV cache: KvCache's calls of the same names (the engine adapts its
// KvCache; tests use a fake page budget).
class KvPages {
 public:
  virtual ~KvPages() = default;
  virtual SeqId create(std::uint64_t prefix_namespace) = 0;
  virtual std::int32_t attach_prefix(SeqId seq, std::span<const std::int32_t> tokens) = 0;
  virtual bool reserve(SeqId seq, std::int32_t n_tokens) = 0;
  virtual void commit(SeqId seq, std::span<const std::int32_t> tokens, std::int32_t n_computed) = 0;
  virtual SeqId fork(SeqId seq) = 0;  // -1: no page for the copy
  virtual void release(SeqId seq) = 0;
  virtual bool truncate(SeqId seq, std::int32_t n_keep) = 0;  // false: no page for a copy
};

struct SchedulerConfig {
  std::int32_t max_running = 16;       // sequences admitted at once (forks of a running one do not wait)
  std::int32_t max_batch_tokens = 512; // tokens per step
};

using SequenceId = std::uint64_t;

// How a sequence is scheduled.
struct SequenceOptions {
  // Attach cached prefix pages at admission. Off for a sequence whose prompt positions need their logits
  // (prompt logprobs): a token whose K/V comes from the cache is never computed. Its pages still go to the
  // prefix cache for later sequences.
  bool reuse_prefix = true;
  // At most this many of its tokens per step (0: only the batch's bound): a prefill chunk that asks for
  // the logits of each of its tokens asks for that many rows of logits.
  std::int32_t max_chunk = 0;
  // The prefix cache's namespace of its pages (KvCache::create): the sequence's LoRA adapters, 0 for none.
  std::uint64_t prefix_namespace = 0;
};

// One sequence's part of a step: tokens[begin .. begin + n_tokens) at those positions.
struct ScheduledChunk {
  SequenceId id = 0;
  SeqId kv_seq = -1;
  std::int32_t begin = 0;      // == the sequence's n_computed before the step
  std::int32_t n_tokens = 0;
  bool wants_logits = false;   // the chunk reaches the end of the sequence's tokens
};

struct Step {
  std::vector<ScheduledChunk> chunks;  // decode rows first, then prefill chunks
  std::int32_t n_tokens = 0;
  std::vector<SequenceId> preempted;   // sent back to the queue during this step
  // Admitted this step, with the prompt tokens the prefix cache covered.
  std::vector<std::pair<SequenceId, std::int32_t>> admitted;
  // Sequences that cannot fit the KV cache even alone; they were removed (the caller fails them).
  std::vector<SequenceId> failed;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  // Throws pie::Error when max_running or max_batch_tokens < 1.
  Scheduler(SchedulerConfig config, KvPages& kv);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a sequence (at the back). Throws pie::Error on empty tokens or a negative max_chunk.
  SequenceId add(std::vector<std::int32_t> tokens, SequenceOptions options = {});
  // Changes how a sequence is scheduled from the next schedule() on (forks made later inherit them).
  // Throws pie::Error on an unknown id or a negative max_chunk.
  void set_options(SequenceId id, SequenceOptions options);
  // Appends tokens (sampled or forced) to a sequence; they run in later steps. Throws pie::Error on an
  // unknown id.
  void append(SequenceId id, std::span<const std::int32_t> tokens);
  // A new running sequence with the same tokens and K/V (pages shared). When the cache has no page for
  // the copy, the new sequence waits at the front of the queue and recomputes. Throws on an unknown id.
  SequenceId fork(SequenceId id);
  // Drops a sequence (finished or cancelled, queued or running) and releases its pages. Unknown ids are
  // ignored.
  void remove(SequenceId id);

  // Speculative decoding: `draft` tokens follow a running sequence's tokens left to compute (its last
  // token, or forced ones) tentatively. They run in the same step, in one chunk with them; when the step's
  // token budget is short the last of them are dropped first (all of them when not even the first fits),
  // and a preempted sequence drops them all (n_draft() says how many remain once schedule() ran). After the
  // step, truncate() drops the ones not kept. Throws pie::Error on an unknown id, a sequence that is not
  // running with a token to compute, or one with a draft already.
  void draft(SequenceId id, std::span<const std::int32_t> draft);
  std::int32_t n_draft(SequenceId id) const;
  // Keeps the first n_keep tokens of a sequence and forgets the rest, K/V included (a rejected draft).
  // When the KV cache cannot give the page truncation must copy, the sequence is preempted instead and
  // recomputes its kept tokens later. Throws pie::Error on an unknown id or n_keep outside
  // [1, its tokens].
  void truncate(SequenceId id, std::int32_t n_keep);

  // Plans the next step (admissions, page reservations, preemptions). Call complete() once its forward
  // pass ran (or remove() the sequences that failed) before the next schedule().
  Step schedule();
  // Marks the step's chunks computed and commits their K/V (for the prefix cache).
  void complete(const Step& step);

  bool contains(SequenceId id) const;
  bool is_running(SequenceId id) const;
  std::span<const std::int32_t> tokens(SequenceId id) const;
  std::int32_t n_computed(SequenceId id) const;
  std::size_t n_running() const { return running_.size(); }
  std::size_t n_waiting() const { return waiting_.size(); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  std::uint64_t n_preemptions() const { return n_preemptions_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Sequence {
    std::vector<std::int32_t> tokens;
    std::int32_t n_computed = 0;
    SeqId kv_seq = -1;             // -1 while waiting
    std::uint64_t admitted_at = 0; // admission counter (larger: more recent)
    SequenceOptions options;
    std::int32_t n_draft = 0;      // the last n_draft tokens are a tentative draft
  };
  Sequence& get(SequenceId id);
  const Sequence& get(SequenceId id) const;
  void preempt(SequenceId id, Step& step, std::int32_t& budget);
  void requeue(SequenceId id);  // releases the pages, back to the front of the queue
  SequenceId youngest_running() const;

  SchedulerConfig config_;
  KvPages& kv_;
  std::unordered_map<SequenceId, Sequence> sequences_;
  std::vector<SequenceId> running_;  // in admission order
  std::deque<SequenceId> waiting_;   // front: next to admit
  SequenceId next_id_ = 1;
  std::uint64_t admissions_ = 0;
  std::uint64_t n_preemptions_ = 0;
};

}  // namespace pie
