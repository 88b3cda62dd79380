// Helpers of the AVX-512/VNNI register tiles (dot_tile_avx512.cpp, dot_tile_q1_avx512.cpp,
// dot_tile_k_avx512.cpp), included inside each file's namespace after its target pragma.

constexpr int kPrefetchBytes = 4096;  // as dot_x86.inl: the weight stream, 4 KiB ahead

inline float fp16c(std::uint16_t h) { return _cvtsh_ss(h); }

inline void prefetch_ahead(const void* p, std::size_t len) {
  const char* c = static_cast<const char*>(p) + kPrefetchBytes;
  for (std::size_t o = 0; o < len; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}

// [d(p0) x 8 | d(p1) x 8] as f32: the scales of two consecutive blocks, each broadcast to its half.
inline __m512 scale_pair(std::uint16_t h0, std::uint16_t h1) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (static_cast<std::uint32_t>(h1) << 16))));
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

inline __m512i load_pair(const void* p0, const void* p1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(p0))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(p1)), 1);
}

// Two blocks' 16 bytes of nibbles -> 64 u8 levels: block 0's elements 0..31 (low nibbles then high ones,
// as bytes_from_nibbles_32), then block 1's.
inline __m512i nibbles_pair(const std::uint8_t* q0, const std::uint8_t* q1) {
  const __m128i l0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q0));
  const __m128i l1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q1));
  const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(l0), l1, 1);  // [q0 | q1]
  const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);  // [q0 q1 q0>>4 q1>>4]
  return _mm512_and_si512(_mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

#include "horizontal_x86.inl"

inline float hsum16(__m512 x) { return hsum_float_8(_mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1))); }
