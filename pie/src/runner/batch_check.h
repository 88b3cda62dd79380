// Validation of a ForwardBatch against the model and the KV cache, before anything is computed or written
// (private to the runner).
#pragma once

#include <cstdint>
#include <span>

#include "pie/kv_cache.h"
#include "pie/model.h"
#include "pie/runner.h"

namespace pie::detail {

// Throws pie::Error naming the field, the sequence or row, and the offending value: malformed
// qo_indptr / page_indptr, sizes that disagree, a sequence with more query tokens than tokens, a page
// count other than ceil(seq_lens[s] / 16), a page outside the cache, a token id outside [0, n_vocab), a
// logit row outside the batch, or a logits span smaller than logit_rows.size() * n_vocab.
void check_batch(const ForwardBatch& batch, const ModelConfig& config, const KvCacheConfig& kv,
                 std::size_t logits_size);

// Throws pie::Error when the cache's shape is not the one this model needs.
void check_kv_config(const KvCacheConfig& kv, const ModelConfig& config);

}  // namespace pie::detail
