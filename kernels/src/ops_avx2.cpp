// AVX2 + FMA element-wise kernels, compiled for that target with a pragma and called only on CPUs that
// have it. exp is a Cephes-style polynomial (about 2 ulp), enough for the 1e-6 bounds of the tests.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "ops_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace kernels::detail::avx2 {
namespace {

#include "horizontal_x86.inl"

// e^x: x = k ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial, 2^k through the exponent bits.
// Below -87.3 (where e^x leaves the normal range) the result is 0; above 88.4 it is +inf.
inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 overflow = _mm256_cmp_ps(x, _mm256_set1_ps(88.37626f), _CMP_GT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.37626f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3333519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  const __m256 v = _mm256_andnot_ps(underflow, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
  return _mm256_blendv_ps(v, _mm256_set1_ps(INFINITY), overflow);
}

inline __m256 silu256(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(one, e));
}

inline __m256 gelu256(__m256 x) {
  // 0.5 x (1 + tanh(u)) = x / (1 + e^{-2u}): no cancellation where tanh(u) is near -1.
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u = _mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp256(u)));
}

// x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2, erfc(z) for z >= 0 by the Chebyshev fit of Numerical
// Recipes' erfcc (t = 2 / (2 + z), erfc = t exp(P(t) - z^2), fractional error < 1.2e-7 for every z): one
// exp and no cancellation on either side of 0. exp's argument reaches -87, so its float rounding alone
// would cost 4e-6 relative: z^2 = x^2 / 2 and P - z^2 are formed with their exact errors, which go back
// in as a first-order factor.
inline __m256 gelu_erf256(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(0.70710678118654752f));
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(_mm256_set1_ps(2.0f), z));
  __m256 p = _mm256_set1_ps(0.17087277f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
  const __m256 xx = _mm256_mul_ps(x, x);
  const __m256 neg_z2 = _mm256_mul_ps(xx, _mm256_set1_ps(-0.5f));                   // exact halving
  const __m256 neg_z2_err = _mm256_mul_ps(_mm256_fmsub_ps(x, x, xx), _mm256_set1_ps(-0.5f));
  const __m256 s = _mm256_add_ps(p, neg_z2);                                        // two-sum: s + s_err = p - z^2
  const __m256 bb = _mm256_sub_ps(s, p);
  const __m256 s_err = _mm256_add_ps(_mm256_sub_ps(p, _mm256_sub_ps(s, bb)), _mm256_sub_ps(neg_z2, bb));
  const __m256 e = exp256(s);
  const __m256 erfc = _mm256_mul_ps(_mm256_mul_ps(t, e), _mm256_add_ps(one, _mm256_add_ps(s_err, neg_z2_err)));
  const __m256 half_erfc = _mm256_mul_ps(half, erfc);
  const __m256 negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 phi = _mm256_blendv_ps(_mm256_sub_ps(one, half_erfc), half_erfc, negative);
  return _mm256_mul_ps(x, phi);
}

inline float silu1(float x) { return x / (1.0f + std::exp(-x)); }
inline float gelu1(float x) {
  return x / (1.0f + std::exp(-2.0f * 0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

}  // namespace

void rms_norm(const NormParams& p, const float* x, const float* weight, float* y) {
  for (std::int64_t r = 0; r < p.n_rows; ++r) {
    const float* xr = x + r * p.n;
    float* yr = y + r * p.n;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    std::int64_t i = 0;
    for (; i + 16 <= p.n; i += 16) {
      const __m256 v0 = _mm256_loadu_ps(xr + i), v1 = _mm256_loadu_ps(xr + i + 8);
      a0 = _mm256_fmadd_ps(v0, v0, a0);
      a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    double ss = hsum_float_8(_mm256_add_ps(a0, a1));
    for (; i < p.n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(p.n) + p.eps));
    const __m256 vinv = _mm256_set1_ps(inv);
    i = 0;
    for (; i + 8 <= p.n; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + i), vinv);
      if (weight) v = _mm256_mul_ps(v, _mm256_loadu_ps(weight + i));
      _mm256_storeu_ps(yr + i, v);
    }
    for (; i < p.n; ++i) yr[i] = xr[i] * inv * (weight ? weight[i] : 1.0f);
  }
}

