// AVX-512 (F/BW/VL/DQ + VNNI) versions of the dot products: 512-bit f32/f16/bf16 loops, and the
// quantized kernels of dot_x86.inl with vpdpbusd (VNNI) in place of maddubs + madd.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's avx512fintrin.h trips -Wuninitialized on its own _mm512_undefined_* (a known false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "dot.h"
#include "kernels/nf4.h"
#include "quant_common.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif

namespace kernels::detail {
namespace avx512 {
namespace {

inline __m256i mul_sum_us8_pairs(__m256i ax, __m256i sy) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy);
}

#include "dot_x86.inl"

inline float hsum_16(__m512 v) {
  const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  return hsum_float_8(s);
}

float dot_f32_512(std::int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    prefetch_w(a + i, 256);
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    acc2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), acc2);
    acc3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), acc3);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  float s = hsum_16(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline __m512 load_f16x16(const std::uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load_bf16x16(const std::uint16_t* p) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

template <__m512 (*Load)(const std::uint16_t*), float (*Scalar)(std::uint16_t)>
inline float dot_half16(std::int64_t n, const void* w, const void* x) {
  const std::uint16_t* a = static_cast<const std::uint16_t*>(w);
  const float* b = static_cast<const float*>(x);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    prefetch_w(a + i, 128);
    acc0 = _mm512_fmadd_ps(Load(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(Load(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    acc2 = _mm512_fmadd_ps(Load(a + i + 32), _mm512_loadu_ps(b + i + 32), acc2);
    acc3 = _mm512_fmadd_ps(Load(a + i + 48), _mm512_loadu_ps(b + i + 48), acc3);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(Load(a + i), _mm512_loadu_ps(b + i), acc0);
  float s = hsum_16(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
  for (; i < n; ++i) s += Scalar(a[i]) * b[i];
  return s;
}

float dot_f16_512(std::int64_t n, const void* w, const void* x) {
  return dot_half16<load_f16x16, tensor::f16_to_f32>(n, w, x);
}
float dot_bf16_512(std::int64_t n, const void* w, const void* x) {
  return dot_half16<load_bf16x16, tensor::bf16_to_f32>(n, w, x);
}

// f16/bf16: four rows at once. Each activation vector is loaded once for four weight rows (with one row per
// pass the activation loads outnumber the weight loads 2:1 for 2-byte types, and a 14336-wide x does not fit
// L1), 8 independent accumulators, a software prefetch kPrefetchBytes ahead in each of the four row streams.
// f32 has none: measured no faster than dot_f32_512 (docs/cpu-kernels.md).

template <typename T, __m512 (*Load)(const T*), float (*Scalar)(T)>
inline void dot4_rows(std::int64_t n, const void* w, std::size_t stride, const void* x, float* y) {
  const auto* base = static_cast<const unsigned char*>(w);
  const T* a0 = reinterpret_cast<const T*>(base);
  const T* a1 = reinterpret_cast<const T*>(base + stride);
  const T* a2 = reinterpret_cast<const T*>(base + 2 * stride);
  const T* a3 = reinterpret_cast<const T*>(base + 3 * stride);
  const float* b = static_cast<const float*>(x);
  constexpr std::size_t kStepBytes = 32 * sizeof(T);
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_w(a0 + i, kStepBytes);
    prefetch_w(a1 + i, kStepBytes);
    prefetch_w(a2 + i, kStepBytes);
    prefetch_w(a3 + i, kStepBytes);
    const __m512 x0 = _mm512_loadu_ps(b + i), x1 = _mm512_loadu_ps(b + i + 16);
    c00 = _mm512_fmadd_ps(Load(a0 + i), x0, c00);
    c01 = _mm512_fmadd_ps(Load(a0 + i + 16), x1, c01);
    c10 = _mm512_fmadd_ps(Load(a1 + i), x0, c10);
    c11 = _mm512_fmadd_ps(Load(a1 + i + 16), x1, c11);
    c20 = _mm512_fmadd_ps(Load(a2 + i), x0, c20);
    c21 = _mm512_fmadd_ps(Load(a2 + i + 16), x1, c21);
    c30 = _mm512_fmadd_ps(Load(a3 + i), x0, c30);
    c31 = _mm512_fmadd_ps(Load(a3 + i + 16), x1, c31);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 x0 = _mm512_loadu_ps(b + i);
    c00 = _mm512_fmadd_ps(Load(a0 + i), x0, c00);
    c10 = _mm512_fmadd_ps(Load(a1 + i), x0, c10);
    c20 = _mm512_fmadd_ps(Load(a2 + i), x0, c20);
    c30 = _mm512_fmadd_ps(Load(a3 + i), x0, c30);
  }
  float s0 = hsum_16(_mm512_add_ps(c00, c01)), s1 = hsum_16(_mm512_add_ps(c10, c11));
  float s2 = hsum_16(_mm512_add_ps(c20, c21)), s3 = hsum_16(_mm512_add_ps(c30, c31));
  for (; i < n; ++i) {
    s0 += Scalar(a0[i]) * b[i];
    s1 += Scalar(a1[i]) * b[i];
    s2 += Scalar(a2[i]) * b[i];
    s3 += Scalar(a3[i]) * b[i];
  }
  y[0] = s0;
  y[1] = s1;
  y[2] = s2;
  y[3] = s3;
}

// Four rows against three activation rows (prefill): each (row, token) product is accumulated exactly as
// dot4_rows does it (two accumulators over 32-element steps, a 16-element step, the same reductions and
// scalar tail), so a token's results do not depend on whether it went through here or through dot4_rows
// (batch invariance); each converted weight vector now serves three tokens.
template <typename T, __m512 (*Load)(const T*), float (*Scalar)(T)>
inline void dot4x3_rows(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride,
                        float* y, std::size_t y_stride) {
  const auto* base = static_cast<const unsigned char*>(w);
  const T* a[4];
  for (int r = 0; r < 4; ++r) a[r] = reinterpret_cast<const T*>(base + r * stride);
  const float* b[3];
  for (int t = 0; t < 3; ++t) b[t] = reinterpret_cast<const float*>(static_cast<const unsigned char*>(x) + t * x_stride);
  constexpr std::size_t kStepBytes = 32 * sizeof(T);
  __m512 c[4][3][2];
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < 3; ++t) c[r][t][0] = c[r][t][1] = _mm512_setzero_ps();
  }
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int r = 0; r < 4; ++r) prefetch_w(a[r] + i, kStepBytes);
    for (int h = 0; h < 2; ++h) {
      const __m512 x0 = _mm512_loadu_ps(b[0] + i + 16 * h), x1 = _mm512_loadu_ps(b[1] + i + 16 * h),
                   x2 = _mm512_loadu_ps(b[2] + i + 16 * h);
      for (int r = 0; r < 4; ++r) {
        const __m512 wv = Load(a[r] + i + 16 * h);
        c[r][0][h] = _mm512_fmadd_ps(wv, x0, c[r][0][h]);
        c[r][1][h] = _mm512_fmadd_ps(wv, x1, c[r][1][h]);
        c[r][2][h] = _mm512_fmadd_ps(wv, x2, c[r][2][h]);
      }
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 x0 = _mm512_loadu_ps(b[0] + i), x1 = _mm512_loadu_ps(b[1] + i), x2 = _mm512_loadu_ps(b[2] + i);
    for (int r = 0; r < 4; ++r) {
      const __m512 wv = Load(a[r] + i);
      c[r][0][0] = _mm512_fmadd_ps(wv, x0, c[r][0][0]);
      c[r][1][0] = _mm512_fmadd_ps(wv, x1, c[r][1][0]);
      c[r][2][0] = _mm512_fmadd_ps(wv, x2, c[r][2][0]);
    }
  }
  for (int t = 0; t < 3; ++t) {
    float s0 = hsum_16(_mm512_add_ps(c[0][t][0], c[0][t][1])), s1 = hsum_16(_mm512_add_ps(c[1][t][0], c[1][t][1]));
    float s2 = hsum_16(_mm512_add_ps(c[2][t][0], c[2][t][1])), s3 = hsum_16(_mm512_add_ps(c[3][t][0], c[3][t][1]));
    for (std::int64_t k = i; k < n; ++k) {
      s0 += Scalar(a[0][k]) * b[t][k];
      s1 += Scalar(a[1][k]) * b[t][k];
      s2 += Scalar(a[2][k]) * b[t][k];
      s3 += Scalar(a[3][k]) * b[t][k];
    }
    float* yt = y + t * y_stride;
    yt[0] = s0;
    yt[1] = s1;
    yt[2] = s2;
    yt[3] = s3;
  }
}

void dot4x3_f16_512(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, float* y,
                    std::size_t y_stride) {
  dot4x3_rows<std::uint16_t, load_f16x16, tensor::f16_to_f32>(n, w, stride, x, x_stride, y, y_stride);
}
void dot4x3_bf16_512(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride, float* y,
                     std::size_t y_stride) {
  dot4x3_rows<std::uint16_t, load_bf16x16, tensor::bf16_to_f32>(n, w, stride, x, x_stride, y, y_stride);
}

void dot4_f16_512(std::int64_t n, const void* w, std::size_t stride, const void* x, float* y) {
  dot4_rows<std::uint16_t, load_f16x16, tensor::f16_to_f32>(n, w, stride, x, y);
}
void dot4_bf16_512(std::int64_t n, const void* w, std::size_t stride, const void* x, float* y) {
  dot4_rows<std::uint16_t, load_bf16x16, tensor::bf16_to_f32>(n, w, stride, x, y);
}

// nf4 with f32 activations: dot_ref.cpp's 16 lanes in one register, the level picked by one permute of
// the 16-entry table (same bits as the reference and the AVX2 kernel).
float dot_nf4_512(std::int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const tensor::BlockNf4*>(w);
  const float* b = static_cast<const float*>(x);
  const __m512 table = _mm512_loadu_ps(nf4_levels().data());
  const __m128i low_nibble = _mm_set1_epi16(0x000F);
  __m512 acc = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < n / tensor::kQK_NF4; ++i) {
    const float* xb = b + i * tensor::kQK_NF4;
    __m512 s = _mm512_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      const __m128i bytes = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a[i].qs + 8 * k)));
      const __m128i codes = _mm_or_si128(_mm_srli_epi16(bytes, 4), _mm_slli_epi16(_mm_and_si128(bytes, low_nibble), 8));
      const __m512 lv = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), table);
      s = _mm512_fmadd_ps(lv, _mm512_loadu_ps(xb + 16 * k), s);
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(a[i].absmax), s, acc);
  }
  const __m256 lo = _mm512_castps512_ps256(acc);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  return hsum_float_8(_mm256_add_ps(lo, hi));
}

}  // namespace
}  // namespace avx512

Dot4Fn dot4_avx512_fn(tensor::DType w) {
  switch (w) {
    case tensor::DType::f16: return avx512::dot4_f16_512;
    case tensor::DType::bf16: return avx512::dot4_bf16_512;
    default: return nullptr;
  }
}

Dot4x3Fn dot4x3_avx512_fn(tensor::DType w) {
  switch (w) {
    case tensor::DType::f16: return avx512::dot4x3_f16_512;
    case tensor::DType::bf16: return avx512::dot4x3_bf16_512;
    default: return nullptr;
  }
}

DotFn dot_avx512_fn(tensor::DType w) {
  switch (w) {
    case tensor::DType::f32: return avx512::dot_f32_512;
    case tensor::DType::f16: return avx512::dot_f16_512;
    case tensor::DType::bf16: return avx512::dot_bf16_512;
    case tensor::DType::nf4: return avx512::dot_nf4_512;
    default: {
      const DotFn tile = tile_avx512(w).dot;
      return tile != nullptr ? tile : avx512::table_fn(w);
    }
  }
}

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
