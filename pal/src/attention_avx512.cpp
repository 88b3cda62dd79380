// The fast attention kernel built for AVX-512 (F, BW, VL) + FMA + F16C: 16 floats per vector, one vector
// per page of logits. Compiled with its own -m flags; called only when the CPU reports AVX-512F.
#include <immintrin.h>

// GCC 12 at -O1 flags the deliberately undefined first operand of its own AVX-512 intrinsics
// (_mm512_undefined_ps) as uninitialized once they are inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "attention_kernel.h"
#include "simd_math.h"

namespace pal::detail {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V load_f16(const std::uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2i(V n) {  // 2^n for integral n in [-126, 127]
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_castsi512_ps(e);
  }
  static float reduce_add(V a) { return _mm512_reduce_add_ps(a); }
  static float reduce_max(V a) { return _mm512_reduce_max_ps(a); }
  // 16 accumulators -> [sum(a[0]), ..., sum(a[15])]: a transpose-add tree, 45 instructions for 16 sums.
  static V reduce_lanes(const V* a) {
    V x[8], y[4], z[2];
    for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] of keys 2i, 2i+1
      x[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    }
    for (int i = 0; i < 4; ++i) {  // per 128-bit lane: keys 4i .. 4i+3
      y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44),
                           _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0xEE));
    }
    for (int i = 0; i < 2; ++i) {  // lanes: keys 8i..8i+3 (x2 halves), keys 8i+4..8i+7 (x2 halves)
      z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    }
    return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Lanes whose index lane0 + j lies outside [a, b) become fill.
  static V mask_range(V x, int lane0, int a, int b, float fill) {
    const std::uint32_t bits = ((1u << b) - 1u) & ~((1u << a) - 1u);
    const auto k = static_cast<__mmask16>((bits >> lane0) & 0xffffu);
    return _mm512_mask_blend_ps(k, _mm512_set1_ps(fill), x);
  }
  static void prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }  // to L2: a page of all heads outgrows L1
  static V exp(V x) { return simd_exp<Avx512>(x); }
  static V tanh(V x) { return simd_tanh<Avx512>(x); }
};

}  // namespace

void run_unit_avx512(const AttentionUnit& unit) { run_unit<Avx512>(unit); }

}  // namespace pal::detail
