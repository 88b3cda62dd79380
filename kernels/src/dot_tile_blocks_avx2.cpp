// AVX2/FMA versions of the q4_1, q5_0 and q5_1 kernels of dot_tile_blocks_avx512.cpp: the same packed
// activations (act_pack.h) and the same arithmetic per (row, token) on 256 bits, a group of four blocks as
// two halves of two blocks (elements 0..15 of both in one ymm, 16..31 in another). Without vpdpbusd the
// u8 x s8 products go through vpmaddubsw (levels <= 31, so a pair sums to at most 2 * 31 * 127 and the two
// halves' pairs to 15748: no i16 saturation) and vpmaddwd into i32 lanes, 4 per block. One template of R
// rows x T tokens: matvec runs R = T = 1, matmul two rows x two tokens per pass (16 ymm registers hold
// their accumulators, weights and activations), so every (row, token) result is bit-identical through both
// (batch invariance).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "act_pack.h"
#include "dot.h"
#include "quant_common.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace kernels::detail {
namespace avx2_blocks {
namespace {

constexpr int kGroup = kActGroupBlocks;
constexpr int kPrefetchBytes = 4096;  // as dot_x86.inl: the weight stream, 4 KiB ahead

inline std::uint32_t load_u32(const void* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

#include "horizontal_x86.inl"

// 32 bits -> 32 bytes, 16 where the bit is set.
inline __m256i sixteen_where_set(std::uint32_t bits) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(16));
}

// [v[i0] x 4 | v[i1] x 4] of four f32 v.
inline __m256 spread(__m128 v, int i0, int i1) {
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(i0, i0, i0, i0, i1, i1, i1, i1));
}

// Half h (blocks 2h, 2h+1) of a group of one row: levels of elements 0..15 and 16..31, d and m per lane.
struct WHalf {
  __m256i lo, hi;
  __m256 d, m;
};

// The 16 bytes at `offset` of blocks k0 and k0 + 1 (zero for a block past count).
template <typename Block>
inline __m256i pair16(const Block* a, std::size_t offset, int k0, int count) {
  auto at = [&](int k) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const char*>(a + k) + offset));
  };
  const __m128i first = at(k0);
  return k0 + 1 < count ? _mm256_inserti128_si256(_mm256_castsi128_si256(first), at(k0 + 1), 1)
                        : _mm256_zextsi128_si256(first);
}

// The u32 at `offset` of blocks k0 and k0 + 1 (0 past count).
template <typename Block>
inline __m128i pair_u32(const Block* a, std::size_t offset, int k0, int count) {
  auto at = [&](int k) { return static_cast<int>(load_u32(reinterpret_cast<const char*>(a + k) + offset)); };
  const __m128i v = _mm_cvtsi32_si128(at(k0));
  return k0 + 1 < count ? _mm_insert_epi32(v, at(k0 + 1), 1) : v;
}

template <typename Block>
inline void nibbles(const Block* a, int k0, int count, WHalf& w) {
  const __m256i q = pair16(a, offsetof(Block, qs), k0, count);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  w.lo = _mm256_and_si256(q, m4);
  w.hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
}

// Bit j of a block's qh is the fifth bit of its element j.
template <typename Block>
inline void fifth_bits(const Block* a, int k0, int count, WHalf& w) {
  const std::uint32_t h0 = load_u32(a[k0].qh), h1 = k0 + 1 < count ? load_u32(a[k0 + 1].qh) : 0;
  w.lo = _mm256_add_epi8(w.lo, sixteen_where_set((h0 & 0xFFFF) | (h1 << 16)));
  w.hi = _mm256_add_epi8(w.hi, sixteen_where_set((h0 >> 16) | (h1 & 0xFFFF0000u)));
}

template <typename Block>
inline void scales_mins(const Block* a, int k0, int count, WHalf& w) {
  const __m128 dm = _mm_cvtph_ps(pair_u32(a, 0, k0, count));  // [d0 m0 d1 m1]
  w.d = spread(dm, 0, 2);
  w.m = spread(dm, 1, 3);
}

struct Q4_1 {
  using Block = tensor::BlockQ4_1;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;
  static WHalf load(const Block* a, int k0, int count) {
    WHalf w;
    nibbles(a, k0, count, w);
    scales_mins(a, k0, count, w);
    return w;
  }
};

struct Q5_1 {
  using Block = tensor::BlockQ5_1;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;
  static WHalf load(const Block* a, int k0, int count) {
    WHalf w;
    nibbles(a, k0, count, w);
    fifth_bits(a, k0, count, w);
    scales_mins(a, k0, count, w);
    return w;
  }
};

struct Q5_0 {
  using Block = tensor::BlockQ5_0;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 16;
  static WHalf load(const Block* a, int k0, int count) {
    WHalf w;
    nibbles(a, k0, count, w);
    fifth_bits(a, k0, count, w);
    // The d of each block: the u16 at offset 0 (the u32 there also holds qh's first bytes: masked off).
    const __m128i d16 = _mm_and_si128(pair_u32(a, 0, k0, count), _mm_set1_epi32(0xFFFF));
    w.d = spread(_mm_cvtph_ps(_mm_packus_epi32(d16, d16)), 0, 1);
    w.m = _mm256_setzero_ps();
    return w;
  }
};

