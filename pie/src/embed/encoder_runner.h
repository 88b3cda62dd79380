// The forward passes an Embedder runs (private to pie/src/embed): every token's last hidden state
// for a batch of whole inputs packed without padding.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "pie/embedding.h"

namespace tensor {
class ThreadPool;
}

namespace pie {

class EncoderRunner {
 public:
  virtual ~EncoderRunner() = default;
  // Input s is tokens[seq_indptr[s] .. seq_indptr[s + 1]) at positions 0, 1, ...; each attends to
  // its own tokens only (bidirectionally for an encoder, causally for a decoder). out: [n_tokens,
  // n_dims], the hidden state of every token. Ids and lengths are checked by the caller.
  virtual void hidden_states(std::span<const std::int32_t> tokens,
                             std::span<const std::int32_t> seq_indptr, float* out) = 0;
  // The most tokens hidden_states takes at once (the caller splits larger batches by whole inputs;
  // one input may still exceed it).
  virtual std::int64_t token_budget() const = 0;
};

// BERT over kernels/ (LayerNorm, matmuls, exact GELU). Throws ModelError when a weight does not fit
// the config, naming it.
std::unique_ptr<EncoderRunner> make_bert_runner(const EmbeddingModel& model,
                                                tensor::ThreadPool* pool);
// A decoder model through pie's ModelRunner on the CPU backend, its output head replaced by the
// identity so the "logits" are the final hidden states.
std::unique_ptr<EncoderRunner> make_decoder_embedding_runner(const EmbeddingModel& model,
                                                             tensor::ThreadPool* pool);

}  // namespace pie
