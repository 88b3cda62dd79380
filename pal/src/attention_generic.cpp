// The fast CPU attention for head dims without a SIMD kernel (tiny models: stories260K's 8, test models'
// 16 or 24): one query row at a time, pages in order, online softmax per page in f32, the key chunks and
// merge of attention_merge.h. Slower than the SIMD kernels but the same structure, so decode and prefill
// rows agree bit for bit here too.
#include <tensor/half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attention_merge.h"
#include "attention_unit.h"

namespace pal::detail {
namespace {

inline float load(const PagedKv& kv, const void* pool, std::int64_t index) {
  if (kv.dtype == tensor::DType::f16) return tensor::f16_to_f32(static_cast<const std::uint16_t*>(pool)[index]);
  return static_cast<const float*>(pool)[index];
}

}  // namespace

void run_unit_generic(const AttentionUnit& u) {
  const PagedKv& kv = *u.kv;
  const AttentionParams& prm = *u.params;
  const std::int32_t D = kv.head_dim;
  const std::int32_t group = prm.n_q_heads / kv.n_kv_heads;
  const std::int32_t hg = u.n_heads * group;  // q heads of this unit per token
  const std::int64_t window = prm.sliding_window;
  const float cap = prm.logit_soft_cap;
  const std::int32_t* pages = kv.page_indices + kv.page_indptr[u.seq];
  // Scratch: o[D] | acc[D] | p[16] (unit_scratch_floats covers it for any unit).
  float* o = u.scratch;
  float* acc = o + D;
  float* p = acc + D;
  for (std::int32_t tok = 0; tok < u.n_tokens; ++tok) {
    const std::int64_t pos = u.first_pos + tok;
    std::int64_t lo = window > 0 ? std::max<std::int64_t>(0, pos - window + 1) : 0;
    lo = std::max(lo, u.key_begin);
    const std::int64_t hi = std::min(pos, u.key_end - 1);
    for (std::int32_t j = 0; j < hg; ++j) {
      const std::int32_t kv_head = u.kv_head + j / group;
      const float* q = u.q + tok * u.tok_stride + static_cast<std::int64_t>(j) * D;
      float m = -INFINITY, l = 0.0f, acc_m = -INFINITY, acc_l = 0.0f;
      std::fill(o, o + D, 0.0f);
      std::fill(acc, acc + D, 0.0f);
      float* partial = u.partial != nullptr ? u.partial + static_cast<std::int64_t>(j) * u.partial_stride : nullptr;
      auto close_chunk = [&](std::int64_t chunk) {
        if (partial != nullptr) {
          if (l != 0.0f) {
            float* dst = partial + chunk * (D + 2);
            std::copy(o, o + D, dst);
            dst[D] = m;
            dst[D + 1] = l;
          }
        } else {
          merge_chunk(D, o, m, l, acc, &acc_m, &acc_l);
        }
        m = -INFINITY;
        l = 0.0f;
        std::fill(o, o + D, 0.0f);
      };
      if (lo <= hi) {
        std::int64_t chunk = lo / kKeyChunk;
        for (std::int64_t pg = lo / kPageSize; pg <= hi / kPageSize; ++pg) {
          if (pg / kPagesPerChunk != chunk) {
            close_chunk(chunk);
            chunk = pg / kPagesPerChunk;
          }
          const std::int64_t base = pg * kPageSize;
          const int a = static_cast<int>(std::max<std::int64_t>(lo - base, 0));
          const int b = static_cast<int>(std::min<std::int64_t>(hi + 1 - base, kPageSize));
          float page_max = -INFINITY;
          for (int t = a; t < b; ++t) {
            const std::int64_t k0 = kv_offset(kv, pages[pg], t, kv_head);
            float dot = 0.0f;
            for (std::int32_t i = 0; i < D; ++i) dot += q[i] * load(kv, kv.k_pages, k0 + i);
            float x = dot * prm.scale;
            if (cap > 0.0f) x = cap * std::tanh(x / cap);
            p[t] = x;
            page_max = std::max(page_max, x);
          }
          const float m_new = std::max(m, page_max);
          const float alpha = std::exp(m - m_new);
          m = m_new;
          float sum = 0.0f;
          for (int t = a; t < b; ++t) {
            p[t] = std::exp(p[t] - m_new);
            sum += p[t];
          }
          l = l * alpha + sum;
          for (std::int32_t i = 0; i < D; ++i) o[i] *= alpha;
          for (int t = a; t < b; ++t) {
            const std::int64_t v0 = kv_offset(kv, pages[pg], t, kv_head);
            for (std::int32_t i = 0; i < D; ++i) o[i] += p[t] * load(kv, kv.v_pages, v0 + i);
          }
        }
        close_chunk(chunk);
      }
      if (partial == nullptr) finish_row(D, acc, acc_l, u.out + tok * u.tok_stride + static_cast<std::int64_t>(j) * D);
    }
  }
}

}  // namespace pal::detail