// Half h of a group of one token.
struct XHalf {
  const std::int8_t* lo;
  const std::int8_t* hi;
  __m256 d;      // d_y per lane
  __m256 s;      // _1 types: d_y * sum(y) in the first lane of each block
  __m256i base;  // offset types: -offset * sum(y) in the first lane of each block
};

template <typename W>
inline XHalf x_half(const ActGroup& g, int h) {
  XHalf x;
  x.lo = g.lo + 32 * h;
  x.hi = g.hi + 32 * h;
  x.d = spread(_mm_loadu_ps(g.d), 2 * h, 2 * h + 1);
  if constexpr (W::kMin) {
    x.s = _mm256_blend_ps(_mm256_setzero_ps(), spread(_mm_loadu_ps(g.s), 2 * h, 2 * h + 1), 0x11);
  } else {
    const __m128i sum = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g.sum));
    const __m128 neg =
        _mm_castsi128_ps(_mm_sub_epi32(_mm_setzero_si128(), _mm_mullo_epi32(sum, _mm_set1_epi32(W::kOffset))));
    x.base = _mm256_castps_si256(_mm256_blend_ps(_mm256_setzero_ps(), spread(neg, 2 * h, 2 * h + 1), 0x11));
  }
  return x;
}

template <typename W>
inline void product(const WHalf& w, const XHalf& x, __m256& acc) {
  const __m256i p =
      _mm256_add_epi16(_mm256_maddubs_epi16(w.lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.lo))),
                       _mm256_maddubs_epi16(w.hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.hi))));
  __m256i dot = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
  if constexpr (!W::kMin) dot = _mm256_add_epi32(dot, x.base);
  acc = _mm256_fmadd_ps(_mm256_mul_ps(w.d, x.d), _mm256_cvtepi32_ps(dot), acc);
  if constexpr (W::kMin) acc = _mm256_fmadd_ps(w.m, x.s, acc);
}

// x: T packed activation rows x_stride bytes apart.
template <typename W, int R, int T>
void tile(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, float* y,
          std::size_t y_stride) {
  using Block = typename W::Block;
  const Block* a[R];
  for (int r = 0; r < R; ++r) a[r] = reinterpret_cast<const Block*>(static_cast<const unsigned char*>(w) + r * stride);
  const ActGroup* b[T];
  for (int t = 0; t < T; ++t) {
    b[t] = reinterpret_cast<const ActGroup*>(static_cast<const unsigned char*>(x) + t * x_stride);
  }
  const std::int64_t nb = n / kQK;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (std::int64_t g = 0; g * kGroup < nb; ++g) {
    const int count = static_cast<int>(nb - g * kGroup < kGroup ? nb - g * kGroup : kGroup);
    for (int r = 0; r < R; ++r) {
      const char* p = reinterpret_cast<const char*>(a[r] + kGroup * g) + kPrefetchBytes;
      for (std::size_t o = 0; o < kGroup * sizeof(Block); o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
    }
    for (int h = 0; 2 * h < count; ++h) {
      WHalf wh[R];
      for (int r = 0; r < R; ++r) wh[r] = W::load(a[r] + kGroup * g, 2 * h, count);
      for (int t = 0; t < T; ++t) {
        const XHalf xh = x_half<W>(b[t][g], h);
        for (int r = 0; r < R; ++r) product<W>(wh[r], xh, acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = hsum_float_8(acc[r][t]);
  }
}

template <typename W>
float dot1(std::int64_t n, const void* w, const void* x) {
  float y;
  tile<W, 1, 1>(n, w, 0, x, 0, &y, 0);
  return y;
}

// Four rows x n_tokens: passes of two rows x two tokens.
template <typename W>
void tile_any(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, int n_tokens,
              float* y, std::size_t y_stride) {
  const auto* w2 = static_cast<const unsigned char*>(w) + 2 * stride;
  for (int t = 0; t < n_tokens; t += 2) {
    const void* xt = static_cast<const unsigned char*>(x) + static_cast<std::size_t>(t) * x_stride;
    float* yt = y + static_cast<std::size_t>(t) * y_stride;
    if (t + 1 < n_tokens) {
      tile<W, 2, 2>(n, w, stride, xt, x_stride, yt, y_stride);
      tile<W, 2, 2>(n, w2, stride, xt, x_stride, yt + 2, y_stride);
    } else {
      tile<W, 2, 1>(n, w, stride, xt, x_stride, yt, y_stride);
      tile<W, 2, 1>(n, w2, stride, xt, x_stride, yt + 2, y_stride);
    }
  }
}

}  // namespace
}  // namespace avx2_blocks

TileKernels tile_blocks_avx2(tensor::DType w) {
  using namespace avx2_blocks;
  switch (w) {
    case tensor::DType::q4_1:
      return {dot1<Q4_1>, tile_any<Q4_1>, act_pack_q8_0, act_packed_bytes};
    case tensor::DType::q5_0:
      return {dot1<Q5_0>, tile_any<Q5_0>, act_pack_q8_0, act_packed_bytes};
    case tensor::DType::q5_1:
      return {dot1<Q5_1>, tile_any<Q5_1>, act_pack_q8_0, act_packed_bytes};
    default:
      return {};
  }
}

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
