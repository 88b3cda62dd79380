// The forward pass on CPU: token ids -> logits, over the paged KV cache, for a batch that mixes prefill
// chunks and decode rows (one query token). Every kernel comes from kernels/ (matmul and quantized dot
// products, norms, activations, embedding) and pal/ (RoPE, paged attention), parallel on a thread pool.
//
// Batch invariance: a token's logits are bit-for-bit the same whatever else is in the batch, however its
// prompt was split into prefill chunks, and whether its K/V came from this step or from the prefix cache:
// every reduction's order depends only on the token's own sequence, never on the batch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

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
};

class ModelRunner {
 public:
  // pool: the threads of the forward pass (nullptr: the calling thread). Throws ModelError when the model
  // uses something the CPU kernels lack.
  ModelRunner(std::shared_ptr<const Model> model, tensor::ThreadPool* pool);
  ~ModelRunner();

  // The KV cache shape this model needs (n_pages and dtype from the caller).
  KvCacheConfig kv_config(std::int32_t n_pages, tensor::DType dtype = tensor::DType::f32) const;

  // Runs the batch: writes K/V of every query token into `kv` and the logits of logit_rows into
  // logits [logit_rows.size()][n_vocab]. Throws pie::Error (nothing sampled) on an inconsistent batch
  // (token id out of range, page table that does not match seq_lens, logits too small).
  void forward(const ForwardBatch& batch, KvCache& kv, std::span<float> logits);

  const Model& model() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pie
