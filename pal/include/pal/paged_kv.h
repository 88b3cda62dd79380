// The paged KV cache as the attention kernels see it: a plain, backend-neutral params struct of raw
// pointers (host memory for the CPU kernels, device memory for the CUDA ones), documented by its layout,
// in the spirit of flashinfer's paged_kv_t.
//
//   K and V pages:  [n_pages][kPageSize = 16][n_kv_heads][head_dim], element type `dtype` (f32 or f16),
//                   rows contiguous; K and V have the same shape and type.
//   page table:     CSR over sequences: sequence s owns, in token order, the pages
//                   page_indices[page_indptr[s] .. page_indptr[s + 1]); token t of s lives in slot t % 16 of
//                   page page_indices[page_indptr[s] + t / 16].
//   seq_lens:       tokens cached for each sequence (including this step's query tokens, whose K/V the caller
//                   has already written). Sequence s must own exactly ceil(seq_lens[s] / 16) pages.
#pragma once

#include <tensor/dtype.h>

#include <cstdint>

namespace pal {

inline constexpr std::int32_t kPageSize = 16;  // tokens per KV page

struct PagedKv {
  const void* k_pages = nullptr;  // [n_pages][kPageSize][n_kv_heads][head_dim], dtype
  const void* v_pages = nullptr;  // [n_pages][kPageSize][n_kv_heads][head_dim], dtype
  tensor::DType dtype = tensor::DType::f32;  // f32 or f16
  std::int32_t n_pages = 0;     // pages in the pools above (page indices must be < n_pages)
  std::int32_t n_kv_heads = 0;
  std::int32_t head_dim = 0;    // even, >= 2 (CPU; SIMD kernels for 64, 80, 96, 128, 256); CUDA: 64, 128, 256

  std::int32_t n_seqs = 0;
  const std::int32_t* page_indptr = nullptr;   // [n_seqs + 1], non-decreasing, page_indptr[0] == 0
  const std::int32_t* page_indices = nullptr;  // [page_indptr[n_seqs]]
  const std::int32_t* seq_lens = nullptr;      // [n_seqs]
};

// Element offset of (page, slot, kv_head, 0) in the K or V pool.
inline std::int64_t kv_offset(const PagedKv& kv, std::int64_t page, std::int64_t slot,
                              std::int64_t kv_head) {
  return ((page * kPageSize + slot) * kv.n_kv_heads + kv_head) * kv.head_dim;
}

// Checks the cache description for `op` (the operation named in messages): non-null pointers, a supported
// dtype and head dim, a well-formed page table whose every entry lies in [0, n_pages), and exactly
// ceil(seq_lens[s] / 16) pages per sequence. Throws pal::Error naming the sequence and entry at fault.
void validate_paged_kv(const PagedKv& kv, const char* op);

// The head dims the SIMD CPU kernels are compiled for (other even head dims run a generic scalar kernel).
bool is_supported_head_dim(std::int32_t head_dim);

}  // namespace pal
