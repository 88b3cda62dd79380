// AVX-512/VNNI kernels of q4_K, q5_K and q6_K weights against q8_K activations: one template of R weight
// rows x T tokens over 256-element super-blocks, 64 elements per zmm. matvec runs it with R = T = 1 (one
// sequential weight stream, as dot_tile_blocks_avx512.cpp says), matmul with four rows (two passes of two:
// 49-59 against 42-52 GMAC/s for one pass of four, in cache on the development machine) x 1..4 tokens, so
// each weight unpack serves every token of the tile and each activation load every row.
//
// Per super-block and (row, token) the sum is exact in i32: the u8 levels times the activations in i16
// pairs (vpmaddubsw: at most 2 * 63 * 127, no saturation), times the sub-block scales into i32
// (vpdpwssd). Then, in f32, acc += (d_w * d_y) * f32(sum) and for q4_K / q5_K
// acc += (-dmin_w * d_y) * f32(sum_j min_j * (bsums of sub-block j)); q6_K's offset of 32 is taken back
// exactly in i32 from the bsums (the sum starts at -32 * sum_j sc_j * bsum_j). Every (row, token)
// accumulator goes through the same operations in the same order whatever R and T are, so a token's
// result is bit-identical through matvec and matmul (batch invariance).
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
namespace avx512_k {
namespace {

using tensor::BlockQ8_K;

#include "tile_avx512.inl"

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

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

// pshufb index: in each 128-bit lane, the u8 at byte `lo` (lanes 0, 1) or `hi` (lanes 2, 3) as 8 x i16.
inline __m512i spread_u8(int lo, int hi) {
  constexpr unsigned long long kZeroHigh = 0x8000800080008000ULL;  // the high byte of each i16: 0
  const auto l = static_cast<long long>(kZeroHigh | (static_cast<unsigned long long>(lo) * 0x0001000100010001ULL));
  const auto h = static_cast<long long>(kZeroHigh | (static_cast<unsigned long long>(hi) * 0x0001000100010001ULL));
  return _mm512_set_epi64(h, h, h, h, l, l, l, l);
}

// q4_K and q5_K: chunk k of a super-block is elements 64k..64k+63 = sub-blocks 2k (the low nibbles of
// qs[32k..32k+31]) and 2k+1 (the high nibbles).
struct K4Prep {
  __m512i scales_mins;  // the 16 u8 of k4_scales_mins in every 128-bit lane
  __m256i mins;         // [m0 m0 m1 m1 .. m7 m7] as i16 (one per bsum)
  float d, dmin;
};

inline K4Prep k4_prepare(const std::uint8_t* scales, std::uint16_t d, std::uint16_t dmin) {
  K4Prep p;
  const __m128i sm = k4_scales_mins(scales);
  p.scales_mins = _mm512_broadcast_i32x4(sm);
  const __m256i idx = _mm256_setr_epi8(8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128,
                                       12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128);
  p.mins = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(sm), idx);
  p.d = fp16c(d);
  p.dmin = fp16c(dmin);
  return p;
}

inline __m512i k4_chunk_scales(const K4Prep& p, int k) {
  return _mm512_shuffle_epi8(p.scales_mins, spread_u8(2 * k, 2 * k + 1));
}

inline __m512i k4_nibbles(const std::uint8_t* qs, int k) {
  const __m256i q = load256(qs + 32 * k);
  return _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1),
                          _mm512_set1_epi8(0x0F));
}

// acc += (d * d_y) * f32(sumi) + (-dmin * d_y) * f32(sum_j m_j * bsum_j).
inline void k4_finish(const K4Prep& p, const BlockQ8_K& b, __m512i sumi, __m512& acc) {
  const __m256i summ = _mm256_madd_epi16(p.mins, load256(b.bsums));
  acc = _mm512_fmadd_ps(_mm512_set1_ps(p.d * b.d), _mm512_cvtepi32_ps(sumi), acc);
  acc = _mm512_fmadd_ps(_mm512_set1_ps(-p.dmin * b.d), _mm512_cvtepi32_ps(_mm512_zextsi256_si512(summ)), acc);
}

struct Q4K {
  using Block = tensor::BlockQ4_K;
  using Prep = K4Prep;
  static Prep prepare(const Block& a) { return k4_prepare(a.scales, a.d, a.dmin); }
  static __m512i start(const Prep&, const BlockQ8_K&) { return _mm512_setzero_si512(); }
  static __m512i levels(const Block& a, const Prep&, int k) { return k4_nibbles(a.qs, k); }
  static __m512i chunk_scales(const Prep& p, int k) { return k4_chunk_scales(p, k); }
  static void finish(const Prep& p, const BlockQ8_K& b, __m512i sumi, __m512& acc) { k4_finish(p, b, sumi, acc); }
};

struct Q5KPrep : K4Prep {
  __m512i qh;  // the 32 bytes of high bits in both halves
};

struct Q5K {
  using Block = tensor::BlockQ5_K;
  using Prep = Q5KPrep;
  static Prep prepare(const Block& a) {
    Prep p;
    static_cast<K4Prep&>(p) = k4_prepare(a.scales, a.d, a.dmin);
    p.qh = _mm512_broadcast_i64x4(load256(a.qh));
    return p;
  }
  static __m512i start(const Prep&, const BlockQ8_K&) { return _mm512_setzero_si512(); }
  // The fifth bit of element l of sub-block j is bit j of qh[l].
  static __m512i levels(const Block& a, const Prep& p, int k) {
    const __m512i nib = k4_nibbles(a.qs, k);
    const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * k))),
                                           _mm256_set1_epi8(static_cast<char>(1 << (2 * k + 1))), 1);
    return _mm512_mask_add_epi8(nib, _mm512_test_epi8_mask(p.qh, bit), nib, _mm512_set1_epi8(16));
  }
  static __m512i chunk_scales(const Prep& p, int k) { return k4_chunk_scales(p, k); }
  static void finish(const Prep& p, const BlockQ8_K& b, __m512i sumi, __m512& acc) { k4_finish(p, b, sumi, acc); }
};

