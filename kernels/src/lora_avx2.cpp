// AVX2 + FMA LoRA kernels. Shrink: register tiles of up to four rows, so that A is read once per four rows;
// expand: B's rows (the adapter's [n_out, rank]) dotted with t eight columns at a time, a block of B kept in
// L1 while every row reads it. Each (row, rank) sum of the shrink and each (row, column) sum of the expand
// has an accumulator of its own, fed in an order fixed by the shapes and the column's position: a row's
// result does not depend on the rows beside it.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "lora_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace kernels::detail::avx2 {
namespace {

#include "horizontal_x86.inl"

// t[r][k + kk] = x[r] . a[k + kk] for R rows and K ranks: 8-lane partial sums, a scalar tail, then the lanes.
template <int R, int K>
void shrink_tile(const float* const* x, const float* a, std::int64_t n_in, std::int64_t k, float* const* t) {
  __m256 acc[R][K];
  float tail[R][K];
  for (int r = 0; r < R; ++r) {
    for (int kk = 0; kk < K; ++kk) {
      acc[r][kk] = _mm256_setzero_ps();
      tail[r][kk] = 0.0f;
    }
  }
  const float* ak[K];
  for (int kk = 0; kk < K; ++kk) ak[kk] = a + (k + kk) * n_in;
  std::int64_t j = 0;
  for (; j + 8 <= n_in; j += 8) {
    __m256 av[K];
    for (int kk = 0; kk < K; ++kk) av[kk] = _mm256_loadu_ps(ak[kk] + j);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x[r] + j);
      for (int kk = 0; kk < K; ++kk) acc[r][kk] = _mm256_fmadd_ps(xv, av[kk], acc[r][kk]);
    }
  }
  for (; j < n_in; ++j) {
    for (int r = 0; r < R; ++r) {
      for (int kk = 0; kk < K; ++kk) tail[r][kk] = std::fmaf(x[r][j], ak[kk][j], tail[r][kk]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int kk = 0; kk < K; ++kk) t[r][k + kk] = hsum_float_8(acc[r][kk]) + tail[r][kk];
  }
}

template <int R>
void shrink_rows(const float* const* x, const float* a, std::int64_t n_in, std::int64_t rank, float* const* t) {
  std::int64_t k = 0;
  for (; k + 2 <= rank; k += 2) shrink_tile<R, 2>(x, a, n_in, k, t);
  if (k < rank) shrink_tile<R, 1>(x, a, n_in, k, t);
}

// Lane c of the result: the sum of a[c]'s eight lanes (a transpose-and-add of eight vectors).
inline __m256 hsum_each_8(const __m256* a) {
  const __m256 q0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 q1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
}

// t . b over k in [0, rank): 8-lane partial sums, then the lanes, then a scalar tail.
inline float dot_rank(const float* t, const float* b, std::int64_t rank) {
  const std::int64_t kv = rank & ~std::int64_t{7};
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < kv; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(t + k), _mm256_loadu_ps(b + k), acc);
  float s = hsum_float_8(acc);
  for (std::int64_t k = kv; k < rank; ++k) s = std::fmaf(t[k], b[k], s);
  return s;
}

// y[j] += scale t . b[j] for j in [j0, j1), B [n_out, rank] read along its rows: eight columns at a time
// (eight dot products summed across lanes at once), then one at a time.
void expand_row(const float* t, const float* b, std::int64_t rank, float scale, std::int64_t j0, std::int64_t j1,
                float* y) {
  const std::int64_t kv = rank & ~std::int64_t{7};
  const __m256 sv = _mm256_set1_ps(scale);
  std::int64_t j = j0;
  for (; j + 8 <= j1; j += 8) {
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for (std::int64_t k = 0; k < kv; k += 8) {
      const __m256 tv = _mm256_loadu_ps(t + k);
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(_mm256_loadu_ps(b + (j + c) * rank + k), tv, acc[c]);
    }
    __m256 s = hsum_each_8(acc);
    if (kv < rank) {
      alignas(32) float tail[8];
      for (int c = 0; c < 8; ++c) {
        float x = 0.0f;
        for (std::int64_t k = kv; k < rank; ++k) x = std::fmaf(t[k], b[(j + c) * rank + k], x);
        tail[c] = x;
      }
      s = _mm256_add_ps(s, _mm256_load_ps(tail));
    }
    _mm256_storeu_ps(y + j, _mm256_fmadd_ps(sv, s, _mm256_loadu_ps(y + j)));
  }
  for (; j < j1; ++j) y[j] = std::fmaf(scale, dot_rank(t, b + j * rank, rank), y[j]);
}

}  // namespace

void lora_shrink(const LoraShrinkParams& p, float* t) {
  for (std::int64_t i0 = 0; i0 < p.rows.n; i0 += 4) {
    const float* x[4];
    float* tr[4];
    const int n = static_cast<int>(p.rows.n - i0 < 4 ? p.rows.n - i0 : 4);
    for (int r = 0; r < n; ++r) {
      x[r] = p.x + static_cast<std::int64_t>(p.rows.index[i0 + r]) * p.x_stride;
      tr[r] = t + (i0 + r) * p.rank;
    }
    switch (n) {
      case 4: shrink_rows<4>(x, p.a, p.n_in, p.rank, tr); break;
      case 3: shrink_rows<3>(x, p.a, p.n_in, p.rank, tr); break;
      case 2: shrink_rows<2>(x, p.a, p.n_in, p.rank, tr); break;
      default: shrink_rows<1>(x, p.a, p.n_in, p.rank, tr); break;
    }
  }
}

void lora_expand(const LoraExpandParams& p) {
  // Columns in blocks of 64 (B's block, 64 rows of rank floats, stays in L1 while every row reads it).
  constexpr std::int64_t kBlock = 64;
  for (std::int64_t j0 = p.col_begin; j0 < p.col_end; j0 += kBlock) {
    const std::int64_t j1 = j0 + kBlock < p.col_end ? j0 + kBlock : p.col_end;
    for (std::int64_t i = 0; i < p.rows.n; ++i) {
      expand_row(p.t + i * p.rank, p.b, p.rank, p.scale, j0, j1,
                 p.y + static_cast<std::int64_t>(p.rows.index[i]) * p.y_stride);
    }
  }
}

}  // namespace kernels::detail::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
