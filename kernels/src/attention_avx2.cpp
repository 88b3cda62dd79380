// AVX2 + FMA kernel of kernels/attention.h: one (sequence, head) as two small products. The keys are
// transposed once (kt [head_dim, len8]); four queries at a time get their scores against eight keys per
// vector (a broadcast query value times a row of kt), each score row goes through the softmax of
// kernels/ops.h, and out = p v as broadcast probabilities times value rows, 32 values of the head at once.
#include <immintrin.h>

#include <algorithm>

#include "attention_internal.h"
#include "ops_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace kernels::detail::avx2 {
namespace {

constexpr int kQueryBlock = 4;

std::int64_t padded(std::int64_t len) { return (len + 7) / 8 * 8; }

// scores[r * len8 + j] = q_r . k_j for R queries and every key (j < len8; the padding keys are zero).
template <int R>
void scores_block(const float* q, std::int64_t q_stride, const float* kt, std::int64_t head_dim, std::int64_t len8,
                  float* scores) {
  for (std::int64_t j = 0; j < len8; j += 8) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (std::int64_t e = 0; e < head_dim; ++e) {
      const __m256 kv = _mm256_loadu_ps(kt + e * len8 + j);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + r * q_stride + e), kv, acc[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(scores + r * len8 + j, acc[r]);
  }
}

// out[0 .. head_dim) = sum_j probs[j] v_j.
void weighted_values(const float* probs, const float* v, std::int64_t v_stride, std::int64_t len,
                     std::int64_t head_dim, float* out) {
  std::int64_t e = 0;
  for (; e + 32 <= head_dim; e += 32) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (std::int64_t j = 0; j < len; ++j) {
      const __m256 pj = _mm256_broadcast_ss(probs + j);
      const float* vj = v + j * v_stride + e;
      a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj), a0);
      a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8), a1);
      a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 16), a2);
      a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 24), a3);
    }
    _mm256_storeu_ps(out + e, a0);
    _mm256_storeu_ps(out + e + 8, a1);
    _mm256_storeu_ps(out + e + 16, a2);
    _mm256_storeu_ps(out + e + 24, a3);
  }
  for (; e < head_dim; e += 8) {
    __m256 a = _mm256_setzero_ps();
    for (std::int64_t j = 0; j < len; ++j) {
      a = _mm256_fmadd_ps(_mm256_broadcast_ss(probs + j), _mm256_loadu_ps(v + j * v_stride + e), a);
    }
    _mm256_storeu_ps(out + e, a);
  }
}

}  // namespace

std::int64_t attention_scratch_floats(std::int64_t len, std::int64_t head_dim) {
  return (head_dim + kQueryBlock) * padded(len);
}

void attention_head(const BidirectionalAttentionParams& p, const float* q, const float* k, const float* v,
                    std::int64_t len, float* out, float* scratch) {
  const std::int64_t hd = p.head_dim, len8 = padded(len);
  float* kt = scratch;                // [hd, len8]
  float* scores = kt + hd * len8;     // [kQueryBlock, len8]
  for (std::int64_t e = 0; e < hd; ++e) {
    float* row = kt + e * len8;
    for (std::int64_t j = 0; j < len; ++j) row[j] = k[j * p.k_stride + e];
    std::fill(row + len, row + len8, 0.0f);
  }
  for (std::int64_t i = 0; i < len; i += kQueryBlock) {
    const int rows = static_cast<int>(std::min<std::int64_t>(kQueryBlock, len - i));
    const float* qi = q + i * p.q_stride;
    switch (rows) {
      case 1: scores_block<1>(qi, p.q_stride, kt, hd, len8, scores); break;
      case 2: scores_block<2>(qi, p.q_stride, kt, hd, len8, scores); break;
      case 3: scores_block<3>(qi, p.q_stride, kt, hd, len8, scores); break;
      default: scores_block<4>(qi, p.q_stride, kt, hd, len8, scores); break;
    }
    for (int r = 0; r < rows; ++r) {
      float* s = scores + r * len8;
      softmax({1, len, p.scale}, s, s);  // finite scores: never an all -inf row
      weighted_values(s, v, p.v_stride, len, hd, out + (i + r) * p.out_stride);
    }
  }
}

}  // namespace kernels::detail::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
