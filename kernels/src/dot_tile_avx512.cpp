// AVX-512/VNNI register tiles for q8_0 and q4_0 weights (against q8_0 activations): four weight rows x
// 1..4 tokens per pass, so each weight load and unpack serves every token of the tile (prefill, batched
// decode) and each activation load serves four rows.
//
// Batch invariance: every (row, token) result is bit-identical to dot_q8_0 / dot_q4_0 of dot_x86.inl
// (what matvec uses). Those keep two f32x8 accumulators, acc0 taking blocks 4k and 4k+2 and acc1 blocks
// 4k+1 and 4k+3 (fused multiply-add of d_w * d_x and the exact i32 block sums), the blocks past the last
// multiple of 4 going to acc0, and return hsum_float_8(acc0 + acc1). Here one zmm holds [acc0 | acc1] and
// takes blocks (4k, 4k+1) then (4k+2, 4k+3): lane for lane the same fused operations in the same order.
// The i32 sums are exact either way: the weights enter vpdpbusd unsigned (q + 128 for q8_0, the raw nibble
// q + 8 for q4_0) and the offset is taken back exactly by starting the accumulator at -offset * sum(y).
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's avx512fintrin.h trips -Wuninitialized on its own _mm512_undefined_* (a known false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
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
namespace avx512_tile {
namespace {

using tensor::BlockQ4_0;
using tensor::BlockQ8_0;

#include "tile_avx512.inl"

// Weight-type specifics: the 32 levels of a block as u8 (level + kOffset) and the offset itself.
struct Q8 {
  using Block = BlockQ8_0;
  static constexpr int kOffset = 128;
  static __m512i levels_pair(const Block& a0, const Block& a1) {
    return _mm512_xor_si512(load_pair(a0.qs, a1.qs), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  static __m256i levels(const Block& a) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  }
};

struct Q4 {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  // Elements 0..15 are the low nibbles, 16..31 the high ones (bytes_from_nibbles_32).
  static __m512i levels_pair(const Block& a0, const Block& a1) { return nibbles_pair(a0.qs, a1.qs); }
  static __m256i levels(const Block& a) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.qs));
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
  }
};

template <typename W, int T>
void tile(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, float* y,
          std::size_t y_stride) {
  using Block = typename W::Block;
  constexpr int R = 4;
  const Block* a[R];
  for (int r = 0; r < R; ++r) a[r] = reinterpret_cast<const Block*>(static_cast<const unsigned char*>(w) + r * stride);
  const BlockQ8_0* b[T];
  for (int t = 0; t < T; ++t) {
    b[t] = reinterpret_cast<const BlockQ8_0*>(static_cast<const unsigned char*>(x) + t * x_stride);
  }
  const std::int64_t nb = n / kQK, nb4 = nb & ~std::int64_t{3};
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(W::kOffset));
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const TilePrefetch prefetch(w, R * stride, std::max<std::int64_t>(nb4 / 2, 1));
  for (std::int64_t i = 0; i < nb4; i += 2) {
    __m512i wq[R];
    __m512 wd[R];
    prefetch.at(i / 2);
    for (int r = 0; r < R; ++r) {
      wq[r] = W::levels_pair(a[r][i], a[r][i + 1]);
      wd[r] = scale_pair(a[r][i].d, a[r][i + 1].d);
    }
    for (int t = 0; t < T; ++t) {
      const __m512i yq = load_pair(b[t][i].qs, b[t][i + 1].qs);
      const __m512 xd = scale_pair(b[t][i].d, b[t][i + 1].d);
      // -offset * (sum of each group of 4 activations): the start value that cancels the weight offset.
      const __m512i base = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, yq));
      for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, wq[r], yq));
        acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(wd[r], xd), s, acc[r][t]);
      }
    }
  }
  __m256 lo[R][T], hi[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      lo[r][t] = _mm512_castps512_ps256(acc[r][t]);
      hi[r][t] = _mm512_extractf32x8_ps(acc[r][t], 1);
    }
  }
  const __m256i offset8 = _mm512_castsi512_si256(offset);
  for (std::int64_t i = nb4; i < nb; ++i) {  // the last nb % 4 blocks, into acc0 as the one-row kernels do
    for (int t = 0; t < T; ++t) {
      const __m256i yq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[t][i].qs));
      const __m256i base =
          _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset8, yq));
      for (int r = 0; r < R; ++r) {
        const __m256 d = _mm256_set1_ps(fp16c(a[r][i].d) * fp16c(b[t][i].d));
        const __m256 s = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(base, W::levels(a[r][i]), yq));
        lo[r][t] = _mm256_fmadd_ps(d, s, lo[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = hsum_float_8(_mm256_add_ps(lo[r][t], hi[r][t]));
  }
}

template <typename W>
void tile_any(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, int n_tokens,
              float* y, std::size_t y_stride) {
  for (; n_tokens > 4; n_tokens -= 4, x = static_cast<const unsigned char*>(x) + 4 * x_stride, y += 4 * y_stride) {
    tile<W, 4>(n, w, stride, x, x_stride, y, y_stride);
  }
  switch (n_tokens) {
    case 1: return tile<W, 1>(n, w, stride, x, x_stride, y, y_stride);
    case 2: return tile<W, 2>(n, w, stride, x, x_stride, y, y_stride);
    case 3: return tile<W, 3>(n, w, stride, x, x_stride, y, y_stride);
    default: return tile<W, 4>(n, w, stride, x, x_stride, y, y_stride);
  }
}

}  // namespace
}  // namespace avx512_tile

Dot4xTFn dot4xt_avx512_fn(tensor::DType w) {
  switch (w) {
    case tensor::DType::q8_0: return avx512_tile::tile_any<avx512_tile::Q8>;
    case tensor::DType::q4_0: return avx512_tile::tile_any<avx512_tile::Q4>;
    default: return tile_avx512(w).dot4xt;
  }
}

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
