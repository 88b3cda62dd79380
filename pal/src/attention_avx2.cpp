// The fast attention kernel built for AVX2 + FMA + F16C: 8 floats per vector. Compiled with its own -m
// flags; called only when the CPU reports AVX2, FMA and F16C (and not AVX-512F).
#include <immintrin.h>

#include "attention_kernel.h"
#include "simd_math.h"

namespace pal::detail {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kWidth = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V load_f16(const std::uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2i(V n) {  // 2^n for integral n in [-126, 127]
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(e);
  }
  static float reduce_add(V a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(V a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // 8 accumulators -> [sum(a[0]), ..., sum(a[7])] with a horizontal-add tree.
  static V reduce_lanes(const V* a) {
    const V h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const V h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const V h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
  }
  // Lanes whose index lane0 + j lies outside [a, b) become fill.
  static V mask_range(V x, int lane0, int a, int b, float fill) {
    const V idx = _mm256_add_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps(static_cast<float>(lane0)));
    const V in = _mm256_and_ps(_mm256_cmp_ps(idx, _mm256_set1_ps(static_cast<float>(a)), _CMP_GE_OQ),
                               _mm256_cmp_ps(idx, _mm256_set1_ps(static_cast<float>(b)), _CMP_LT_OQ));
    return _mm256_blendv_ps(_mm256_set1_ps(fill), x, in);
  }
  static void prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }  // to L2: a page of all heads outgrows L1
  static V exp(V x) { return simd_exp<Avx2>(x); }
  static V tanh(V x) { return simd_tanh<Avx2>(x); }
};

}  // namespace

void run_unit_avx2(const AttentionUnit& unit) { run_unit<Avx2>(unit); }

}  // namespace pal::detail
