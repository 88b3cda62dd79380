// AVX-512/VNNI kernels of q4_1 weights in the q4_1_x16 layout (kernels/matmul.h) against q8_0 activations
// in runs (ActRun, q4_1_x16.h): one template of R weight rows x T tokens. matvec runs it with R = T = 1,
// matmul with four rows at 1 token, two rows at 2..4 (four rows x 2 tokens spilled its accumulators and
// was slower on Zen 4), and more tokens in runs of four.
//
// Per run of 16 blocks and (row, token), one 32-bit lane per block, with q the nibbles as u8 and y the
// activation levels:
//   D = sum over the run's 4 chunks j of vpdpbusd(lo nibbles_j, y_lo_j) then vpdpbusd(hi nibbles_j, y_hi_j)
//   acc += (d_w * d_y) * f32(D);  acc += m_w * (d_y * sum(y))
// so one unpack of a chunk serves 16 blocks, and the f32 scaling runs once per 16 blocks (eight vpdpbusd
// and four f32 operations per 16 blocks and (row, token), against twelve and sixteen in four-block groups).
// Every (row, token) accumulator goes through the same operations in the same order whatever R and T are:
// a token's result is bit-identical through matvec and matmul (batch invariance). A row's last c < 16
// blocks (576 = 16 + 2 blocks: most of the default model's rows) stay plain and go two blocks a vpdpbusd,
// as the plain layout's kernels take them: a run of 16 lanes for two blocks would cost a whole run.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "dot.h"
#include "q4_1_x16.h"
#include "quant_common.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif

namespace kernels::detail {
namespace avx512_x16 {
namespace {

#include "tile_avx512.inl"

constexpr std::size_t kRunBytes = kRunBlocks * sizeof(tensor::BlockQ4_1);  // 320

// One run of 16 blocks of R rows (wr[r]: the run's start in row r) against T tokens' ActRuns.
template <int R, int T>
inline void run(const unsigned char* const (&wr)[R], const ActRun* const (&x)[T], __m512 (&acc)[R][T]) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  // Few (row, token) pairs leave vpdpbusd's latency exposed: their sums run in C chains, added at the end
  // (integer sums: the same bits however they are split).
  constexpr int C = R * T == 1 ? 4 : R * T == 2 ? 2 : 1;
  __m512i dot[C][R][T];
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) dot[c][r][t] = _mm512_setzero_si512();
    }
  }
  for (int j = 0; j < 4; ++j) {
    __m512i lo[R], hi[R];
    for (int r = 0; r < R; ++r) {
      const __m512i v = _mm512_loadu_si512(wr[r] + 64 + 64 * j);
      lo[r] = _mm512_and_si512(v, low);
      hi[r] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
    for (int t = 0; t < T; ++t) {
      const __m512i ylo = _mm512_loadu_si512(x[t]->lo[j]);
      const __m512i yhi = _mm512_loadu_si512(x[t]->hi[j]);
      for (int r = 0; r < R; ++r) {
        __m512i& a = dot[(2 * j) % C][r][t];
        a = _mm512_dpbusd_epi32(a, lo[r], ylo);
        __m512i& b = dot[(2 * j + 1) % C][r][t];
        b = _mm512_dpbusd_epi32(b, hi[r], yhi);
      }
    }
  }
  for (int c = 1; c < C; ++c) {
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) dot[0][r][t] = _mm512_add_epi32(dot[0][r][t], dot[c][r][t]);
    }
  }
  __m512 wd[R], wm[R];
  for (int r = 0; r < R; ++r) {
    wd[r] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r])));
    wm[r] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r] + 32)));
  }
  for (int t = 0; t < T; ++t) {
    const __m512 yd = _mm512_loadu_ps(x[t]->d);
    const __m512 ys = _mm512_loadu_ps(x[t]->s);
    for (int r = 0; r < R; ++r) {
      acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(wd[r], yd), _mm512_cvtepi32_ps(dot[0][r][t]), acc[r][t]);
      acc[r][t] = _mm512_fmadd_ps(wm[r], ys, acc[r][t]);
    }
  }
}

// [v[0] x 8 | v[1] x 8]
inline __m512 halves(const float* v) {
  const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                               _mm512_castps128_ps512(two));
}

