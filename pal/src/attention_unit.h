// One unit of work of the fast CPU attention: a sequence, a range of its KV heads (one in prefill, all or a
// share in decode), a range of its keys (all unless decode splits them), and a run of consecutive query
// tokens (1 in decode): n_tokens x n_heads x group query rows, each KV head's rows sharing its K/V reads.
// attention_cpu.cpp cuts the batch into units and hands each to the kernel of the ISA in hand.
#pragma once

#include <cstdint>

#include "pal/attention.h"

namespace pal::detail {

struct AttentionUnit {
  const PagedKv* kv = nullptr;
  const AttentionParams* params = nullptr;
  std::int32_t seq = 0;
  std::int32_t kv_head = 0;      // the first KV head of the unit
  std::int32_t n_heads = 1;      // KV heads kv_head .. kv_head + n_heads - 1 (decode takes all of them, so a
                                 // page's K and V are read as one contiguous block)
  std::int32_t n_tokens = 0;     // query tokens in this unit
  std::int64_t first_pos = 0;    // position of the first of them; token i sits at first_pos + i
  const float* q = nullptr;      // query row of token 0, q head kv_head * group: [n_tokens][tok_stride]
  float* out = nullptr;          // same layout as q
  std::int64_t tok_stride = 0;   // floats between consecutive tokens (n_q_heads * head_dim)
  float* scratch = nullptr;      // unit_scratch_floats(...) floats, 64-byte aligned
  // Split-KV decode: only keys in [key_begin, key_end) (whole key chunks, attention_merge.h) are visited,
  // and when `partial` is set each row's state of key chunk c goes to partial + row * partial_stride +
  // c * (head_dim + 2) instead of to out, to be merged in chunk order afterwards (attention_cpu.cpp).
  std::int64_t key_begin = 0;
  std::int64_t key_end = INT64_MAX;
  float* partial = nullptr;      // per row (q head) and chunk: o (unnormalized) [head_dim], then m and l
  std::int64_t partial_stride = 0;  // floats between the partial states of consecutive q heads
};

// Floats of scratch a unit of n_tokens tokens and n_heads KV heads needs.
inline std::int64_t unit_scratch_floats(std::int32_t n_tokens, std::int32_t n_heads, std::int32_t group,
                                        std::int32_t head_dim) {
  const std::int64_t rows = static_cast<std::int64_t>(n_tokens) * n_heads * group;
  // o, acc [rows][head_dim], p[rows][16], m, l, alpha, acc_m, acc_l [rows]; the staged K page [16][head_dim];
  // alignment pad.
  return rows * (2 * static_cast<std::int64_t>(head_dim) + 16 + 5) + 16 * static_cast<std::int64_t>(head_dim) + 64;
}

// Throws pal::Error for a head dim no kernel is compiled for. Defined outside the per-ISA files, whose
// code is built with wider instruction sets and must not instantiate shared library templates.
[[noreturn]] void throw_unsupported_head_dim(std::int32_t head_dim);

// Any even head dim (the ones without a SIMD kernel): plain scalar code, the same key chunks and merge as
// the SIMD kernels (attention_generic.cpp).
void run_unit_generic(const AttentionUnit& unit);

// The per-ISA kernels (attention_avx512.cpp, attention_avx2.cpp); call only when the CPU has the ISA.
void run_unit_avx512(const AttentionUnit& unit);
void run_unit_avx2(const AttentionUnit& unit);

}  // namespace pal::detail