// q6_K: chunk k is elements 64k..64k+63 = sub-blocks 4k..4k+3 of 16. Element e: half c = e / 128, group
// g = (e % 128) / 32, l = e % 32; low 4 bits in ql[64c + 32 (g & 1) + l] (low nibble for g < 2), high 2
// bits at 2g of qh[32c + l].
struct Q6K {
  using Block = tensor::BlockQ6_K;
  struct Prep {
    __m256i scales;  // the 16 scales as i16
    float d;
  };
  static Prep prepare(const Block& a) {
    return {_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.scales))), fp16c(a.d)};
  }
  // -32 * sum_j sc_j * bsum_j: the offset of the levels, taken back exactly.
  static __m512i start(const Prep& p, const BlockQ8_K& b) {
    const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(p.scales, load256(b.bsums)), 5);
    return _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), corr));
  }
  static __m512i levels(const Block& a, const Prep&, int k) {
    const int c = k / 2;
    const __m512i lq = _mm512_loadu_si512(a.ql + 64 * c);
    const __m256i h = load256(a.qh + 32 * c);
    const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
    if (k % 2 == 0) {
      return _mm512_or_si512(_mm512_and_si512(lq, _mm512_set1_epi8(0x0F)),
                             _mm512_slli_epi16(_mm512_and_si512(hh, _mm512_set1_epi8(0x03)), 4));
    }
    return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lq, 4), _mm512_set1_epi8(0x0F)),
                           _mm512_and_si512(hh, _mm512_set1_epi8(0x30)));
  }
  static __m512i chunk_scales(const Prep& p, int k) {
    const __m512i idx = _mm512_set_epi64(0x0003000300030003LL + 0x0004000400040004LL * k,
                                         0x0003000300030003LL + 0x0004000400040004LL * k,
                                         0x0002000200020002LL + 0x0004000400040004LL * k,
                                         0x0002000200020002LL + 0x0004000400040004LL * k,
                                         0x0001000100010001LL + 0x0004000400040004LL * k,
                                         0x0001000100010001LL + 0x0004000400040004LL * k,
                                         0x0000000000000000LL + 0x0004000400040004LL * k,
                                         0x0000000000000000LL + 0x0004000400040004LL * k);
    return _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(p.scales));
  }
  static void finish(const Prep& p, const BlockQ8_K& b, __m512i sumi, __m512& acc) {
    acc = _mm512_fmadd_ps(_mm512_set1_ps(p.d * b.d), _mm512_cvtepi32_ps(sumi), acc);
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
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    typename W::Prep prep[R];
    for (int r = 0; r < R; ++r) {
      prefetch_ahead(a[r] + i, sizeof(Block));
      prep[r] = W::prepare(a[r][i]);
    }
    __m512i sumi[R][T];
    for (int t = 0; t < T; ++t) {
      for (int r = 0; r < R; ++r) sumi[r][t] = W::start(prep[r], b[t][i]);
    }
    for (int k = 0; k < 4; ++k) {
      __m512i lev[R], sc[R];
      for (int r = 0; r < R; ++r) {
        lev[r] = W::levels(a[r][i], prep[r], k);
        sc[r] = W::chunk_scales(prep[r], k);
      }
      for (int t = 0; t < T; ++t) {
        const __m512i yk = _mm512_loadu_si512(b[t][i].qs + 64 * k);
        for (int r = 0; r < R; ++r) {
          sumi[r][t] = _mm512_dpwssd_epi32(sumi[r][t], _mm512_maddubs_epi16(lev[r], yk), sc[r]);
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      for (int r = 0; r < R; ++r) W::finish(prep[r], b[t][i], sumi[r][t], acc[r][t]);
    }
  }
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

template <typename W, int T>
void rows4(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, float* y,
           std::size_t y_stride) {
  tile<W, 2, T>(n, w, stride, x, x_stride, y, y_stride);
  tile<W, 2, T>(n, static_cast<const unsigned char*>(w) + 2 * stride, stride, x, x_stride, y + 2, y_stride);
}

template <typename W>
void tile_any(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, int n_tokens,
              float* y, std::size_t y_stride) {
  for (; n_tokens > 4; n_tokens -= 4, x = static_cast<const unsigned char*>(x) + 4 * x_stride, y += 4 * y_stride) {
    rows4<W, 4>(n, w, stride, x, x_stride, y, y_stride);
  }
  switch (n_tokens) {
    case 1: return rows4<W, 1>(n, w, stride, x, x_stride, y, y_stride);
    case 2: return rows4<W, 2>(n, w, stride, x, x_stride, y, y_stride);
    case 3: return rows4<W, 3>(n, w, stride, x, x_stride, y, y_stride);
    default: return rows4<W, 4>(n, w, stride, x, x_stride, y, y_stride);
  }
}

}  // namespace
}  // namespace avx512_k

TileKernels tile_k_avx512(tensor::DType w) {
  using namespace avx512_k;
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