// A row's last c < 16 blocks (plain q4_1 blocks, tb[r] in row r) two at a time, against the last ActRun of
// each token (its blocks' 32 levels side by side): one vpdpbusd per pair, each block's sum in 8 lanes (a
// lone last block paired with zeros).
template <int R, int T>
inline void tail(const tensor::BlockQ4_1* const (&tb)[R], int c, const ActRun* const (&x)[T], __m512 (&acc)[R][T]) {
  alignas(16) static const std::uint8_t kZero[16] = {};
  for (int p = 0; 2 * p < c; ++p) {
    const bool two = 2 * p + 1 < c;
    __m512i q[R];
    __m512 wd[R], wm[R];
    for (int r = 0; r < R; ++r) {
      const tensor::BlockQ4_1& b0 = tb[r][2 * p];
      q[r] = nibbles_pair(b0.qs, two ? tb[r][2 * p + 1].qs : kZero);
      wd[r] = scale_pair(b0.d, two ? tb[r][2 * p + 1].d : std::uint16_t{0});
      wm[r] = _mm512_maskz_mov_ps(0x0101, scale_pair(b0.m, two ? tb[r][2 * p + 1].m : std::uint16_t{0}));
    }
    for (int t = 0; t < T; ++t) {
      const __m512i y = _mm512_loadu_si512(reinterpret_cast<const unsigned char*>(x[t]) + 64 * p);  // lo, then hi
      const __m512 yd = halves(x[t]->d + 2 * p), ys = halves(x[t]->s + 2 * p);
      for (int r = 0; r < R; ++r) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[r], y);
        acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(wd[r], yd), _mm512_cvtepi32_ps(dot), acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(wm[r], ys, acc[r][t]);
      }
    }
  }
}

// x: T ActRun rows x_stride bytes apart.
template <int R, int T>
void tile(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, float* y,
          std::size_t y_stride) {
  const auto* w0 = static_cast<const unsigned char*>(w);
  const std::int64_t nb = n / kQK, full = nb / kRunBlocks;
  const int n_tail = static_cast<int>(nb % kRunBlocks);
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const TilePrefetch prefetch(w, R * stride, full + 1);
  const unsigned char* wr[R];
  const ActRun* xr[T];
  auto at = [&](std::int64_t g) {
    for (int r = 0; r < R; ++r) wr[r] = w0 + r * stride + static_cast<std::size_t>(g) * kRunBytes;
    for (int t = 0; t < T; ++t) {
      xr[t] = reinterpret_cast<const ActRun*>(static_cast<const unsigned char*>(x) + t * x_stride) + g;
    }
  };
  for (std::int64_t g = 0; g < full; ++g) {
    if constexpr (R > 1) {
      prefetch.at(g);
    } else {
      prefetch_ahead(w0 + static_cast<std::size_t>(g) * kRunBytes, kRunBytes);
    }
    at(g);
    run<R, T>(wr, xr, acc);
  }
  if (n_tail != 0) {
    at(full);
    const tensor::BlockQ4_1* tb[R];
    for (int r = 0; r < R; ++r) tb[r] = reinterpret_cast<const tensor::BlockQ4_1*>(wr[r]);
    tail<R, T>(tb, n_tail, xr, acc);
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = hsum16(acc[r][t]);
  }
}

float dot1(std::int64_t n, const void* w, const void* x) {
  float y;
  tile<1, 1>(n, w, 0, x, 0, &y, 0);
  return y;
}

// Four rows: in one pass at 1 token, two passes of two rows at 2..4; more tokens in runs of four.
template <int T>
void rows4(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, float* y,
           std::size_t y_stride) {
  if constexpr (T == 1) {
    tile<4, T>(n, w, stride, x, x_stride, y, y_stride);
  } else if constexpr (T <= 4) {
    tile<2, T>(n, w, stride, x, x_stride, y, y_stride);
    tile<2, T>(n, static_cast<const unsigned char*>(w) + 2 * stride, stride, x, x_stride, y + 2, y_stride);
  } else {
    rows4<4>(n, w, stride, x, x_stride, y, y_stride);
    rows4<T - 4>(n, w, stride, static_cast<const unsigned char*>(x) + 4 * x_stride, x_stride, y + 4 * y_stride,
                 y_stride);
  }
}

void tile_any(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, int n_tokens,
              float* y, std::size_t y_stride) {
  switch (n_tokens) {
    case 1: return rows4<1>(n, w, stride, x, x_stride, y, y_stride);
    case 2: return rows4<2>(n, w, stride, x, x_stride, y, y_stride);
    case 3: return rows4<3>(n, w, stride, x, x_stride, y, y_stride);
    case 4: return rows4<4>(n, w, stride, x, x_stride, y, y_stride);
    case 5: return rows4<5>(n, w, stride, x, x_stride, y, y_stride);
    case 6: return rows4<6>(n, w, stride, x, x_stride, y, y_stride);
    case 7: return rows4<7>(n, w, stride, x, x_stride, y, y_stride);
    default: return rows4<8>(n, w, stride, x, x_stride, y, y_stride);
  }
}

}  // namespace
}  // namespace avx512_x16

TileKernels tile_q4_1_x16_avx512() {
  using namespace avx512_x16;
  return {dot1, tile_any, act_pack_runs, act_run_bytes};
}

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
