// The forward pass: token ids -> logits, over the paged KV cache, for a batch that mixes prefill chunks
// and decode rows (one query token). The runner lays the batch out (positions, KV slots, attention
// groups) and has the model's architecture builder (pie/src/models/) run it on a Backend (pie/backend.h):
// the CPU backend by default. begin() returns while the backend computes, so the caller's threads can
// fill grammar masks meanwhile; wait() returns with the logits.
//
// Batch invariance: a token's logits are bit-for-bit the same whatever else is in the batch, however its
// prompt was split into prefill chunks, and whether its K/V came from this step or from the prefix cache:
// every reduction's order depends only on the token's own sequence, never on the batch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "pie/backend.h"
#include "pie/kv_cache.h"
#include "pie/model.h"

namespace tensor {
class ThreadPool;
}

namespace pie {

// One step's work. Sequence s has the query tokens tokens[qo_indptr[s] .. qo_indptr[s + 1]) at consecutive
// positions ending at seq_lens[s] - 1; it owns pages[page_indptr[s] .. page_indptr[s + 1]) of the KV cache,
// exactly ceil(seq_lens[s] / 16) of them. The K/V of its earlier tokens are already in those pages.
struct ForwardBatch {
  std::span<const std::int32_t> tokens;
  std::span<const std::int32_t> qo_indptr;     // [n_seqs + 1]
  std::span<const std::int32_t> seq_lens;      // [n_seqs]
  std::span<const std::int32_t> page_indptr;   // [n_seqs + 1]
  std::span<const std::int32_t> page_indices;
  // Indices into `tokens` whose logits are wanted (usually each sequence's last token), in order.
  std::span<const std::int32_t> logit_rows;
  // LoRA adapters and the token rows (indices into `tokens`) each applies to; their logit_rows are filled
  // by the runner. Empty: none.
  std::span<const LoraGroup> loras = {};
};

class ModelRunner {
 public:
  // Runs on `backend`. Throws ModelError when the model's architecture has no builder or its weights do
  // not fit it (naming the weight), pie::Error without a backend.
  ModelRunner(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend);
  // On the CPU backend over `pool` (the caller keeps it alive; nullptr: one thread computes).
  ModelRunner(std::shared_ptr<const Model> model, tensor::ThreadPool* pool);
  ~ModelRunner();

  // The KV cache shape this model needs (n_pages and dtype from the caller), and its pages in the
  // backend's memory (KvCache's storage).
  KvCacheConfig kv_config(std::int32_t n_pages, tensor::DType dtype = tensor::DType::f32) const;
  std::unique_ptr<KvStorage> make_kv_storage(const KvCacheConfig& config) const;

  // Starts the batch: the backend writes K/V of every query token into `kv` and the logits of logit_rows
  // into logits [logit_rows.size()][n_vocab]. The batch's spans, `kv` and `logits` must stay valid and
  // untouched until wait(), and the adapters alive. Throws pie::Error (nothing started) on an inconsistent
  // batch (token id out of range, page table that does not match seq_lens, logits too small, a KV cache of
  // another shape or device, an adapter without one or with rows out of range, adapters on a backend
  // without LoRA) or while a batch is under way. logits_to_host false: the logits stay in the backend's
  // memory for Backend::sample_rows (`logits` is left untouched), on a backend that samples_on_device().
  void begin(const ForwardBatch& batch, KvCache& kv, std::span<float> logits, bool logits_to_host = true);
  // Returns once the batch begun is done. Throws pie::Error when it failed (its logits are then
  // undefined); no effect when none was begun.
  void wait();
  // begin() then wait().
  void forward(const ForwardBatch& batch, KvCache& kv, std::span<float> logits);

  const Model& model() const;
  Backend& backend() const;
  // How long the last batch took on the backend (from its start there to its end), in seconds.
  double last_step_seconds() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pie
