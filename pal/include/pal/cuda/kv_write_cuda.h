// CUDA writes into the paged KV cache (layout of pal/paged_kv.h, f16, bf16 or f32 pages in device memory):
// this step's K and V appended into their slots with RoPE fused (every pal::RopeConfig variant: NeoX or
// GPT-J, partial rotary dims, linear / NTK / dynamic NTK / YaRN / Llama 3.1 scaling), and the copy of whole
// pages (copy-on-write of a shared last page). All pointers are device pointers; calls queue on `stream`.
// Throws pal::Error on a bad configuration or shape (nothing launched), tensor::cuda errors on launch.
#pragma once

#include <pal/rope.h>
#include <tensor/cuda/stream.h>
#include <tensor/dtype.h>

#include <cstdint>

namespace pal::cuda {

struct KvWriteArgs {
  tensor::DType dtype = tensor::DType::bf16;  // of the pages: f16, bf16 or f32
  std::int32_t n_kv_heads = 0;
  std::int32_t head_dim = 0;                  // 64, 128 or 256
  void* k_pages = nullptr;                    // [n_pages][16][n_kv_heads][head_dim]
  void* v_pages = nullptr;                    // [n_pages][16][n_kv_heads][head_dim]
};

// Rotates q in place and k into its page slot, copies v into its slot: token t at positions[t] goes to
// slot slots[t] (= page * 16 + offset). q may be null (K only). config.head_dim must equal kv.head_dim.
void rope_append(const RopeConfig& config, const KvWriteArgs& kv,
                 float* q,                        // [n_tokens][n_q_heads][head_dim], in place
                 const float* k,                  // [n_tokens][n_kv_heads][head_dim]
                 const float* v,                  // [n_tokens][n_kv_heads][head_dim]
                 const std::int32_t* positions,   // [n_tokens]
                 const std::int32_t* slots,       // [n_tokens]
                 std::int32_t n_tokens, std::int32_t n_q_heads, const tensor::cuda::Stream* stream = nullptr);

// Appends k and v into their slots unrotated.
void kv_append(const KvWriteArgs& kv, const float* k, const float* v, const std::int32_t* slots,
               std::int32_t n_tokens, const tensor::cuda::Stream* stream = nullptr);

// Copies pages src_pages[i] -> dst_pages[i] (K and V), i < n_copies.
void copy_pages(const KvWriteArgs& kv, const std::int32_t* src_pages, const std::int32_t* dst_pages,
                std::int32_t n_copies, const tensor::cuda::Stream* stream = nullptr);

}  // namespace pal::cuda
