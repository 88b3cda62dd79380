// AVX2 + FMA LoRA kernels: register tiles of up to four rows, so that A (shrink) and B (expand) are read
// once per four rows instead of once per row. Each (row, rank) sum of the shrink and each (row, column) sum
// of the expand has an accumulator of its own, fed in the same order whatever the tile's height: a row's
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

inline float hsum(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

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
    for (int kk = 0; kk < K; ++kk) t[r][k + kk] = hsum(acc[r][kk]) + tail[r][kk];
  }
}

template <int R>
void shrink_rows(const float* const* x, const float* a, std::int64_t n_in, std::int64_t rank, float* const* t) {
  std::int64_t k = 0;
  for (; k + 2 <= rank; k += 2) shrink_tile<R, 2>(x, a, n_in, k, t);
  if (k < rank) shrink_tile<R, 1>(x, a, n_in, k, t);
}

// y[r][j..] += sum_k c[r][k] bt[k][j..] for R rows over columns [j0, j1): 16 columns at a time, then 8,
// then one.
template <int R>
void expand_rows(const float* const* c, const float* bt, std::int64_t n_out, std::int64_t rank, std::int64_t j0,
                 std::int64_t j1, float* const* y) {
  std::int64_t j = j0;
  for (; j + 16 <= j1; j += 16) {
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (std::int64_t k = 0; k < rank; ++k) {
      const __m256 b0 = _mm256_loadu_ps(bt + k * n_out + j);
      const __m256 b1 = _mm256_loadu_ps(bt + k * n_out + j + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 cv = _mm256_broadcast_ss(c[r] + k);
        acc[r][0] = _mm256_fmadd_ps(cv, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(cv, b1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(y[r] + j, _mm256_add_ps(_mm256_loadu_ps(y[r] + j), acc[r][0]));
      _mm256_storeu_ps(y[r] + j + 8, _mm256_add_ps(_mm256_loadu_ps(y[r] + j + 8), acc[r][1]));
    }
  }
  for (; j + 8 <= j1; j += 8) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (std::int64_t k = 0; k < rank; ++k) {
      const __m256 b0 = _mm256_loadu_ps(bt + k * n_out + j);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(c[r] + k), b0, acc[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(y[r] + j, _mm256_add_ps(_mm256_loadu_ps(y[r] + j), acc[r]));
  }
  for (; j < j1; ++j) {
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
      for (std::int64_t k = 0; k < rank; ++k) s = std::fmaf(c[r][k], bt[k * n_out + j], s);
      y[r][j] += s;
    }
  }
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
  // The rows' shrunk values scaled once: c = scale t (at most four rows of rank 256 at a time).
  alignas(32) float scaled[4 * 256];
  for (std::int64_t i0 = 0; i0 < p.rows.n; i0 += 4) {
    const int n = static_cast<int>(p.rows.n - i0 < 4 ? p.rows.n - i0 : 4);
    const float* c[4];
    float* y[4];
    for (std::int64_t k0 = 0; k0 < p.rank; k0 += 256) {
      // Ranks past 256 (not met in practice: adapters are bounded there) run in slices of 256.
      const std::int64_t kn = p.rank - k0 < 256 ? p.rank - k0 : 256;
      for (int r = 0; r < n; ++r) {
        const float* t = p.t + (i0 + r) * p.rank + k0;
        float* cr = scaled + r * 256;
        for (std::int64_t k = 0; k < kn; ++k) cr[k] = p.scale * t[k];
        c[r] = cr;
        y[r] = p.y + static_cast<std::int64_t>(p.rows.index[i0 + r]) * p.y_stride;
      }
      const float* bt = p.bt + k0 * p.n_out;
      switch (n) {
        case 4: expand_rows<4>(c, bt, p.n_out, kn, p.col_begin, p.col_end, y); break;
        case 3: expand_rows<3>(c, bt, p.n_out, kn, p.col_begin, p.col_end, y); break;
        case 2: expand_rows<2>(c, bt, p.n_out, kn, p.col_begin, p.col_end, y); break;
        default: expand_rows<1>(c, bt, p.n_out, kn, p.col_begin, p.col_end, y); break;
      }
    }
  }
}

}  // namespace kernels::detail::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
