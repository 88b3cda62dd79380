// AVX2 panel kernel of kernels/gemm.h: 6 tokens x 16 outputs (12 ymm accumulators) per register tile, a
// panel's two halves one after the other; each step loads one k of the half panel (two ymm) and
// broadcasts each token's activation.
#include <immintrin.h>

#include <algorithm>

#include "gemm_internal.h"
#include "kernels/gemm.h"
#include "ops_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace kernels::detail {
namespace {

constexpr int kTileTokens = 6;

// Outputs [col, col + 16) of the panel (n_valid of them real, 1..16).
template <int M>
void tile(const float* panel, int col, std::int64_t n_in, const float* x, float* y, std::size_t y_stride,
          const float* bias, bool gelu, int n_valid) {
  __m256 acc[M][2];
  for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  const float* xr[M];
  for (int m = 0; m < M; ++m) xr[m] = x + m * n_in;
  const float* p = panel + col;
  for (std::int64_t k = 0; k < n_in; ++k) {
    const __m256 w0 = _mm256_load_ps(p + k * kGemmPanel);
    const __m256 w1 = _mm256_load_ps(p + k * kGemmPanel + 8);
    for (int m = 0; m < M; ++m) {
      const __m256 a = _mm256_broadcast_ss(xr[m] + k);
      acc[m][0] = _mm256_fmadd_ps(a, w0, acc[m][0]);
      acc[m][1] = _mm256_fmadd_ps(a, w1, acc[m][1]);
    }
  }
  for (int m = 0; m < M; ++m) {
    if (bias != nullptr) {
      acc[m][0] = _mm256_add_ps(acc[m][0], _mm256_loadu_ps(bias + col));
      acc[m][1] = _mm256_add_ps(acc[m][1], _mm256_loadu_ps(bias + col + 8));
    }
    float* row = y + m * y_stride + col;
    if (n_valid == 16) {
      _mm256_storeu_ps(row, acc[m][0]);
      _mm256_storeu_ps(row + 8, acc[m][1]);
    } else {
      alignas(32) float buf[16];
      _mm256_store_ps(buf, acc[m][0]);
      _mm256_store_ps(buf + 8, acc[m][1]);
      std::copy(buf, buf + n_valid, row);
    }
    if (gelu) avx2::gelu_erf(n_valid, row, row);
  }
}

template <int M>
void tile_both_halves(const float* panel, std::int64_t n_in, const float* x, float* y, std::size_t y_stride,
                      const float* bias, bool gelu, int n_valid) {
  tile<M>(panel, 0, n_in, x, y, y_stride, bias, gelu, std::min(n_valid, 16));
  if (n_valid > 16) tile<M>(panel, 16, n_in, x, y, y_stride, bias, gelu, n_valid - 16);
}

void panel_kernel(const float* panel, std::int64_t n_in, const float* x, std::int64_t n_tokens, float* y,
                  std::size_t y_stride, const float* bias, bool gelu, int n_valid) {
  std::int64_t t = 0;
  for (; t + kTileTokens <= n_tokens; t += kTileTokens) {
    tile_both_halves<kTileTokens>(panel, n_in, x + t * n_in, y + t * y_stride, y_stride, bias, gelu, n_valid);
  }
  const float* xt = x + t * n_in;
  float* yt = y + t * y_stride;
  switch (n_tokens - t) {
    case 0: break;
    case 1: tile_both_halves<1>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 2: tile_both_halves<2>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 3: tile_both_halves<3>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 4: tile_both_halves<4>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    default: tile_both_halves<5>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
  }
}

}  // namespace

GemmPanelFn gemm_panel_avx2() { return panel_kernel; }

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
