// AVX-512/VNNI kernels of q4_1, q5_0 and q5_1 weights against q8_0 activations: one template of R weight
// rows x T tokens, two 32-element blocks per zmm. matvec runs it with R = T = 1 (one sequential weight
// stream: four rows at once read from DRAM at 0.5-0.7x the one-row rate here, software prefetch or not),
// matmul with R = 4 and T = 1..4, so each weight unpack serves every token of the tile and each activation
// load every row.
//
// Batch invariance by construction: every (row, token) accumulator goes through the same operations in the
// same order whatever R and T are (the tile only shares the loads), so a token's result is bit-identical
// through matvec and matmul. Per block pair, with the levels q as u8 (q4_1: the nibble; q5_x: nibble | bit
// << 4) and y the activation levels:
//   q5_0: acc += (d_w * d_y) * f32(sum(q * y) - 16 * sum(y))      (exact i32: vpdpbusd from -16 * sum(y))
//   _1:   acc += (d_w * d_y) * f32(sum(q * y)); acc += m_w * (d_y * f32(sum(y)))
// with the sums per group of 4 (16 lanes, 8 per block). An odd last block is a pair whose second weight
// scales are zeroed (it adds 0 to the upper lanes).
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's avx512fintrin.h trips -Wuninitialized on its own _mm512_undefined_* (a known false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "dot.h"
#include "quant_common.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif

namespace kernels::detail {
namespace avx512_blocks {
namespace {

using tensor::BlockQ8_0;

#include "tile_avx512.inl"

inline std::uint32_t load_u32(const void* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// [f(h0) x 8 | f(h2) x 8] and [f(h1) x 8 | f(h3) x 8] from the halves (h0, h1) at p0 and (h2, h3) at p1:
// the d and m of two consecutive _1 blocks.
inline void scale_min_pair(const void* p0, const void* p1, __m512& d, __m512& m) {
  const __m128 f = _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(load_u32(p0))),
                                                 static_cast<int>(load_u32(p1)), 1));
  const __m512 v = _mm512_castps128_ps512(f);
  d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), v);
  m = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3), v);
}

// The fifth bits of two q5 blocks (bit j of qh: element j) added to their nibbles as 16.
inline __m512i add_high_bits(__m512i nib, const std::uint8_t* qh0, const std::uint8_t* qh1) {
  const __mmask64 k = _cvtu64_mask64(load_u32(qh0) | (static_cast<std::uint64_t>(load_u32(qh1)) << 32));
  return _mm512_mask_add_epi8(nib, k, nib, _mm512_set1_epi8(16));
}

// Weight formats: levels of a block pair as u8, the d (and m) pair; kMin: x = d * q + m, else
// x = d * (q - kOffset).
struct Q4_1 {
  using Block = tensor::BlockQ4_1;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;
  static __m512i levels(const Block& a0, const Block& a1) { return nibbles_pair(a0.qs, a1.qs); }
  static void scales(const Block& a0, const Block& a1, __m512& d, __m512& m) { scale_min_pair(&a0.d, &a1.d, d, m); }
};

struct Q5_1 {
  using Block = tensor::BlockQ5_1;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;
  static __m512i levels(const Block& a0, const Block& a1) {
    return add_high_bits(nibbles_pair(a0.qs, a1.qs), a0.qh, a1.qh);
  }
  static void scales(const Block& a0, const Block& a1, __m512& d, __m512& m) { scale_min_pair(&a0.d, &a1.d, d, m); }
};

struct Q5_0 {
  using Block = tensor::BlockQ5_0;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 16;
  static __m512i levels(const Block& a0, const Block& a1) {
    return add_high_bits(nibbles_pair(a0.qs, a1.qs), a0.qh, a1.qh);
  }
  static void scales(const Block& a0, const Block& a1, __m512& d, __m512& m) {
    d = scale_pair(a0.d, a1.d);
    m = _mm512_setzero_ps();
  }
};

template <typename W, int R, int T>
void tile(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, float* y,
          std::size_t y_stride) {
  using Block = typename W::Block;
  const Block* a[R];
  for (int r = 0; r < R; ++r) a[r] = reinterpret_cast<const Block*>(static_cast<const unsigned char*>(w) + r * stride);
  const BlockQ8_0* b[T];
  for (int t = 0; t < T; ++t) {
    b[t] = reinterpret_cast<const BlockQ8_0*>(static_cast<const unsigned char*>(x) + t * x_stride);
  }
  const std::int64_t nb = n / kQK;
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(W::kOffset));
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  // Blocks i and i1 (i1 == i for an odd last block, whose second half then gets zero weight scales).
  auto step = [&](std::int64_t i, std::int64_t i1, bool lone) {
    __m512i wq[R];
    __m512 wd[R], wm[R];
    for (int r = 0; r < R; ++r) {
      if ((i & 3) == 0) prefetch_ahead(a[r] + i, 4 * sizeof(Block));
      wq[r] = W::levels(a[r][i], a[r][i1]);
      W::scales(a[r][i], a[r][i1], wd[r], wm[r]);
      if (lone) {
        wd[r] = _mm512_maskz_mov_ps(0x00FF, wd[r]);
        wm[r] = _mm512_maskz_mov_ps(0x00FF, wm[r]);
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m512i yq = load_pair(b[t][i].qs, b[t][i1].qs);
      const __m512 xd = scale_pair(b[t][i].d, b[t][i1].d);
      __m512i base = _mm512_setzero_si512();
      __m512 xs = _mm512_setzero_ps();
      if constexpr (W::kMin) {
        xs = _mm512_mul_ps(xd, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, yq)));
      } else {
        base = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, yq));
      }
      for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, wq[r], yq));
        acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(wd[r], xd), s, acc[r][t]);
        if constexpr (W::kMin) acc[r][t] = _mm512_fmadd_ps(wm[r], xs, acc[r][t]);
      }
    }
  };
  std::int64_t i = 0;
  for (; i + 2 <= nb; i += 2) step(i, i + 1, false);
  if (i < nb) step(i, i, true);
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = hsum16(acc[r][t]);
  }
}

template <typename W>
float dot1(std::int64_t n, const void* w, const void* x) {
  float y;
  tile<W, 1, 1>(n, w, 0, x, 0, &y, 0);
  return y;
}

template <typename W>
void tile_any(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, int n_tokens,
              float* y, std::size_t y_stride) {
  switch (n_tokens) {
    case 1: return tile<W, 4, 1>(n, w, stride, x, x_stride, y, y_stride);
    case 2: return tile<W, 4, 2>(n, w, stride, x, x_stride, y, y_stride);
    case 3: return tile<W, 4, 3>(n, w, stride, x, x_stride, y, y_stride);
    default: return tile<W, 4, 4>(n, w, stride, x, x_stride, y, y_stride);
  }
}

}  // namespace
}  // namespace avx512_blocks

TileKernels tile_blocks_avx512(tensor::DType w) {
  using namespace avx512_blocks;
  switch (w) {
    case tensor::DType::q4_1: return {dot1<Q4_1>, tile_any<Q4_1>};
    case tensor::DType::q5_0: return {dot1<Q5_0>, tile_any<Q5_0>};
    case tensor::DType::q5_1: return {dot1<Q5_1>, tile_any<Q5_1>};
    default: return {};
  }
}

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
