// x86 SIMD dot-product kernels (256-bit), included by dot_avx2.cpp and dot_avx512.cpp inside their own
// namespace after a target pragma, so the same code is compiled once per ISA. The including file defines
// mul_sum_us8_pairs(ax, sy): the i32x8 sums of 4 adjacent u8 x s8 products (maddubs+madd on AVX2, one
// vpdpbusd with VNNI). Each kernel computes exactly what the matching reference in dot_ref.cpp does, up
// to the order of the float additions.

// F16C conversion: one instruction, exact (the scalar tensor::f16_to_f32 costs a dozen).
inline float fp16(std::uint16_t h) { return _cvtsh_ss(h); }

#include "horizontal_x86.inl"

inline int hsum_i32_8(__m256i a) {
  const __m128i sum128 = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extractf128_si256(a, 1));
  const __m128i hi64 = _mm_unpackhi_epi64(sum128, sum128);
  const __m128i sum64 = _mm_add_epi32(hi64, sum128);
  const __m128i hi32 = _mm_shuffle_epi32(sum64, _MM_SHUFFLE(2, 3, 0, 1));
  return _mm_cvtsi128_si32(_mm_add_epi32(sum64, hi32));
}

// s8 x s8 -> f32x8 sums of groups of 4 (sign moved onto y so the left operand is unsigned).
inline __m256 mul_sum_i8_pairs_float(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  return _mm256_cvtepi32_ps(mul_sum_us8_pairs(ax, sy));
}

// 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31).
inline __m256i bytes_from_nibbles_32(const std::uint8_t* p) {
  const __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i bytes = _mm256_insertf128_si256(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
  return _mm256_and_si256(_mm256_set1_epi8(0x0F), bytes);
}

// 32 bits -> 32 bytes, 0xFF where the bit is set.
inline __m256i bytes_from_bits_32(const std::uint8_t* p) {
  std::uint32_t x32;
  std::memcpy(&x32, p, sizeof(x32));
  const __m256i shuf_mask = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x32)), shuf_mask);
  const __m256i bit_mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  bytes = _mm256_or_si256(bytes, bit_mask);
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// Software prefetch of the weight stream kPrefetchBytes ahead of the loads (rows are contiguous, so
// running past a row's end fetches the next row). The hardware prefetchers alone leave too few misses in
// flight once the loop has real arithmetic. 4 KiB measured best of 1, 2 and 4 KiB (docs/PERFORMANCE.md).
#ifndef ORCHARD_PREFETCH_BYTES
#define ORCHARD_PREFETCH_BYTES 4096
#endif
constexpr int kPrefetchBytes = ORCHARD_PREFETCH_BYTES;
inline void prefetch_w(const void* p, std::size_t len) {
  const char* c = static_cast<const char*>(p) + kPrefetchBytes;
  for (std::size_t o = 0; o < len; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// ---- f32 / f16 / bf16 against f32 activations -------------------------------------------------------

inline float tail_f32(std::int64_t i, std::int64_t n, const float* a, const float* b) {
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float dot_f32(std::int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_w(a + i, 128);
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  return hsum_float_8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3))) + tail_f32(i, n, a, b);
}

