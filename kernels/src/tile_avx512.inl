// Helpers of the AVX-512/VNNI register tiles (dot_tile_avx512.cpp, dot_tile_q1_avx512.cpp,
// dot_tile_k_avx512.cpp), included inside each file's namespace after its target pragma.

constexpr int kPrefetchBytes = 4096;  // as dot_x86.inl: the weight stream, 4 KiB ahead

inline float fp16c(std::uint16_t h) { return _cvtsh_ss(h); }

inline void prefetch_ahead(const void* p, std::size_t len) {
  const char* c = static_cast<const char*>(p) + kPrefetchBytes;
  for (std::size_t o = 0; o < len; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}

// The weight stream of a tile of several rows: the rows lie side by side (rows * stride bytes), and the tile
// reads them all front to back in `steps` steps. Prefetched as that one span, a little of it at each step,
// kTilePrefetchBytes ahead of the tile's start: with each row prefetching 4 KiB ahead of its own position
// instead, the four-row q8_0 tiles read the output head from DRAM at about half the one-row kernel's rate
// (development machine, Zen 4: a 49,152-row head at 2 tokens cost 1.6-2.5x one token; this way 0.9-1.1x,
// few_token_products_bench). A one-row kernel keeps prefetch_ahead: its stream is linear already.
constexpr std::int64_t kTilePrefetchBytes = 8192;
struct TilePrefetch {
  const char* from;
  std::int64_t lines_per_step;
  TilePrefetch(const void* w, std::size_t bytes, std::int64_t steps)
      : from(static_cast<const char*>(w) + kTilePrefetchBytes),
        lines_per_step((static_cast<std::int64_t>(bytes) + 64 * std::max<std::int64_t>(steps, 1) - 1) /
                       (64 * std::max<std::int64_t>(steps, 1))) {}
  void at(std::int64_t step) const {
    const char* p = from + step * lines_per_step * 64;
    for (std::int64_t l = 0; l < lines_per_step; ++l) _mm_prefetch(p + 64 * l, _MM_HINT_T0);
  }
};

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
