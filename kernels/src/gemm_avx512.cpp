// AVX-512 panel kernel of kernels/gemm.h: 12 tokens x 32 outputs (24 zmm accumulators) per register tile,
// each step loading one k of the panel (two zmm) and broadcasting each token's activation.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "gemm_internal.h"
#include "kernels/gemm.h"
#include "ops_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#endif

namespace kernels::detail {
namespace {

static_assert(kGemmPanel == 32, "the tile holds a panel as two zmm");
constexpr int kTileTokens = 12;

template <int M>
void tile(const float* panel, std::int64_t n_in, const float* x, float* y, std::size_t y_stride, const float* bias,
          bool gelu, int n_valid) {
  __m512 acc[M][2];
  for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
  const float* xr[M];
  for (int m = 0; m < M; ++m) xr[m] = x + m * n_in;
  for (std::int64_t k = 0; k < n_in; ++k) {
    const __m512 w0 = _mm512_load_ps(panel + k * kGemmPanel);
    const __m512 w1 = _mm512_load_ps(panel + k * kGemmPanel + 16);
    for (int m = 0; m < M; ++m) {
      const __m512 a = _mm512_set1_ps(xr[m][k]);
      acc[m][0] = _mm512_fmadd_ps(a, w0, acc[m][0]);
      acc[m][1] = _mm512_fmadd_ps(a, w1, acc[m][1]);
    }
  }
  const __mmask16 lo = n_valid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n_valid) - 1);
  const __mmask16 hi = n_valid >= 32 ? __mmask16(0xFFFF) : n_valid <= 16 ? __mmask16(0) : __mmask16((1u << (n_valid - 16)) - 1);
  for (int m = 0; m < M; ++m) {
    if (bias != nullptr) {
      acc[m][0] = _mm512_add_ps(acc[m][0], _mm512_loadu_ps(bias));
      acc[m][1] = _mm512_add_ps(acc[m][1], _mm512_loadu_ps(bias + 16));
    }
    float* row = y + m * y_stride;
    _mm512_mask_storeu_ps(row, lo, acc[m][0]);
    _mm512_mask_storeu_ps(row + 16, hi, acc[m][1]);
    if (gelu) avx2::gelu_erf(n_valid, row, row);
  }
}

void panel_kernel(const float* panel, std::int64_t n_in, const float* x, std::int64_t n_tokens, float* y,
                  std::size_t y_stride, const float* bias, bool gelu, int n_valid) {
  std::int64_t t = 0;
  for (; t + kTileTokens <= n_tokens; t += kTileTokens) {
    tile<kTileTokens>(panel, n_in, x + t * n_in, y + t * y_stride, y_stride, bias, gelu, n_valid);
  }
  const float* xt = x + t * n_in;
  float* yt = y + t * y_stride;
  switch (n_tokens - t) {
    case 0: break;
    case 1: tile<1>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 2: tile<2>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 3: tile<3>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 4: tile<4>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 5: tile<5>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 6: tile<6>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 7: tile<7>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 8: tile<8>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 9: tile<9>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    case 10: tile<10>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
    default: tile<11>(panel, n_in, xt, yt, y_stride, bias, gelu, n_valid); break;
  }
}

}  // namespace

GemmPanelFn gemm_panel_avx512() { return panel_kernel; }

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