inline __m256 load_f16x8(const std::uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_bf16x8(const std::uint16_t* p) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

template <__m256 (*Load)(const std::uint16_t*), float (*Scalar)(std::uint16_t)>
inline float dot_half8(std::int64_t n, const void* w, const void* x) {
  const std::uint16_t* a = static_cast<const std::uint16_t*>(w);
  const float* b = static_cast<const float*>(x);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_w(a + i, 64);
    acc0 = _mm256_fmadd_ps(Load(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(Load(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(Load(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(Load(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(Load(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum_float_8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) s += Scalar(a[i]) * b[i];
  return s;
}

float dot_f16(std::int64_t n, const void* w, const void* x) {
  return dot_half8<load_f16x8, tensor::f16_to_f32>(n, w, x);
}
float dot_bf16(std::int64_t n, const void* w, const void* x) {
  return dot_half8<load_bf16x8, tensor::bf16_to_f32>(n, w, x);
}

// ---- _0 / _1 types against q8_0 ----------------------------------------------------------------------

// The products d_w * d_x of 4 consecutive blocks, converted together (one vcvtph2ps for 8 halves
// instead of 8 scalar conversions), then broadcast one at a time with a lane permute.
template <typename BW>
inline __m128 scale_products4(const BW* a, const tensor::BlockQ8_0* b) {
  const __m128i h = _mm_setr_epi16(static_cast<short>(a[0].d), static_cast<short>(a[1].d), static_cast<short>(a[2].d),
                                   static_cast<short>(a[3].d), static_cast<short>(b[0].d), static_cast<short>(b[1].d),
                                   static_cast<short>(b[2].d), static_cast<short>(b[3].d));
  const __m256 f = _mm256_cvtph_ps(h);
  return _mm_mul_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
}

inline __m256 lane(__m256 v, int k) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(k)); }

float dot_q4_0(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ4_0*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  const std::int64_t nb = n / kQK;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  const __m256i off = _mm256_set1_epi8(8);
  std::int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    prefetch_w(a + i, 4 * sizeof(*a));
    const __m256 d = _mm256_castps128_ps256(scale_products4(a + i, b + i));
    const __m256i q0 = _mm256_sub_epi8(bytes_from_nibbles_32(a[i].qs), off);
    const __m256i q1 = _mm256_sub_epi8(bytes_from_nibbles_32(a[i + 1].qs), off);
    const __m256i q2 = _mm256_sub_epi8(bytes_from_nibbles_32(a[i + 2].qs), off);
    const __m256i q3 = _mm256_sub_epi8(bytes_from_nibbles_32(a[i + 3].qs), off);
    acc0 = _mm256_fmadd_ps(lane(d, 0), mul_sum_i8_pairs_float(q0, load256(b[i].qs)), acc0);
    acc1 = _mm256_fmadd_ps(lane(d, 1), mul_sum_i8_pairs_float(q1, load256(b[i + 1].qs)), acc1);
    acc0 = _mm256_fmadd_ps(lane(d, 2), mul_sum_i8_pairs_float(q2, load256(b[i + 2].qs)), acc0);
    acc1 = _mm256_fmadd_ps(lane(d, 3), mul_sum_i8_pairs_float(q3, load256(b[i + 3].qs)), acc1);
  }
  for (; i < nb; ++i) {
    const __m256 d0 = _mm256_set1_ps(fp16(a[i].d) * fp16(b[i].d));
    const __m256i q0 = _mm256_sub_epi8(bytes_from_nibbles_32(a[i].qs), off);
    acc0 = _mm256_fmadd_ps(d0, mul_sum_i8_pairs_float(q0, load256(b[i].qs)), acc0);
  }
  return hsum_float_8(_mm256_add_ps(acc0, acc1));
}

// Unsigned levels (q4_1, q5_1): sum(q * y) * dw * dy + mw * dy * sum(y).
inline void acc_unsigned_block(__m256i q, const tensor::BlockQ8_0& b, float dw, float mw, __m256& acc) {
  const __m256i y = load256(b.qs);
  const float dy = fp16(b.d);
  const __m256 dot = _mm256_cvtepi32_ps(mul_sum_us8_pairs(q, y));
  const __m256 sy = _mm256_cvtepi32_ps(mul_sum_us8_pairs(_mm256_set1_epi8(1), y));
  acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * dy), dot, acc);
  acc = _mm256_fmadd_ps(_mm256_set1_ps(mw * dy), sy, acc);
}

float dot_q4_1(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ4_1*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n / kQK; ++i) {
    prefetch_w(a + i, sizeof(*a));
    acc_unsigned_block(bytes_from_nibbles_32(a[i].qs), b[i], fp16(a[i].d), fp16(a[i].m), acc);
  }
  return hsum_float_8(acc);
}

float dot_q5_0(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ5_0*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n / kQK; ++i) {
    prefetch_w(a + i, sizeof(*a));
    const __m256 d = _mm256_set1_ps(fp16(a[i].d) * fp16(b[i].d));
    __m256i q = bytes_from_nibbles_32(a[i].qs);
    // Where the fifth bit is clear, OR 0xF0: the byte then reads as nibble - 16 in two's complement.
    const __m256i hi = _mm256_andnot_si256(bytes_from_bits_32(a[i].qh), _mm256_set1_epi8(static_cast<char>(0xF0)));
    q = _mm256_or_si256(q, hi);
    acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(q, load256(b[i].qs)), acc);
  }
  return hsum_float_8(acc);
}

float dot_q5_1(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ5_1*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n / kQK; ++i) {
    prefetch_w(a + i, sizeof(*a));
    __m256i q = bytes_from_nibbles_32(a[i].qs);
    q = _mm256_or_si256(q, _mm256_and_si256(bytes_from_bits_32(a[i].qh), _mm256_set1_epi8(0x10)));
    acc_unsigned_block(q, b[i], fp16(a[i].d), fp16(a[i].m), acc);
  }
  return hsum_float_8(acc);
}

float dot_q8_0(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ8_0*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_0*>(x);
  const std::int64_t nb = n / kQK;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  std::int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    prefetch_w(a + i, 4 * sizeof(*a));
    const __m256 d = _mm256_castps128_ps256(scale_products4(a + i, b + i));
    acc0 = _mm256_fmadd_ps(lane(d, 0), mul_sum_i8_pairs_float(load256(a[i].qs), load256(b[i].qs)), acc0);
    acc1 = _mm256_fmadd_ps(lane(d, 1), mul_sum_i8_pairs_float(load256(a[i + 1].qs), load256(b[i + 1].qs)), acc1);
    acc0 = _mm256_fmadd_ps(lane(d, 2), mul_sum_i8_pairs_float(load256(a[i + 2].qs), load256(b[i + 2].qs)), acc0);
    acc1 = _mm256_fmadd_ps(lane(d, 3), mul_sum_i8_pairs_float(load256(a[i + 3].qs), load256(b[i + 3].qs)), acc1);
  }
  for (; i < nb; ++i) {
    const __m256 d0 = _mm256_set1_ps(fp16(a[i].d) * fp16(b[i].d));
    acc0 = _mm256_fmadd_ps(d0, mul_sum_i8_pairs_float(load256(a[i].qs), load256(b[i].qs)), acc0);
  }
  return hsum_float_8(_mm256_add_ps(acc0, acc1));
}

