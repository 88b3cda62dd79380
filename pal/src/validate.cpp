// Input checks shared by the reference and fast attention kernels: they always run, before anything is
// written, and name the sequence / entry at fault.
#include <fmt/format.h>

#include <cmath>

#include "pal/attention.h"
#include "pal/error.h"
#include "pal/paged_kv.h"

namespace pal {

bool is_supported_head_dim(std::int32_t head_dim) {
  switch (head_dim) {
    case 64:
    case 80:
    case 96:
    case 128:
    case 256:
      return true;
    default:
      return false;
  }
}

void validate_paged_kv(const PagedKv& kv, const char* op) {
  // SIMD kernels exist for is_supported_head_dim(); any other even head dim takes the generic path.
  if (kv.head_dim < 2 || kv.head_dim % 2 != 0) {
    throw Error(fmt::format("[{}] head dim {} is not supported (an even number >= 2)", op, kv.head_dim));
  }
  if (kv.dtype != tensor::DType::f32 && kv.dtype != tensor::DType::f16) {
    throw Error(fmt::format("[{}] KV dtype {} is not supported (f32, f16)", op,
                            tensor::dtype_name(kv.dtype)));
  }
  if (kv.n_kv_heads <= 0) throw Error(fmt::format("[{}] n_kv_heads {} must be positive", op, kv.n_kv_heads));
  if (kv.n_pages < 0) throw Error(fmt::format("[{}] n_pages {} is negative", op, kv.n_pages));
  if (kv.n_seqs < 0) throw Error(fmt::format("[{}] n_seqs {} is negative", op, kv.n_seqs));
  if (kv.n_seqs == 0) return;
  if (kv.page_indptr == nullptr || kv.seq_lens == nullptr) {
    throw Error(fmt::format("[{}] page_indptr and seq_lens must be given for {} sequences", op, kv.n_seqs));
  }
  if (kv.page_indptr[0] != 0) {
    throw Error(fmt::format("[{}] page_indptr[0] is {}, must be 0", op, kv.page_indptr[0]));
  }
  bool any_pages = false;
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) {
    const std::int32_t len = kv.seq_lens[s];
    if (len < 0) throw Error(fmt::format("[{}] sequence {}: length {} is negative", op, s, len));
    const std::int64_t begin = kv.page_indptr[s];
    const std::int64_t end = kv.page_indptr[s + 1];
    if (end < begin) {
      throw Error(fmt::format("[{}] sequence {}: page_indptr goes backwards ({} then {})", op, s, begin, end));
    }
    const std::int64_t need = (static_cast<std::int64_t>(len) + kPageSize - 1) / kPageSize;
    if (end - begin != need) {
      throw Error(fmt::format("[{}] sequence {}: {} tokens need {} pages of {}, the page table gives {}", op,
                              s, len, need, kPageSize, end - begin));
    }
    any_pages = any_pages || need > 0;
  }
  if (!any_pages) return;
  if (kv.page_indices == nullptr || kv.k_pages == nullptr || kv.v_pages == nullptr) {
    throw Error(fmt::format("[{}] page_indices, k_pages and v_pages must be given", op));
  }
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) {
    for (std::int32_t i = kv.page_indptr[s]; i < kv.page_indptr[s + 1]; ++i) {
      const std::int32_t page = kv.page_indices[i];
      if (page < 0 || page >= kv.n_pages) {
        throw Error(fmt::format("[{}] sequence {}: page table entry {} is page {}, outside [0, {})", op, s,
                                i - kv.page_indptr[s], page, kv.n_pages));
      }
    }
  }
}

void validate_attention(const PagedKv& kv, const AttentionParams& params, const char* op) {
  validate_paged_kv(kv, op);
  if (params.n_q_heads <= 0 || params.n_q_heads % kv.n_kv_heads != 0) {
    throw Error(fmt::format("[{}] n_q_heads {} must be a positive multiple of n_kv_heads {}", op,
                            params.n_q_heads, kv.n_kv_heads));
  }
  if (!std::isfinite(params.scale)) throw Error(fmt::format("[{}] scale {} is not finite", op, params.scale));
  if (!(params.logit_soft_cap >= 0.0f) || !std::isfinite(params.logit_soft_cap)) {
    throw Error(fmt::format("[{}] logit_soft_cap {} must be finite and >= 0 (0 turns it off)", op,
                            params.logit_soft_cap));
  }
  if (params.sliding_window < 0) {
    throw Error(fmt::format("[{}] sliding_window {} is negative (0 turns it off)", op, params.sliding_window));
  }
}

}  // namespace pal

namespace pal::detail {

void validate_decode(const PagedKv& kv, const AttentionParams& params, const DecodeArgs& args,
                     const char* op) {
  validate_attention(kv, params, op);
  if (kv.n_seqs == 0) return;
  if (args.q == nullptr || args.out == nullptr) throw Error(fmt::format("[{}] q and out must be given", op));
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) {
    if (kv.seq_lens[s] == 0) {
      throw Error(fmt::format("[{}] sequence {}: length 0; decode needs the query token's K/V cached", op, s));
    }
  }
}

void validate_prefill(const PagedKv& kv, const AttentionParams& params, const PrefillArgs& args,
                      const char* op) {
  validate_attention(kv, params, op);
  if (kv.n_seqs == 0) return;
  if (args.qo_indptr == nullptr) throw Error(fmt::format("[{}] qo_indptr must be given", op));
  if (args.qo_indptr[0] != 0) {
    throw Error(fmt::format("[{}] qo_indptr[0] is {}, must be 0", op, args.qo_indptr[0]));
  }
  for (std::int32_t s = 0; s < kv.n_seqs; ++s) {
    const std::int64_t n = static_cast<std::int64_t>(args.qo_indptr[s + 1]) - args.qo_indptr[s];
    if (n < 0) {
      throw Error(fmt::format("[{}] sequence {}: qo_indptr goes backwards ({} then {})", op, s,
                              args.qo_indptr[s], args.qo_indptr[s + 1]));
    }
    if (n > kv.seq_lens[s]) {
      throw Error(fmt::format("[{}] sequence {}: {} query tokens but only {} cached tokens", op, s, n,
                              kv.seq_lens[s]));
    }
  }
  if (args.qo_indptr[kv.n_seqs] > 0 && (args.q == nullptr || args.out == nullptr)) {
    throw Error(fmt::format("[{}] q and out must be given", op));
  }
}

}  // namespace pal::detail
