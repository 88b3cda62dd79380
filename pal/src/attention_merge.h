// Fixed key chunks and their merge, shared by every fast CPU attention path so that a query row's output
// does not depend on how the work was cut (batch invariance).
//
// A row's keys are visited in chunks of kKeyChunk absolute positions ([0, 512), [512, 1024), ...). Each
// chunk's softmax state (unnormalized o, running max m, sum l) starts fresh, and the chunks are folded into
// the row's result in chunk order by merge_chunk, then normalized by finish_row. Whether one unit walks all
// the chunks (prefill, decode with many sequences) or split-KV decode units compute them apart and
// attention_cpu.cpp folds them afterwards, the arithmetic is the same, so the bits are. Plain scalar code
// with explicit fma: the per-ISA files (built with -mfma) and the generic file agree exactly.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "pal/paged_kv.h"

namespace pal::detail {

inline constexpr std::int64_t kKeyChunk = 512;  // keys per chunk (a multiple of kPageSize)
inline constexpr std::int64_t kPagesPerChunk = kKeyChunk / kPageSize;

// Folds one chunk's state (o [d] unnormalized, m, l) into the row's running state (acc [d], *acc_m,
// *acc_l; start from zeros, -inf, 0). A chunk without visible keys (l == 0) changes nothing.
inline void merge_chunk(std::int32_t d, const float* o, float m, float l, float* acc, float* acc_m, float* acc_l) {
  if (l == 0.0f) return;
  const float m_new = std::max(*acc_m, m);
  const float a = std::exp(*acc_m - m_new);  // 0 while acc is empty (acc_m == -inf)
  const float b = std::exp(m - m_new);
  for (std::int32_t i = 0; i < d; ++i) acc[i] = std::fma(o[i], b, acc[i] * a);
  *acc_l = std::fma(l, b, *acc_l * a);
  *acc_m = m_new;
}

// out [d] = acc / acc_l.
inline void finish_row(std::int32_t d, const float* acc, float acc_l, float* out) {
  const float inv = 1.0f / acc_l;
  for (std::int32_t i = 0; i < d; ++i) out[i] = acc[i] * inv;
}

}  // namespace pal::detail