// ---- K types against q8_K ----------------------------------------------------------------------------

// Broadcast the i16 at index k of each 128-bit lane to the whole lane (pshufb mask).
inline __m256i bcast_i16(int k_lo, int k_hi) {
  const short lo = static_cast<short>(((2 * k_lo + 1) << 8) | (2 * k_lo));
  const short hi = static_cast<short>(((2 * k_hi + 1) << 8) | (2 * k_hi));
  return _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
}

float dot_q2_K(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ2_K*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_K*>(x);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m128i m4 = _mm_set1_epi8(0xF);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_w(a + i, sizeof(*a));
    const float dall = b[i].d * fp16(a[i].d);
    const float dmin = -b[i].d * fp16(a[i].dmin);
    const std::uint8_t* q2 = a[i].qs;
    const std::int8_t* q8 = b[i].qs;
    const __m128i mins_and_scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].scales));
    const __m128i scales8 = _mm_and_si128(mins_and_scales, m4);
    const __m128i mins8 = _mm_and_si128(_mm_srli_epi16(mins_and_scales, 4), m4);
    const __m256i mins = _mm256_cvtepi8_epi16(mins8);
    const __m256i prod = _mm256_madd_epi16(mins, load256(b[i].bsums));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
    const __m256i all_scales = _mm256_cvtepi8_epi16(scales8);
    const __m128i l_scales = _mm256_extracti128_si256(all_scales, 0);
    const __m128i h_scales = _mm256_extracti128_si256(all_scales, 1);
    const __m256i scales[2] = {_mm256_set_m128i(l_scales, l_scales), _mm256_set_m128i(h_scales, h_scales)};
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 2; ++j, q2 += 32, q8 += 128) {
      const __m256i q2bits = load256(q2);
      for (int k = 0; k < 4; ++k) {
        const __m256i q2k = _mm256_and_si256(_mm256_srli_epi16(q2bits, 2 * k), m3);
        __m256i p = _mm256_maddubs_epi16(q2k, load256(q8 + 32 * k));
        p = _mm256_madd_epi16(_mm256_shuffle_epi8(scales[j], bcast_i16(2 * k, 2 * k + 1)), p);
        sumi = _mm256_add_epi32(sumi, p);
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dall), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum_float_8(acc);
}