void layer_norm(const NormParams& p, const float* x, const float* weight, const float* bias, float* y) {
  for (std::int64_t r = 0; r < p.n_rows; ++r) {
    const float* xr = x + r * p.n;
    float* yr = y + r * p.n;
    __m256 s = _mm256_setzero_ps();
    std::int64_t i = 0;
    for (; i + 8 <= p.n; i += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(xr + i));
    double sum = hsum_float_8(s);
    for (; i < p.n; ++i) sum += xr[i];
    const float mean = static_cast<float>(sum / static_cast<double>(p.n));
    const __m256 vmean = _mm256_set1_ps(mean);
    __m256 v2 = _mm256_setzero_ps();
    i = 0;
    for (; i + 8 <= p.n; i += 8) {
      const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(xr + i), vmean);
      v2 = _mm256_fmadd_ps(d, d, v2);
    }
    double var = hsum_float_8(v2);
    for (; i < p.n; ++i) var += static_cast<double>(xr[i] - mean) * (xr[i] - mean);
    const float inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(p.n) + p.eps));
    const __m256 vinv = _mm256_set1_ps(inv);
    i = 0;
    for (; i + 8 <= p.n; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + i), vmean), vinv);
      if (weight) v = _mm256_mul_ps(v, _mm256_loadu_ps(weight + i));
      if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
      _mm256_storeu_ps(yr + i, v);
    }
    for (; i < p.n; ++i) yr[i] = (xr[i] - mean) * inv * (weight ? weight[i] : 1.0f) + (bias ? bias[i] : 0.0f);
  }
}

void silu(std::int64_t n, const float* x, float* y) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu256(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = silu1(x[i]);
}

void gelu(std::int64_t n, const float* x, float* y) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu256(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = gelu1(x[i]);
}

void gelu_erf(std::int64_t n, const float* x, float* y) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu_erf256(_mm256_loadu_ps(x + i)));
  if (i < n) {  // the tail through a zero-padded vector: the same arithmetic as the body
    alignas(32) float buf[8] = {};
    for (std::int64_t j = i; j < n; ++j) buf[j - i] = x[j];
    _mm256_store_ps(buf, gelu_erf256(_mm256_load_ps(buf)));
    for (std::int64_t j = i; j < n; ++j) y[j] = buf[j - i];
  }
}

void swiglu(std::int64_t n, const float* gate, const float* up, float* y) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_mul_ps(silu256(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) y[i] = silu1(gate[i]) * up[i];
}

void add(std::int64_t n, const float* a, const float* b, float* y) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

void mul(std::int64_t n, const float* a, const float* b, float* y) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) y[i] = a[i] * b[i];
}

bool softmax(const SoftmaxParams& p, const float* x, float* y) {
  // Check every row first so an all -inf row leaves y untouched.
  for (std::int64_t r = 0; r < p.n_rows; ++r) {
    const float* xr = x + r * p.n;
    bool any = false;
    for (std::int64_t i = 0; i < p.n && !any; ++i) any = !(std::isinf(p.scale * xr[i]) && p.scale * xr[i] < 0);
    if (!any) return false;
  }
  const __m256 vscale = _mm256_set1_ps(p.scale);
  for (std::int64_t r = 0; r < p.n_rows; ++r) {
    const float* xr = x + r * p.n;
    float* yr = y + r * p.n;
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    std::int64_t i = 0;
    for (; i + 8 <= p.n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_mul_ps(_mm256_loadu_ps(xr + i), vscale));
    float max = hmax_float_8(vmax);
    for (; i < p.n; ++i) max = std::max(max, p.scale * xr[i]);
    const __m256 vm = _mm256_set1_ps(max);
    __m256 vsum = _mm256_setzero_ps();
    i = 0;
    for (; i + 8 <= p.n; i += 8) {
      const __m256 e = exp256(_mm256_fmsub_ps(_mm256_loadu_ps(xr + i), vscale, vm));
      _mm256_storeu_ps(yr + i, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    double sum = hsum_float_8(vsum);
    for (; i < p.n; ++i) {
      yr[i] = std::exp(p.scale * xr[i] - max);
      sum += yr[i];
    }
    const __m256 vinv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
    i = 0;
    for (; i + 8 <= p.n; i += 8) _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(yr + i), vinv));
    for (; i < p.n; ++i) yr[i] *= static_cast<float>(1.0 / sum);
  }
  return true;
}

}  // namespace kernels::detail::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
