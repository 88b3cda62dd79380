// Reference paged attention: one query row at a time, every visible key gathered through the page table,
// two-pass softmax in double. Slow and obviously right; the fast and CUDA kernels are tested against it.
#include <tensor/half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attention_checks.h"
#include "pal/attention.h"

namespace pal {
namespace {

double load(const PagedKv& kv, const void* pool, std::int64_t index) {
  if (kv.dtype == tensor::DType::f16) {
    return tensor::f16_to_f32(static_cast<const std::uint16_t*>(pool)[index]);
  }
  return static_cast<const float*>(pool)[index];
}

// out[head_dim] = softmax(logits) . V over the keys of sequence `seq` visible from position `pos`.
void attend_row(const PagedKv& kv, const AttentionParams& p, std::int32_t seq, std::int32_t q_head,
                std::int64_t pos, const float* q, float* out) {
  const std::int32_t kv_head = q_head / (p.n_q_heads / kv.n_kv_heads);
  const std::int64_t first = p.sliding_window > 0 ? std::max<std::int64_t>(0, pos - p.sliding_window + 1) : 0;
  const std::int32_t* pages = kv.page_indices + kv.page_indptr[seq];
  std::vector<double> logits;
  logits.reserve(static_cast<std::size_t>(pos - first + 1));
  double max_logit = -INFINITY;
  for (std::int64_t j = first; j <= pos; ++j) {
    const std::int64_t base = kv_offset(kv, pages[j / kPageSize], j % kPageSize, kv_head);
    double dot = 0.0;
    for (std::int32_t d = 0; d < kv.head_dim; ++d) dot += static_cast<double>(q[d]) * load(kv, kv.k_pages, base + d);
    double logit = dot * p.scale;
    if (p.logit_soft_cap > 0.0f) logit = p.logit_soft_cap * std::tanh(logit / p.logit_soft_cap);
    logits.push_back(logit);
    max_logit = std::max(max_logit, logit);
  }
  double sum = 0.0;
  for (double& l : logits) {
    l = std::exp(l - max_logit);
    sum += l;
  }
  std::vector<double> acc(static_cast<std::size_t>(kv.head_dim), 0.0);
  for (std::int64_t j = first; j <= pos; ++j) {
    const std::int64_t base = kv_offset(kv, pages[j / kPageSize], j % kPageSize, kv_head);
    const double w = logits[static_cast<std::size_t>(j - first)] / sum;
    for (std::int32_t d = 0; d < kv.head_dim; ++d) acc[d] += w * load(kv, kv.v_pages, base + d);
  }
  for (std::int32_t d = 0; d < kv.head_dim; ++d) out[d] = static_cast<float>(acc[d]);
}

}  // namespace

void decode_attention_ref(const PagedKv& kv, const AttentionParams& params, const DecodeArgs& args) {
  detail::validate_decode(kv, params, args, "pal::decode_attention_ref");
  const std::int64_t row = static_cast<std::int64_t>(params.n_q_heads) * kv.head_dim;
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) {
    for (std::int32_t h = 0; h < params.n_q_heads; ++h) {
      const std::int64_t off = s * row + static_cast<std::int64_t>(h) * kv.head_dim;
      attend_row(kv, params, s, h, kv.seq_lens[s] - 1, args.q + off, args.out + off);
    }
  }
}

void prefill_attention_ref(const PagedKv& kv, const AttentionParams& params, const PrefillArgs& args) {
  detail::validate_prefill(kv, params, args, "pal::prefill_attention_ref");
  const std::int64_t row = static_cast<std::int64_t>(params.n_q_heads) * kv.head_dim;
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) {
    const std::int32_t n = args.qo_indptr[s + 1] - args.qo_indptr[s];
    for (std::int32_t i = 0; i < n; ++i) {
      const std::int64_t pos = kv.seq_lens[s] - n + i;
      for (std::int32_t h = 0; h < params.n_q_heads; ++h) {
        const std::int64_t off = (args.qo_indptr[s] + i) * row + static_cast<std::int64_t>(h) * kv.head_dim;
        attend_row(kv, params, s, h, pos, args.q + off, args.out + off);
      }
    }
  }
}

}  // namespace pal