float dot_q3_K(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ3_K*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_K*>(x);
  constexpr std::uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i mone = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  std::uint32_t aux[4];
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_w(a + i, sizeof(*a));
    const float d = b[i].d * fp16(a[i].d);
    const std::uint8_t* q3 = a[i].qs;
    const std::int8_t* q8 = b[i].qs;
    // Unpack the 16 six-bit scales into bytes (the same values as q3_k_scale + 32).
    std::memcpy(aux, a[i].scales, 12);
    const std::uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    __m128i scales128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(aux));
    scales128 = _mm_sub_epi8(scales128, _mm_set1_epi8(32));
    const __m256i all_scales = _mm256_cvtepi8_epi16(scales128);
    const __m128i l_scales = _mm256_extracti128_si256(all_scales, 0);
    const __m128i h_scales = _mm256_extracti128_si256(all_scales, 1);
    const __m256i scales[2] = {_mm256_set_m128i(l_scales, l_scales), _mm256_set_m128i(h_scales, h_scales)};
    const __m256i hbits = load256(a[i].hmask);
    __m256i sumi = _mm256_setzero_si256();
    int bit = 0;
    for (int j = 0; j < 2; ++j, q3 += 32, q8 += 128) {
      const __m256i q3bits = load256(q3);
      for (int k = 0; k < 4; ++k, ++bit) {
        const __m256i q3l = _mm256_and_si256(_mm256_srli_epi16(q3bits, 2 * k), m3);
        // 4 where the high bit is clear: the level is q - 4 there.
        const __m256i clear = _mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, bit));
        const __m256i q3h = _mm256_slli_epi16(_mm256_srli_epi16(clear, bit), 2);
        const __m256i y = load256(q8 + 32 * k);
        __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q3l, y), _mm256_maddubs_epi16(q3h, y));
        p = _mm256_madd_epi16(_mm256_shuffle_epi8(scales[j], bcast_i16(2 * k, 2 * k + 1)), p);
        sumi = _mm256_add_epi32(sumi, p);
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum_float_8(acc);
}

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

// -dmin * sum_j m_j * (bsums[2j] + bsums[2j+1]) added into acc_m; returns the scales broadcast to both lanes.
inline __m256i k4_prepare(const std::uint8_t* scales, const tensor::BlockQ8_K& b, float dmin, __m128& acc_m) {
  const __m256i mins_and_scales = _mm256_cvtepu8_epi16(k4_scales_mins(scales));
  const __m256i q8sums = load256(b.bsums);
  const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
  const __m128i prod = _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
  acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
  const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
  return _mm256_set_m128i(sc128, sc128);
}

inline float finish_k4(__m256 acc, __m128 acc_m) {
  acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
  acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
  return hsum_float_8(acc) + _mm_cvtss_f32(acc_m);
}

float dot_q4_K(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ4_K*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_K*>(x);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_w(a + i, sizeof(*a));
    const float d = b[i].d * fp16(a[i].d);
    const float dmin = -b[i].d * fp16(a[i].dmin);
    const __m256i scales = k4_prepare(a[i].scales, b[i], dmin, acc_m);
    const std::uint8_t* q4 = a[i].qs;
    const std::int8_t* q8 = b[i].qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j, q4 += 32, q8 += 64) {
      const __m256i q4bits = load256(q4);
      const __m256i q4l = _mm256_and_si256(q4bits, m4);
      const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
      __m256i pl = _mm256_maddubs_epi16(q4l, load256(q8));
      __m256i ph = _mm256_maddubs_epi16(q4h, load256(q8 + 32));
      pl = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast_i16(2 * j, 2 * j)), pl);
      ph = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast_i16(2 * j + 1, 2 * j + 1)), ph);
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return finish_k4(acc, acc_m);
}

float dot_q5_K(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ5_K*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_K*>(x);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i mone = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_w(a + i, sizeof(*a));
    const float d = b[i].d * fp16(a[i].d);
    const float dmin = -b[i].d * fp16(a[i].dmin);
    const __m256i scales = k4_prepare(a[i].scales, b[i], dmin, acc_m);
    const std::uint8_t* q5 = a[i].qs;
    const std::int8_t* q8 = b[i].qs;
    const __m256i hbits = load256(a[i].qh);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j, q5 += 32, q8 += 64) {
      const __m256i q5bits = load256(q5);
      const __m256i hl = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), mone);
      const __m256i hh = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), mone);
      const __m256i q5l = _mm256_or_si256(_mm256_and_si256(q5bits, m4), _mm256_slli_epi16(hl, 4));
      const __m256i q5h = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q5bits, 4), m4), _mm256_slli_epi16(hh, 4));
      __m256i pl = _mm256_maddubs_epi16(q5l, load256(q8));
      __m256i ph = _mm256_maddubs_epi16(q5h, load256(q8 + 32));
      pl = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast_i16(2 * j, 2 * j)), pl);
      ph = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast_i16(2 * j + 1, 2 * j + 1)), ph);
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return finish_k4(acc, acc_m);
}

