// Paged attention over the 16-token-page KV cache (pal/paged_kv.h): decode (one query token per sequence)
// and prefill (many query tokens per sequence, causal, over pages already cached: chunked prefill).
// GQA/MQA (n_q_heads a multiple of n_kv_heads; query head h reads KV head h / (n_q_heads / n_kv_heads)),
// f32 or f16 KV, sliding window, logit soft-capping, any scale.
//
// Each op has a scalar reference (`*_ref`: two-pass softmax in double, obviously right) and the fast CPU
// version (AVX-512 or AVX2/FMA/F16C chosen at run time, online softmax, parallel on a tensor::ThreadPool over
// sequences x KV heads, and in decode with few sequences over key ranges too, merged afterwards; head dims
// other than 64/80/96/128/256 take a generic scalar kernel). Queries and outputs are f32. The CUDA versions
// take the same structs.
//
// Batch invariance of the fast CPU versions: a query row's output depends only on its own sequence (its
// keys, its position), never on the other rows or sequences of the call, the thread count, or whether it
// came through decode or prefill: keys are visited in fixed 512-key chunks whose states are merged in order.
//
// Every function validates first and throws pal::Error (nothing written) on: an odd head dim or one
// below 2, a KV dtype other than f32/f16, n_q_heads not a positive multiple of n_kv_heads, a
// negative window or soft cap, a non-finite scale, an inconsistent page table, an out-of-range page, an
// empty sequence in decode, or more query tokens than cached tokens in prefill.
#pragma once

#include <pal/paged_kv.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tensor {
class ThreadPool;
}

namespace pal {

struct AttentionParams {
  std::int32_t n_q_heads = 0;
  float scale = 0.0f;            // logits = scale * q.k (usually 1 / sqrt(head_dim))
  float logit_soft_cap = 0.0f;   // 0: off; else logits = cap * tanh(logits / cap) (Gemma 2), after scale
  std::int32_t sliding_window = 0;  // 0: off; else the query at position p sees keys p - window < j <= p
};

// Decode: sequence s's single query token sits at position seq_lens[s] - 1 and sees every cached token
// (within the window).
struct DecodeArgs {
  const float* q = nullptr;  // [n_seqs][n_q_heads][head_dim]
  float* out = nullptr;      // [n_seqs][n_q_heads][head_dim]
};

// Prefill: sequence s has the query rows qo_indptr[s] .. qo_indptr[s + 1]; with n = that count, row i sits at
// position seq_lens[s] - n + i (its K/V are the last n cached tokens) and sees keys up to its own position.
struct PrefillArgs {
  const std::int32_t* qo_indptr = nullptr;  // [n_seqs + 1], non-decreasing, qo_indptr[0] == 0
  const float* q = nullptr;                 // [qo_indptr[n_seqs]][n_q_heads][head_dim]
  float* out = nullptr;                     // [qo_indptr[n_seqs]][n_q_heads][head_dim]
};

// Reference decode attention. Throws pal::Error as above.
void decode_attention_ref(const PagedKv& kv, const AttentionParams& params, const DecodeArgs& args);
// Reference prefill attention. Throws pal::Error as above (also for a malformed qo_indptr).
void prefill_attention_ref(const PagedKv& kv, const AttentionParams& params, const PrefillArgs& args);

// Fast CPU decode attention; pool == nullptr runs on the calling thread. Throws pal::Error as above.
void decode_attention(const PagedKv& kv, const AttentionParams& params, const DecodeArgs& args,
                      tensor::ThreadPool* pool = nullptr);
// Fast CPU prefill attention; pool == nullptr runs on the calling thread. Throws pal::Error as above.
void prefill_attention(const PagedKv& kv, const AttentionParams& params, const PrefillArgs& args,
                       tensor::ThreadPool* pool = nullptr);

// Which SIMD path the fast CPU kernels take: "avx512", "avx2" or "scalar" (the reference).
const char* attention_cpu_isa();
// The SIMD paths this CPU can run, widest first (always ends with "scalar").
std::vector<std::string> attention_cpu_isas();
// Makes the fast kernels take `isa` (one of attention_cpu_isas(); for tests and benchmarks of the
// narrower paths). Not thread-safe against running kernels. Throws pal::Error naming an ISA this CPU
// lacks or an unknown name; the previous choice stays.
void set_attention_cpu_isa(const std::string& isa);

// Checks params against kv for `op`; throws pal::Error. (Called by every function above.)
void validate_attention(const PagedKv& kv, const AttentionParams& params, const char* op);

}  // namespace pal
