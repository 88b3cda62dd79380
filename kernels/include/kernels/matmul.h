// Matrix-vector and matrix-matrix products with a weight matrix of any tensor::DType.
//
// The weight W is [n_out, n_in] (n_out rows of n_in elements, each row w_row_bytes apart). For the
// quantized types the activations are quantized on the fly as llama.cpp does (vec_dot_type): q8_0 for
// q4_0/q4_1/q5_0/q5_1/q8_0, q8_K for the K types; f32/f16/bf16 weights take f32 activations. Every
// product has a scalar reference (*_ref) and a fast version (AVX2/FMA, AVX-512/VNNI), chosen at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/isa.h"
#include "tensor/dtype.h"
#include "tensor/thread_pool.h"

namespace kernels {

// How a weight row's bytes are laid out. plain: w_type's blocks one after the other (the GGUF layout).
// q4_1_x16: q4_1 rows repacked for the AVX-512/VNNI kernels (repack_weights): each run of 16 blocks as
// their 16 scales, 16 mins (f16) and 4 x 64 bytes of nibbles, byte 4 b + k of the j-th holding qs[4 j + k]
// of block b, so that one 32-bit lane sums one block; a row's last nb % 16 blocks stay plain. A row takes
// the same bytes in both.
enum class WeightLayout : std::uint8_t { plain, q4_1_x16 };

struct MatmulParams {
  tensor::DType w_type = tensor::DType::f32;
  const void* w = nullptr;       // [n_out, n_in] of w_type, rows w_row_bytes apart
  std::size_t w_row_bytes = 0;   // 0: dense rows (tensor::row_bytes(w_type, n_in))
  std::int64_t n_out = 0;
  std::int64_t n_in = 0;         // a multiple of block_size(w_type)
  WeightLayout w_layout = WeightLayout::plain;
};

// The layout the fastest kernels of `isa` on this CPU take weights of type w in: q4_1_x16 for q4_1 where
// AVX-512/VNNI runs, plain otherwise. Products of weights in another layout than plain need that ISA
// (matmul throws UnsupportedError without it); the references take every layout.
WeightLayout preferred_layout(tensor::DType w, Isa isa = best_isa());
// Rows [n_out, n_in] of plain w_type weights (rows row_bytes apart, 0: dense) written to `out` in
// `layout`, rows out_row_bytes apart (0: dense; the bytes between rows are left alone). The q4_1_x16
// kernels load 64 bytes at a time: rows that start on 64-byte boundaries (aligned_row_bytes) spare them
// loads that straddle two cache lines. Throws ShapeError on a layout that is not of w_type or a bad size.
void repack_weights(WeightLayout layout, tensor::DType w_type, const void* w, std::size_t row_bytes,
                    std::int64_t n_out, std::int64_t n_in, void* out, std::size_t out_row_bytes = 0);
// A row's bytes rounded up to a multiple of 64.
std::size_t aligned_row_bytes(tensor::DType w_type, std::int64_t n_in);
// One row of n elements in `layout` back to plain blocks (the references' view of it).
void unpack_weight_row(WeightLayout layout, tensor::DType w_type, const void* row, std::int64_t n, void* out);

// The type the activations are converted to for a dot product with weights of type w.
tensor::DType vec_dot_type(tensor::DType w);

// One dot product: a weight row (n elements of type w) with activations already converted to
// vec_dot_type(w). Throws ShapeError when n is not a multiple of the block size.
float vec_dot_ref(tensor::DType w, std::int64_t n, const void* w_row, const void* x);
float vec_dot(tensor::DType w, std::int64_t n, const void* w_row, const void* x, Isa isa = best_isa());

// y [n_out] = W x, x [n_in] f32. Throws ShapeError on bad sizes (nothing written).
void matvec_ref(const MatmulParams& p, const float* x, float* y);
// Same, parallel over rows on `pool` (nullptr: the calling thread only).
void matvec(const MatmulParams& p, const float* x, float* y, tensor::ThreadPool* pool,
            Isa isa = best_isa());

// y [n_tokens, n_out] = x [n_tokens, n_in] W^T (rows of x and y dense). Same errors.
void matmul_ref(const MatmulParams& p, const float* x, std::int64_t n_tokens, float* y);
void matmul(const MatmulParams& p, const float* x, std::int64_t n_tokens, float* y,
            tensor::ThreadPool* pool, Isa isa = best_isa());

// Several products of one input (q, k and v of a layer; gate and up): ys[i] [n_tokens, ps[i].n_out] =
// x ps[i].W^T, bit-identical to separate matmul calls, with the activations converted once per
// vec_dot_type and every product's rows in one parallel region. At most 8 products, all with the same
// n_in; throws ShapeError otherwise or on a bad product (nothing written then).
void matmul_multi(std::span<const MatmulParams> ps, const float* x, std::int64_t n_tokens,
                  std::span<float* const> ys, tensor::ThreadPool* pool, Isa isa = best_isa());

}  // namespace kernels