float dot_q6_K(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockQ6_K*>(w);
  const auto* b = static_cast<const tensor::BlockQ8_K*>(x);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i m32s = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_w(a + i, sizeof(*a));
    const float d = b[i].d * fp16(a[i].d);
    const std::uint8_t* ql = a[i].ql;
    const std::uint8_t* qh = a[i].qh;
    const std::int8_t* q8 = b[i].qs;
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].scales));
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 2; ++j, ql += 64, qh += 32, q8 += 128) {
      const __m256i bits1 = load256(ql);
      const __m256i bits2 = load256(ql + 32);
      const __m256i bitsh = load256(qh);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(bits1, m4), _mm256_slli_epi16(_mm256_and_si256(bitsh, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(bits2, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bitsh, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bitsh, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bitsh, 6), m2), 4));
      for (int k = 0; k < 4; ++k) {
        const __m256i y = load256(q8 + 32 * k);
        __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], y), _mm256_maddubs_epi16(m32s, y));
        // Scales 8j + 2k (elements 0..15 of the group) and 8j + 2k + 1 (16..31).
        const int s0 = 8 * j + 2 * k;
        const __m128i pick = _mm_set_epi8(static_cast<char>(s0 + 1), static_cast<char>(s0 + 1), static_cast<char>(s0 + 1),
                                          static_cast<char>(s0 + 1), static_cast<char>(s0 + 1), static_cast<char>(s0 + 1),
                                          static_cast<char>(s0 + 1), static_cast<char>(s0 + 1), static_cast<char>(s0),
                                          static_cast<char>(s0), static_cast<char>(s0), static_cast<char>(s0),
                                          static_cast<char>(s0), static_cast<char>(s0), static_cast<char>(s0),
                                          static_cast<char>(s0));
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum_float_8(acc);
}

// nf4 with f32 activations, 16 lanes as two registers of 8 (lanes 0..7, 8..15 of dot_ref.cpp's dot_nf4,
// which gives the same bits): each block's 64 codes become level indices in element order, a level is
// picked from the 16-entry table by two 8-entry permutes and a blend on bit 3 of the code.
float dot_nf4(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockNf4*>(w);
  const float* b = static_cast<const float*>(x);
  const float* level = nf4_levels().data();
  const __m256 table_lo = _mm256_loadu_ps(level), table_hi = _mm256_loadu_ps(level + 8);
  const __m128i low_nibble = _mm_set1_epi16(0x000F);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n / tensor::kQK_NF4; ++i) {
    const float* xb = b + i * tensor::kQK_NF4;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      // 8 bytes = 16 elements; per u16 lane: the high nibble (the even element) in the low byte, the low
      // nibble (the odd one) in the high byte: the codes in element order.
      const __m128i bytes = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a[i].qs + 8 * k)));
      const __m128i codes = _mm_or_si128(_mm_srli_epi16(bytes, 4), _mm_slli_epi16(_mm_and_si128(bytes, low_nibble), 8));
      const __m256i idx0 = _mm256_cvtepu8_epi32(codes);
      const __m256i idx1 = _mm256_cvtepu8_epi32(_mm_srli_si128(codes, 8));
      const __m256 l0 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(table_lo, idx0), _mm256_permutevar8x32_ps(table_hi, idx0),
                                         _mm256_castsi256_ps(_mm256_slli_epi32(idx0, 28)));
      const __m256 l1 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(table_lo, idx1), _mm256_permutevar8x32_ps(table_hi, idx1),
                                         _mm256_castsi256_ps(_mm256_slli_epi32(idx1, 28)));
      s0 = _mm256_fmadd_ps(l0, _mm256_loadu_ps(xb + 16 * k), s0);
      s1 = _mm256_fmadd_ps(l1, _mm256_loadu_ps(xb + 16 * k + 8), s1);
    }
    const __m256 d = _mm256_set1_ps(a[i].absmax);
    acc0 = _mm256_fmadd_ps(d, s0, acc0);
    acc1 = _mm256_fmadd_ps(d, s1, acc1);
  }
  return hsum_float_8(_mm256_add_ps(acc0, acc1));
}

DotFn table_fn(tensor::DType w) {
  using tensor::DType;
  switch (w) {
    case DType::f32: return dot_f32;
    case DType::f16: return dot_f16;
    case DType::bf16: return dot_bf16;
    case DType::q4_0: return dot_q4_0;
    case DType::q4_1: return dot_q4_1;
    case DType::q5_0: return dot_q5_0;
    case DType::q5_1: return dot_q5_1;
    case DType::q8_0: return dot_q8_0;
    case DType::q2_K: return dot_q2_K;
    case DType::q3_K: return dot_q3_K;
    case DType::q4_K: return dot_q4_K;
    case DType::q5_K: return dot_q5_K;
    case DType::q6_K: return dot_q6_K;
    case DType::q8_K: return nullptr;
    case DType::nf4: return dot_nf4;
  }
  return nullptr;
}
