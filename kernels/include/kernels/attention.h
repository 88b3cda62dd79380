// Bidirectional attention over sequences packed row after row without padding (an encoder's batch):
// every row of sequence s (rows seq_indptr[s] .. seq_indptr[s + 1]) attends to every row of s and to no
// other, for each head: out = softmax(scale q k^T) v. Rows of q, k, v and out are strided (q, k and v
// may be the column blocks of one [n, 3 d] product), each row holding n_heads heads of head_dim values.
//
// The fast version (AVX2/FMA) runs each (sequence, head) as two small matrix products: the sequence's
// keys transposed once, then for a block of queries the scores of every key as vector rows, the softmax
// of kernels/ops.h, and the weighted sum of the values as broadcasts times value rows. Head dims that are
// not a multiple of 8 take the reference. Parallel over (sequence, head) on a tensor::ThreadPool.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/isa.h"
#include "tensor/thread_pool.h"

namespace kernels {

struct BidirectionalAttentionParams {
  std::int64_t n_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t q_stride = 0;    // floats from one row of q to the next (>= n_heads * head_dim)
  std::int64_t k_stride = 0;    // of k
  std::int64_t v_stride = 0;    // of v
  std::int64_t out_stride = 0;  // of out
  float scale = 1.0f;
};

// seq_indptr: n_seqs + 1 non-decreasing offsets from 0. Throws ShapeError on bad sizes or offsets, null
// pointers with rows to do (nothing written then).
void bidirectional_attention_ref(const BidirectionalAttentionParams& p, const float* q, const float* k,
                                 const float* v, std::span<const std::int32_t> seq_indptr, float* out);
void bidirectional_attention(const BidirectionalAttentionParams& p, const float* q, const float* k, const float* v,
                             std::span<const std::int32_t> seq_indptr, float* out, tensor::ThreadPool* pool,
                             Isa isa = best_isa());

}  // namespace kernels
