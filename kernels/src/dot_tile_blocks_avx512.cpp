// AVX-512/VNNI kernels of q4_1, q5_0 and q5_1 weights against q8_0 activations: one template of R weight
// rows x T tokens. matvec runs it with R = T = 1 (one sequential weight stream), matmul with
// four rows (one pass at 2 tokens, two passes of two from 3 on, which keeps every accumulator in a register) x
// 1..8 tokens, so each weight unpack serves every token of the tile and each activation load every row.
//
// Four blocks per step, split in halves: one zmm holds elements 0..15 of blocks 4g..4g+3 (16 bytes each),
// another elements 16..31, so two vpdpbusd leave each block's sum in 4 lanes (not 8) and the f32 scaling
// below runs once per four blocks. The activations are first repacked into that layout with their scales as
// f32 (ActGroup, act_pack.h), once per token.
//
// Per group and (row, token), with q the weight levels as u8 (q4_1: the nibble; q5_x: nibble | bit << 4)
// and y the activation levels:
//   D = sum(q * y) per lane, exact i32; for q5_0 it starts at -16 * sum(y) in the first lane of each block
//   acc += (d_w * d_y) * f32(D);  for q4_1 / q5_1 also  acc += m_w * (d_y * sum(y)) in each block's first lane
// Every (row, token) accumulator goes through the same operations in the same order whatever R and T are,
// so a token's result is bit-identical through matvec and matmul (batch invariance). Blocks past the end of
// a row (its last group may be partial) are zero on both sides: they add +0.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's avx512fintrin.h trips -Wuninitialized on its own _mm512_undefined_* (a known false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "act_pack.h"
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

constexpr int kGroup = kActGroupBlocks;  // blocks per step

inline std::uint32_t load_u32(const void* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Lane l of the result: v[l / 4] (each block's value in its 4 lanes), and v[l / 4] in lane 4 b only.
inline __m512 per_block(__m128 v) {
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}
inline __m512i first_lane_i32(__m128i v) {
  return _mm512_maskz_permutexvar_epi32(0x1111, _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                        _mm512_castsi128_si512(v));
}
inline __m512 first_lane_ps(__m128 v) { return _mm512_castsi512_ps(first_lane_i32(_mm_castps_si128(v))); }

// The weights of one group of one row: levels of elements 0..15 and 16..31 of each block, d (and m) per lane.
struct WGroup {
  __m512i lo, hi;
  __m512 d, m;
};

// 16 bytes of each of four blocks side by side; a partial group loads `count` blocks (the rest zero).
template <typename Block>
inline __m512i gather16(const Block* a, std::size_t offset, int count) {
  auto at = [&](int k) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const char*>(a + k) + offset));
  };
  if (count == kGroup) {
    const __m256i q01 = _mm256_inserti128_si256(_mm256_castsi128_si256(at(0)), at(1), 1);
    const __m256i q23 = _mm256_inserti128_si256(_mm256_castsi128_si256(at(2)), at(3), 1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(q01), q23, 1);
  }
  __m512i v = _mm512_zextsi128_si512(at(0));
  if (count > 1) v = _mm512_inserti32x4(v, at(1), 1);
  if (count > 2) v = _mm512_inserti32x4(v, at(2), 2);
  return v;
}

// The u32 at `offset` of each of four blocks (0 past count).
template <typename Block>
inline __m128i gather_u32(const Block* a, std::size_t offset, int count) {
  auto at = [&](int k) { return static_cast<int>(load_u32(reinterpret_cast<const char*>(a + k) + offset)); };
  __m128i v = _mm_cvtsi32_si128(at(0));
  if (count > 1) v = _mm_insert_epi32(v, at(1), 1);
  if (count > 2) v = _mm_insert_epi32(v, at(2), 2);
  if (count > 3) v = _mm_insert_epi32(v, at(3), 3);
  return v;
}

// Nibbles: elements 0..15 of a block are its low nibbles, 16..31 its high ones.
template <typename Block>
inline void nibbles(const Block* a, int count, WGroup& w) {
  const __m512i q = gather16(a, offsetof(Block, qs), count);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  w.lo = _mm512_and_si512(q, m4);
  w.hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
}

