// AVX2 + FMA + F16C versions of the dot products and of the activation quantizers (q8_0, q8_K).
// Compiled for that target with a pragma (per-function target attributes), called only when
// __builtin_cpu_supports says the CPU has it (kernels::isa.cpp).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "dot.h"
#include "kernels/nf4.h"
#include "quant_common.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace kernels::detail {
namespace avx2 {
namespace {

inline __m256i mul_sum_us8_pairs(__m256i ax, __m256i sy) {
  const __m256i dot = _mm256_maddubs_epi16(ax, sy);
  return _mm256_madd_epi16(_mm256_set1_epi16(1), dot);
}

#include "dot_x86.inl"

// Packs 4 x 8 int32 (each in [-127, 127]) into 32 int8 in order.
inline __m256i pack_i32x32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
  i0 = _mm256_packs_epi32(i0, i1);
  i2 = _mm256_packs_epi32(i2, i3);
  i0 = _mm256_packs_epi16(i0, i2);
  return _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// roundf: to nearest, ties away from zero (the reference's rounding), exactly.
inline __m256i roundf_epi32(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
  const __m256 one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
  const __m256 adj = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one);
  return _mm256_cvttps_epi32(_mm256_add_ps(t, adj));
}

void quantize_q8_0(const float* x, void* vy, std::int64_t n) {
  auto* y = static_cast<tensor::BlockQ8_0*>(vy);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (std::int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
    m = _mm256_max_ps(m, _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    const float amax = hmax_float_8(m);
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    const __m256 mul = _mm256_set1_ps(id);
    const __m256i q = pack_i32x32(roundf_epi32(_mm256_mul_ps(v0, mul)), roundf_epi32(_mm256_mul_ps(v1, mul)),
                                  roundf_epi32(_mm256_mul_ps(v2, mul)), roundf_epi32(_mm256_mul_ps(v3, mul)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), q);
  }
}

void quantize_q8_K(const float* x, void* vy, std::int64_t n) {
  auto* y = static_cast<tensor::BlockQ8_K*>(vy);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (std::int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < kQK_K; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    const float amax = hmax_float_8(m);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(y[i]));
      continue;
    }
    float max = 0;
    for (int j = 0; j < kQK_K; ++j) {  // the first element of largest magnitude, as the reference picks
      if ((x[j] < 0 ? -x[j] : x[j]) == amax) {
        max = x[j];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 mul = _mm256_set1_ps(iscale);
    for (int j = 0; j < kQK_K; j += 32) {
      // Round to nearest even (the MXCSR default), as nearest_int does.
      const __m256i q = pack_i32x32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), mul)),
                                    _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8), mul)),
                                    _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 16), mul)),
                                    _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 24), mul)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), q);
      // Sums of 16: u8 ones x s8 -> pairs, then pairs of pairs, then fold.
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
      // p: 8 x i32 sums of 4 (elements 4k..4k+3). Sum 4 adjacent for each group of 16.
      const __m256i h = _mm256_hadd_epi32(p, p);  // lane-local: [s01, s23, s01, s23 | s45, s67, ...]
      const __m256i h2 = _mm256_hadd_epi32(h, h);
      y[i].bsums[j / 16] = static_cast<std::int16_t>(_mm256_extract_epi32(h2, 0));
      y[i].bsums[j / 16 + 1] = static_cast<std::int16_t>(_mm256_extract_epi32(h2, 4));
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace
}  // namespace avx2

DotFn dot_avx2_fn(tensor::DType w) {
  const DotFn tile = tile_avx2(w).dot;  // q4_1 / q5_x: packed activations, as matmul and vec_dot give them
  return tile != nullptr ? tile : avx2::table_fn(w);
}

QuantizeFn quantize_avx2_fn(tensor::DType t) {
  if (t == tensor::DType::q8_0) return avx2::quantize_q8_0;
  if (t == tensor::DType::q8_K) return avx2::quantize_q8_K;
  return nullptr;
}

}  // namespace kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
