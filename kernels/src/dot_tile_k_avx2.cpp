// AVX2/FMA versions of the q4_K, q5_K and q6_K kernels of dot_tile_k_avx512.cpp: the same arithmetic per
// super-block on 256 bits, one 32-element chunk per ymm. Per super-block and (row, token) the sum is exact
// in i32: the u8 levels times the activations in i16 pairs (vpmaddubsw: at most 2 * 63 * 127, no
// saturation), times the sub-block scales into i32 (vpmaddwd), then in f32 acc += (d_w * d_y) * f32(sum) and,
// for q4_K / q5_K, acc += (-dmin_w * d_y) * f32(min_j * bsum) per lane; q6_K's offset of 32 is taken back in
// i32 from the bsums. One template of R rows x T tokens: matvec runs R = T = 1, matmul two rows x two tokens
// per pass (the accumulators, levels and scales fill the 16 ymm registers), so every (row, token) result is
// bit-identical through both (batch invariance).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dot.h"
#include "quant_common.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace kernels::detail {
namespace avx2_k {
namespace {

using tensor::BlockQ8_K;

constexpr int kPrefetchBytes = 4096;  // as dot_x86.inl: the weight stream, 4 KiB ahead

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline float fp16c(std::uint16_t h) { return _cvtsh_ss(h); }

#include "horizontal_x86.inl"

// The 8 scales (bytes 0..7) and 8 mins (bytes 8..15) of a q4_K / q5_K block as 16 u8.
inline __m128i k4_scales_mins(const std::uint8_t* s) {
  constexpr std::uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  std::uint32_t utmp[4];
  std::memcpy(utmp, s, 12);
  utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
  const std::uint32_t uaux = utmp[1] & kmask1;
  utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
  utmp[2] = uaux;
  utmp[0] &= kmask1;
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(utmp));
}

// q4_K and q5_K: chunk c of a super-block is sub-block c (elements 32c..32c+31): the low nibbles of
// qs[32 (c / 2)..] for even c, the high ones for odd c.
struct K4Prep {
  __m256i scales_mins;  // the 16 u8 of k4_scales_mins in both 128-bit lanes
  __m256i mins;         // [m0 m0 m1 m1 .. m7 m7] as i16 (one per bsum)
  float d, dmin;
};

inline K4Prep k4_prepare(const std::uint8_t* scales, std::uint16_t d, std::uint16_t dmin) {
  K4Prep p;
  const __m128i sm = k4_scales_mins(scales);
  p.scales_mins = _mm256_broadcastsi128_si256(sm);
  const __m256i idx = _mm256_setr_epi8(8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128,
                                       12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128);
  p.mins = _mm256_shuffle_epi8(p.scales_mins, idx);
  p.d = fp16c(d);
  p.dmin = fp16c(dmin);
  return p;
}

// Scale c as 16 x i16.
inline __m256i k4_chunk_scales(const K4Prep& p, int c) {
  const short pick = static_cast<short>(0x8000 | c);  // byte c, then a zero byte
  return _mm256_shuffle_epi8(p.scales_mins, _mm256_set1_epi16(pick));
}

inline __m256i k4_nibbles(const std::uint8_t* qs, int c) {
  const __m256i q = load256(qs + 32 * (c / 2));
  return _mm256_and_si256(c % 2 == 0 ? q : _mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
}

// acc += (d * d_y) * f32(sumi) + (-dmin * d_y) * f32(m_j * bsum per lane).
inline void k4_finish(const K4Prep& p, const BlockQ8_K& b, __m256i sumi, __m256& acc) {
  const __m256i summ = _mm256_madd_epi16(p.mins, load256(b.bsums));
  acc = _mm256_fmadd_ps(_mm256_set1_ps(p.d * b.d), _mm256_cvtepi32_ps(sumi), acc);
  acc = _mm256_fmadd_ps(_mm256_set1_ps(-p.dmin * b.d), _mm256_cvtepi32_ps(summ), acc);
}

struct Q4K {
  using Block = tensor::BlockQ4_K;
  using Prep = K4Prep;
  static Prep prepare(const Block& a) { return k4_prepare(a.scales, a.d, a.dmin); }
  static __m256i start(const Prep&, const BlockQ8_K&) { return _mm256_setzero_si256(); }
  static __m256i levels(const Block& a, const Prep&, int c) { return k4_nibbles(a.qs, c); }
  static __m256i chunk_scales(const Prep& p, int c) { return k4_chunk_scales(p, c); }
  static void finish(const Prep& p, const BlockQ8_K& b, __m256i sumi, __m256& acc) { k4_finish(p, b, sumi, acc); }
};

struct Q5KPrep : K4Prep {
  __m256i qh;  // bit c of byte l: the fifth bit of element l of sub-block c
};

struct Q5K {
  using Block = tensor::BlockQ5_K;
  using Prep = Q5KPrep;
  static Prep prepare(const Block& a) {
    Prep p;
    static_cast<K4Prep&>(p) = k4_prepare(a.scales, a.d, a.dmin);
    p.qh = load256(a.qh);
    return p;
  }
  static __m256i start(const Prep&, const BlockQ8_K&) { return _mm256_setzero_si256(); }
  static __m256i levels(const Block& a, const Prep& p, int c) {
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << c));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(p.qh, bit), bit);
    return _mm256_add_epi8(k4_nibbles(a.qs, c), _mm256_and_si256(set, _mm256_set1_epi8(16)));
  }
  static __m256i chunk_scales(const Prep& p, int c) { return k4_chunk_scales(p, c); }
  static void finish(const Prep& p, const BlockQ8_K& b, __m256i sumi, __m256& acc) { k4_finish(p, b, sumi, acc); }
};