// q5: bit j of a block's qh is the fifth bit of element j, added as 16 (bytes 0, 1 of each u32 for the
// low half, bytes 2, 3 for the high half).
template <typename Block>
inline void fifth_bits(const Block* a, int count, WGroup& w) {
  const __m128i qh = gather_u32(a, offsetof(Block, qh), count);
  const __m128i halves = _mm_shuffle_epi8(qh, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __mmask64 lo = _cvtu64_mask64(static_cast<std::uint64_t>(_mm_cvtsi128_si64(halves)));
  const __mmask64 hi = _cvtu64_mask64(static_cast<std::uint64_t>(_mm_extract_epi64(halves, 1)));
  w.lo = _mm512_mask_add_epi8(w.lo, lo, w.lo, sixteen);
  w.hi = _mm512_mask_add_epi8(w.hi, hi, w.hi, sixteen);
}

// d and m (two halves at the start of the block) per lane.
template <typename Block>
inline void scales_mins(const Block* a, int count, WGroup& w) {
  const __m256 dm = _mm256_cvtph_ps(gather_u32(a, 0, count));  // [d0 m0 d1 m1 d2 m2 d3 m3]
  const __m512 v = _mm512_castps256_ps512(dm);
  w.d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6), v);
  w.m = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7), v);
}

struct Q4_1 {
  using Block = tensor::BlockQ4_1;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;
  static WGroup load(const Block* a, int count) {
    WGroup w;
    nibbles(a, count, w);
    scales_mins(a, count, w);
    return w;
  }
};

struct Q5_1 {
  using Block = tensor::BlockQ5_1;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;
  static WGroup load(const Block* a, int count) {
    WGroup w;
    nibbles(a, count, w);
    fifth_bits(a, count, w);
    scales_mins(a, count, w);
    return w;
  }
};

struct Q5_0 {
  using Block = tensor::BlockQ5_0;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 16;
  static WGroup load(const Block* a, int count) {
    WGroup w;
    nibbles(a, count, w);
    fifth_bits(a, count, w);
    // The d of each block: a u16 at offset 0 (the u32 there also holds qh's first bytes: masked off).
    const __m128i d16 = _mm_and_si128(gather_u32(a, 0, count), _mm_set1_epi32(0xFFFF));
    w.d = per_block(_mm_cvtph_ps(_mm_packus_epi32(d16, d16)));
    w.m = _mm512_setzero_ps();
    return w;
  }
};

// The activations of one group of one token, as the products use them.
struct XGroup {
  const ActGroup* g;
  __m512 d;     // d_y per lane
  __m512 s;     // _1 types: d_y * sum(y) in the first lane of each block
  __m512i base; // offset types: -offset * sum(y) in the first lane of each block
};

template <typename W>
inline XGroup x_group(const ActGroup& g) {
  XGroup x;
  x.g = &g;
  x.d = per_block(_mm_loadu_ps(g.d));
  if constexpr (W::kMin) {
    x.s = first_lane_ps(_mm_loadu_ps(g.s));
  } else {
    const __m128i sum = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g.sum));
    x.base = first_lane_i32(_mm_sub_epi32(_mm_setzero_si128(), _mm_mullo_epi32(sum, _mm_set1_epi32(W::kOffset))));
  }
  return x;
}

template <typename W>
inline void product(const WGroup& w, const XGroup& x, __m512& acc) {
  const __m512i start = W::kMin ? _mm512_setzero_si512() : x.base;
  const __m512i lo = _mm512_dpbusd_epi32(start, w.lo, _mm512_loadu_si512(x.g->lo));
  const __m512i dot = _mm512_dpbusd_epi32(lo, w.hi, _mm512_loadu_si512(x.g->hi));
  acc = _mm512_fmadd_ps(_mm512_mul_ps(w.d, x.d), _mm512_cvtepi32_ps(dot), acc);
  if constexpr (W::kMin) acc = _mm512_fmadd_ps(w.m, x.s, acc);
}

