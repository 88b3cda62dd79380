#include "runner/batch_check.h"

#include <fmt/format.h>

#include "pie/error.h"

namespace pie::detail {

void check_kv_config(const KvCacheConfig& kv, const ModelConfig& config) {
  if (kv.n_layer != config.n_layer || kv.n_kv_head != config.n_kv_head || kv.head_dim != config.head_dim) {
    throw Error(fmt::format("[runner] the KV cache holds {} layers x {} KV heads x head dim {}; the model needs "
                            "{} x {} x {}", kv.n_layer, kv.n_kv_head, kv.head_dim, config.n_layer,
                            config.n_kv_head, config.head_dim));
  }
  if (kv.dtype != tensor::DType::f32 && kv.dtype != tensor::DType::f16) {
    throw Error(fmt::format("[runner] KV cache dtype {} is not supported (f32, f16)", tensor::dtype_name(kv.dtype)));
  }
}

void check_batch(const ForwardBatch& b, const ModelConfig& config, const KvCacheConfig& kv,
                 std::size_t logits_size) {
  check_kv_config(kv, config);
  if (b.qo_indptr.empty()) throw Error("[runner] qo_indptr is empty; it needs n_seqs + 1 entries");
  const std::size_t n_seqs = b.qo_indptr.size() - 1;
  if (b.seq_lens.size() != n_seqs) {
    throw Error(fmt::format("[runner] seq_lens has {} entries for {} sequences", b.seq_lens.size(), n_seqs));
  }
  if (b.page_indptr.size() != n_seqs + 1) {
    throw Error(fmt::format("[runner] page_indptr has {} entries for {} sequences (needs {})",
                            b.page_indptr.size(), n_seqs, n_seqs + 1));
  }
  if (b.qo_indptr[0] != 0) throw Error(fmt::format("[runner] qo_indptr[0] is {}, must be 0", b.qo_indptr[0]));
  if (b.page_indptr[0] != 0) {
    throw Error(fmt::format("[runner] page_indptr[0] is {}, must be 0", b.page_indptr[0]));
  }
  for (std::size_t s = 0; s < n_seqs; ++s) {
    const std::int64_t n_q = static_cast<std::int64_t>(b.qo_indptr[s + 1]) - b.qo_indptr[s];
    if (n_q < 0) {
      throw Error(fmt::format("[runner] sequence {}: qo_indptr goes backwards ({} then {})", s, b.qo_indptr[s],
                              b.qo_indptr[s + 1]));
    }
    const std::int64_t len = b.seq_lens[s];
    if (len < n_q) {
      throw Error(fmt::format("[runner] sequence {}: {} query tokens but seq_lens is {}", s, n_q, len));
    }
    const std::int64_t n_pages = static_cast<std::int64_t>(b.page_indptr[s + 1]) - b.page_indptr[s];
    const std::int64_t need = (len + kKvPageSize - 1) / kKvPageSize;
    if (n_pages != need) {
      throw Error(fmt::format("[runner] sequence {}: {} tokens need {} pages, the page table gives {}", s, len,
                              need, n_pages));
    }
  }
  if (static_cast<std::size_t>(b.qo_indptr[n_seqs]) != b.tokens.size()) {
    throw Error(fmt::format("[runner] qo_indptr ends at {} but the batch has {} tokens", b.qo_indptr[n_seqs],
                            b.tokens.size()));
  }
  if (b.page_indptr[n_seqs] < 0 || static_cast<std::size_t>(b.page_indptr[n_seqs]) > b.page_indices.size()) {
    throw Error(fmt::format("[runner] page_indptr ends at {} but page_indices has {} entries",
                            b.page_indptr[n_seqs], b.page_indices.size()));
  }
  for (std::size_t s = 0; s < n_seqs; ++s) {
    for (std::int32_t i = b.page_indptr[s]; i < b.page_indptr[s + 1]; ++i) {
      const std::int32_t page = b.page_indices[static_cast<std::size_t>(i)];
      if (page < 0 || page >= kv.n_pages) {
        throw Error(fmt::format("[runner] sequence {}: page table entry {} is page {}, outside [0, {})", s,
                                i - b.page_indptr[s], page, kv.n_pages));
      }
    }
  }
  for (std::size_t t = 0; t < b.tokens.size(); ++t) {
    if (b.tokens[t] < 0 || b.tokens[t] >= config.n_vocab) {
      throw Error(fmt::format("[runner] token {} is id {}, outside [0, {})", t, b.tokens[t], config.n_vocab));
    }
  }
  for (std::size_t r = 0; r < b.logit_rows.size(); ++r) {
    if (b.logit_rows[r] < 0 || static_cast<std::size_t>(b.logit_rows[r]) >= b.tokens.size()) {
      throw Error(fmt::format("[runner] logit_rows[{}] is {}, outside the batch's {} tokens", r, b.logit_rows[r],
                              b.tokens.size()));
    }
  }
  const std::size_t need = b.logit_rows.size() * static_cast<std::size_t>(config.n_vocab);
  if (logits_size < need) {
    throw Error(fmt::format("[runner] logits holds {} floats; {} rows x {} vocab need {}", logits_size,
                            b.logit_rows.size(), config.n_vocab, need));
  }
}

}  // namespace pie::detail
