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

}  // namespace
}  // namespace avx512

DotFn dot_avx512_fn(tensor::DType w) {
  switch (w) {
    case tensor::DType::f32: return avx512::dot_f32_512;
    case tensor::DType::f16: return avx512::dot_f16_512;
    case tensor::DType::bf16: return avx512::dot_bf16_512;
    default: return avx512::table_fn(w);
  }
}

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