// A last group of one or two blocks: the same products on the lower 256 bits (half the work of a zmm step
// on a CPU that splits zmm operations in two), the upper lanes of acc left as they are.
template <typename W>
inline void product_half(const WGroup& w, const XGroup& x, __m512& acc) {
  const __m256i start = W::kMin ? _mm256_setzero_si256() : _mm512_castsi512_si256(x.base);
  const __m256i lo = _mm256_dpbusd_epi32(start, _mm512_castsi512_si256(w.lo),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.g->lo)));
  const __m256i dot = _mm256_dpbusd_epi32(lo, _mm512_castsi512_si256(w.hi),
                                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.g->hi)));
  __m256 a = _mm512_castps512_ps256(acc);
  const __m256 scale = _mm256_mul_ps(_mm512_castps512_ps256(w.d), _mm512_castps512_ps256(x.d));
  a = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dot), a);
  if constexpr (W::kMin) a = _mm256_fmadd_ps(_mm512_castps512_ps256(w.m), _mm512_castps512_ps256(x.s), a);
  acc = _mm512_insertf32x8(acc, a, 0);
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
  const std::int64_t nb = n / kQK, full = nb / kGroup;
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const TilePrefetch prefetch(w, R * stride, full + 1);
  auto step = [&](std::int64_t g, int count) {
    WGroup wg[R];
    if constexpr (R > 1) prefetch.at(g);
    for (int r = 0; r < R; ++r) {
      if constexpr (R == 1) prefetch_ahead(a[r] + kGroup * g, kGroup * sizeof(Block));
      wg[r] = W::load(a[r] + kGroup * g, count);
    }
    for (int t = 0; t < T; ++t) {
      const XGroup xg = x_group<W>(b[t][g]);
      for (int r = 0; r < R; ++r) {
        if (count <= 2) {
          product_half<W>(wg[r], xg, acc[r][t]);
        } else {
          product<W>(wg[r], xg, acc[r][t]);
        }
      }
    }
  };
  for (std::int64_t g = 0; g < full; ++g) step(g, kGroup);
  if (nb % kGroup != 0) step(full, static_cast<int>(nb % kGroup));
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

// Two tokens (a verify step with one drafted token) take the four rows in one pass: 8 accumulators and the
// four rows' weights still fit in the registers, and each activation group serves four rows instead of two
// (q4_1 products at T = 2 about 4% cheaper on the development machine; at T = 3 no better).
template <typename W, int T>
void rows4(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, float* y,
           std::size_t y_stride) {
  if constexpr (T <= 2) {
    tile<W, 4, T>(n, w, stride, x, x_stride, y, y_stride);
  } else {
    tile<W, 2, T>(n, w, stride, x, x_stride, y, y_stride);
    tile<W, 2, T>(n, static_cast<const unsigned char*>(w) + 2 * stride, stride, x, x_stride, y + 2, y_stride);
  }
}

template <typename W>
void tile_any(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, int n_tokens,
              float* y, std::size_t y_stride) {
  switch (n_tokens) {
    case 1: return rows4<W, 1>(n, w, stride, x, x_stride, y, y_stride);
    case 2: return rows4<W, 2>(n, w, stride, x, x_stride, y, y_stride);
    case 3: return rows4<W, 3>(n, w, stride, x, x_stride, y, y_stride);
    case 4: return rows4<W, 4>(n, w, stride, x, x_stride, y, y_stride);
    case 5: return rows4<W, 5>(n, w, stride, x, x_stride, y, y_stride);
    case 6: return rows4<W, 6>(n, w, stride, x, x_stride, y, y_stride);
    case 7: return rows4<W, 7>(n, w, stride, x, x_stride, y, y_stride);
    default: return rows4<W, 8>(n, w, stride, x, x_stride, y, y_stride);
  }
}

}  // namespace
}  // namespace avx512_blocks

TileKernels tile_blocks_avx512(tensor::DType w) {
  using namespace avx512_blocks;
  switch (w) {
    case tensor::DType::q4_1: return {dot1<Q4_1>, tile_any<Q4_1>, act_pack_q8_0, act_packed_bytes};
    case tensor::DType::q5_0: return {dot1<Q5_0>, tile_any<Q5_0>, act_pack_q8_0, act_packed_bytes};
    case tensor::DType::q5_1: return {dot1<Q5_1>, tile_any<Q5_1>, act_pack_q8_0, act_packed_bytes};
    default: return {};
  }
}

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
