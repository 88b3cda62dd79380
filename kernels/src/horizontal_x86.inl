// Horizontal reductions of one 256-bit vector: its eight float lanes summed or maxed into one float, in the
// same order everywhere, so that every x86 kernel reduces its accumulators alike. Included inside each
// kernel file's namespace after its target pragma (AVX2 or AVX-512 compile them alike).

inline float hsum_float_8(__m256 x) {
  __m128 res = _mm256_extractf128_ps(x, 1);
  res = _mm_add_ps(res, _mm256_castps256_ps128(x));
  res = _mm_add_ps(res, _mm_movehl_ps(res, res));
  res = _mm_add_ss(res, _mm_movehdup_ps(res));
  return _mm_cvtss_f32(res);
}

inline float hmax_float_8(__m256 x) {
  __m128 res = _mm_max_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  res = _mm_max_ps(res, _mm_movehl_ps(res, res));
  res = _mm_max_ss(res, _mm_movehdup_ps(res));
  return _mm_cvtss_f32(res);
}
