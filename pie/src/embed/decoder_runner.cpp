// A decoder model as an embedder: its own forward pass (pie's ModelRunner, every architecture it
// runs), with the output head replaced by an f16 identity padded with zero rows to the vocabulary,
// so the "logits" of a row are its hidden state after the final norm (transformers'
// last_hidden_state) in their first n_embd columns. Each batch gets a KV cache of its own, sized to
// it; inputs longer than the token budget run as consecutive prefill chunks of one sequence.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "embed/encoder_runner.h"
#include "pie/error.h"
#include "pie/kv_cache.h"
#include "pie/runner.h"
#include "tensor/half.h"

namespace pie {
namespace {

std::shared_ptr<const Model> with_identity_head(const Model& decoder) {
  auto model = std::make_shared<Model>(decoder);
  const std::int64_t n_vocab = decoder.config.n_vocab;
  const std::int64_t d = decoder.config.n_embd;
  auto identity =
      std::make_shared<std::vector<std::uint16_t>>(static_cast<std::size_t>(n_vocab * d), 0);
  const std::uint16_t one = tensor::f32_to_f16(1.0f);
  for (std::int64_t i = 0; i < std::min(n_vocab, d); ++i)
    (*identity)[static_cast<std::size_t>(i * d + i)] = one;
  model->storage.push_back(identity);
  model->weights.output =
      weight_view(identity->data(), identity->size() * 2, tensor::DType::f16, n_vocab, d);
  model->config.tied_embeddings = false;
  model->config.final_logit_softcap = 0;
  return model;
}

class DecoderEmbeddingRunner final : public EncoderRunner {
 public:
  DecoderEmbeddingRunner(const EmbeddingModel& model, tensor::ThreadPool* pool)
      : runner_(with_identity_head(*model.decoder), pool) {
    if (model.decoder->config.n_vocab < model.decoder->config.n_embd) {
      throw ModelError(
          fmt::format("[embed] {}: a vocabulary of {} cannot carry hidden states of {}", model.name,
                      model.decoder->config.n_vocab, model.decoder->config.n_embd));
    }
  }

  std::int64_t token_budget() const override { return kChunk; }

  void hidden_states(std::span<const std::int32_t> tokens, std::span<const std::int32_t> seq_indptr,
                     float* out) override {
    const ModelConfig& c = runner_.model().config;
    const std::int64_t n_seqs = static_cast<std::int64_t>(seq_indptr.size()) - 1;
    std::int32_t n_pages = 0;
    for (std::int64_t s = 0; s < n_seqs; ++s)
      n_pages += (seq_indptr[s + 1] - seq_indptr[s] + 15) / 16;
    KvCacheConfig kv_config = runner_.kv_config(std::max(n_pages, 1));
    kv_config.prefix_caching = false;
    KvCache kv(runner_.make_kv_storage(kv_config));
    std::vector<SeqId> seqs;
    for (std::int64_t s = 0; s < n_seqs; ++s) {
      seqs.push_back(kv.create());
      if (!kv.reserve(seqs.back(), seq_indptr[s + 1] - seq_indptr[s])) {
        throw Error("[embed] the KV cache sized for the batch has too few pages");
      }
    }
    // Chunks of at most kChunk tokens: whole inputs together, a longer input alone in pieces.
    std::vector<std::int32_t> qo{0}, lens, page_indptr{0}, pages, rows;
    std::vector<float> logits;
    auto flush = [&](std::int32_t first_token) {
      if (lens.empty()) return;
      rows.resize(static_cast<std::size_t>(qo.back()));
      for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int32_t>(i);
      logits.resize(rows.size() * static_cast<std::size_t>(c.n_vocab));
      ForwardBatch batch;
      batch.tokens = tokens.subspan(static_cast<std::size_t>(first_token), rows.size());
      batch.qo_indptr = qo;
      batch.seq_lens = lens;
      batch.page_indptr = page_indptr;
      batch.page_indices = pages;
      batch.logit_rows = rows;
      runner_.forward(batch, kv, logits);
      for (std::size_t r = 0; r < rows.size(); ++r) {
        std::copy_n(
            logits.data() + r * static_cast<std::size_t>(c.n_vocab), c.n_embd,
            out + (static_cast<std::size_t>(first_token) + r) * static_cast<std::size_t>(c.n_embd));
      }
      qo.assign(1, 0), lens.clear(), page_indptr.assign(1, 0), pages.clear();
    };
    auto add = [&](std::int64_t s,
                   std::int32_t end) {  // the input's tokens up to `end` (exclusive)
      const std::span<const std::int32_t> p = kv.pages(seqs[static_cast<std::size_t>(s)]);
      lens.push_back(end - seq_indptr[s]);
      pages.insert(pages.end(), p.begin(), p.begin() + (lens.back() + 15) / 16);
      page_indptr.push_back(static_cast<std::int32_t>(pages.size()));
    };
    std::int32_t batch_first = seq_indptr[0];
    for (std::int64_t s = 0; s < n_seqs; ++s) {
      const std::int32_t len = seq_indptr[s + 1] - seq_indptr[s];
      if (qo.back() + len > kChunk) {
        flush(batch_first);
        batch_first = seq_indptr[s];
      }
      if (len <= kChunk) {
        add(s, seq_indptr[s + 1]);
        qo.push_back(qo.back() + len);
        continue;
      }
      for (std::int32_t at = seq_indptr[s]; at < seq_indptr[s + 1]; at += kChunk) {
        const std::int32_t end = std::min<std::int32_t>(at + kChunk, seq_indptr[s + 1]);
        add(s, end);
        qo.push_back(end - at);
        flush(at);
      }
      batch_first = seq_indptr[s + 1];
    }
    flush(batch_first);
  }

 private:
  static constexpr std::int32_t kChunk = 128;  // logits rows are the whole vocabulary wide
  ModelRunner runner_;
};

}  // namespace

std::unique_ptr<EncoderRunner> make_decoder_embedding_runner(const EmbeddingModel& model,
                                                             tensor::ThreadPool* pool) {
  if (!model.decoder) throw ModelError("[embed] the model is not a decoder");
  return std::make_unique<DecoderEmbeddingRunner>(model, pool);
}

}  // namespace pie