// q6_K: chunk c is elements 32c..32c+31 = sub-blocks 2c and 2c+1 of 16; half h = c / 4, group g = c % 4: the
// low 4 bits in ql[64h + 32 (g & 1) + l] (low nibble for g < 2), the high 2 bits at 2g of qh[32h + l].
struct Q6K {
  using Block = tensor::BlockQ6_K;
  struct Prep {
    __m128i scales8;  // the 16 signed scales as bytes
    __m256i scales;   // the same as i16
    float d;
  };
  static Prep prepare(const Block& a) {
    Prep p;
    p.scales8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.scales));
    p.scales = _mm256_cvtepi8_epi16(p.scales8);
    p.d = fp16c(a.d);
    return p;
  }
  // -32 * sum_j sc_j * bsum_j: the offset of the levels, taken back exactly.
  static __m256i start(const Prep& p, const BlockQ8_K& b) {
    const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(p.scales, load256(b.bsums)), 5);
    return _mm256_sub_epi32(_mm256_setzero_si256(), corr);
  }
  static __m256i levels(const Block& a, const Prep&, int c) {
    const int h = c / 4, g = c % 4;
    const __m256i lq = load256(a.ql + 64 * h + 32 * (g & 1));
    const __m256i lo = _mm256_and_si256(g < 2 ? lq : _mm256_srli_epi16(lq, 4), _mm256_set1_epi8(0x0F));
    const __m256i hq = _mm256_and_si256(_mm256_srli_epi16(load256(a.qh + 32 * h), 2 * g), _mm256_set1_epi8(0x03));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hq, 4));
  }
  // Scales 2c (i16 lanes 0..7) and 2c + 1 (8..15).
  static __m256i chunk_scales(const Prep& p, int c) {
    const __m128i pick = _mm_setr_epi8(static_cast<char>(2 * c), static_cast<char>(2 * c), static_cast<char>(2 * c),
                                       static_cast<char>(2 * c), static_cast<char>(2 * c), static_cast<char>(2 * c),
                                       static_cast<char>(2 * c), static_cast<char>(2 * c), static_cast<char>(2 * c + 1),
                                       static_cast<char>(2 * c + 1), static_cast<char>(2 * c + 1),
                                       static_cast<char>(2 * c + 1), static_cast<char>(2 * c + 1),
                                       static_cast<char>(2 * c + 1), static_cast<char>(2 * c + 1),
                                       static_cast<char>(2 * c + 1));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(p.scales8, pick));
  }
  static void finish(const Prep& p, const BlockQ8_K& b, __m256i sumi, __m256& acc) {
    acc = _mm256_fmadd_ps(_mm256_set1_ps(p.d * b.d), _mm256_cvtepi32_ps(sumi), acc);
  }
};

template <typename W, int R, int T>
void tile(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, float* y,
          std::size_t y_stride) {
  using Block = typename W::Block;
  const Block* a[R];
  for (int r = 0; r < R; ++r) a[r] = reinterpret_cast<const Block*>(static_cast<const unsigned char*>(w) + r * stride);
  const BlockQ8_K* b[T];
  for (int t = 0; t < T; ++t) {
    b[t] = reinterpret_cast<const BlockQ8_K*>(static_cast<const unsigned char*>(x) + t * x_stride);
  }
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    typename W::Prep prep[R];
    for (int r = 0; r < R; ++r) {
      const char* p = reinterpret_cast<const char*>(a[r] + i) + kPrefetchBytes;
      for (std::size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
      prep[r] = W::prepare(a[r][i]);
    }
    __m256i sumi[R][T];
    for (int t = 0; t < T; ++t) {
      for (int r = 0; r < R; ++r) sumi[r][t] = W::start(prep[r], b[t][i]);
    }
    for (int c = 0; c < 8; ++c) {
      __m256i lev[R], sc[R];
      for (int r = 0; r < R; ++r) {
        lev[r] = W::levels(a[r][i], prep[r], c);
        sc[r] = W::chunk_scales(prep[r], c);
      }
      for (int t = 0; t < T; ++t) {
        const __m256i yc = load256(b[t][i].qs + 32 * c);
        for (int r = 0; r < R; ++r) {
          sumi[r][t] = _mm256_add_epi32(sumi[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(lev[r], yc), sc[r]));
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      for (int r = 0; r < R; ++r) W::finish(prep[r], b[t][i], sumi[r][t], acc[r][t]);
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
}  // namespace avx2_k

TileKernels tile_k_avx2(tensor::DType w) {
  using namespace avx2_k;
  switch (w) {
    case tensor::DType::q4_K: return {dot1<Q4K>, tile_any<Q4K>};
    case tensor::DType::q5_K: return {dot1<Q5K>, tile_any<Q5K>};
    case tensor::DType::q6_K: return {dot1<Q6K>, tile_any<Q6K>};
    default: return {};
  }
}

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
