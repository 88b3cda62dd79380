// Per-ISA tables of dot-product kernels (private to kernels/). A DotFn computes the dot product of one
// weight row of n elements with activations in vec_dot_type(w); nullptr means "no version for this ISA".
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace kernels::detail {

using DotFn = float (*)(std::int64_t n, const void* w, const void* x);
// Activation quantizer for one row of n floats (bit-exact to the reference).
using QuantizeFn = void (*)(const float* x, void* y, std::int64_t n);

DotFn dot_ref_fn(tensor::DType w);
DotFn dot_avx2_fn(tensor::DType w);
DotFn dot_avx512_fn(tensor::DType w);

// Four weight rows at once (w, w + stride, w + 2 stride, w + 3 stride) against one activation row:
// y[k] = dot(n, w + k * stride, x). Streams the weights faster than four DotFn calls (one activation load
// serves four rows); nullptr where a type or ISA has no such kernel.
using Dot4Fn = void (*)(std::int64_t n, const void* w, std::size_t stride, const void* x, float* y);
Dot4Fn dot4_avx512_fn(tensor::DType w);
// Four weight rows against three activation rows (x, x + x_stride, x + 2 x_stride bytes apart):
// y[t * y_stride + k] = dot(n, w + k * stride, x_t), each bit-identical to what Dot4Fn gives for that
// activation row (the prefill path of matmul; batch invariance). nullptr where there is none.
using Dot4x3Fn = void (*)(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride,
                          float* y, std::size_t y_stride);
Dot4x3Fn dot4x3_avx512_fn(tensor::DType w);
// Four weight rows against n_tokens (1..kDot4xTMaxTokens) activation rows x_stride bytes apart (the quantized
// types): y[t * y_stride + k] = dot(n, w + k * stride, x_t), each bit-identical to the type's DotFn of the
// same ISA (batch invariance), with each weight load serving every token. nullptr where there is none.
using Dot4xTFn = void (*)(std::int64_t n, const void* w, std::size_t stride, const void* x, std::size_t x_stride,
                          int n_tokens, float* y, std::size_t y_stride);
Dot4xTFn dot4xt_avx512_fn(tensor::DType w);
// Tokens per call: q4_1 / q5_x run 2 rows x 8 tokens a pass (16 accumulators; q5_0 53 -> 63 GMAC/s against
// 2 x 4); the _0 and K tiles take them four at a time (4 x 6 measured no faster there, docs/cpu-kernels.md).
inline constexpr int kDot4xTMaxTokens = 8;

// An activation row (n elements in vec_dot_type) repacked into a kernel's own layout, packed_bytes(n) bytes.
using PackFn = void (*)(const void* x, void* packed, std::int64_t n);
using PackedBytesFn = std::size_t (*)(std::int64_t n);

// The AVX-512/VNNI kernels of q4_1, q5_0, q5_1 (dot_tile_blocks_avx512.cpp) and q4_K, q5_K, q6_K
// (dot_tile_k_avx512.cpp): one template of R rows x T tokens, instantiated as the one-row kernel (matvec)
// and the four-row tiles (matmul), so every (row, token) result is bit-identical whichever is used. Where
// pack is set, both take activations repacked by it; all null for other types.
struct TileKernels {
  DotFn dot = nullptr;
  Dot4xTFn dot4xt = nullptr;
  PackFn pack = nullptr;
  PackedBytesFn packed_bytes = nullptr;
};
TileKernels tile_blocks_avx512(tensor::DType w);
TileKernels tile_k_avx512(tensor::DType w);
// The same on AVX2 (dot_tile_blocks_avx2.cpp, dot_tile_k_avx2.cpp).
TileKernels tile_blocks_avx2(tensor::DType w);
TileKernels tile_k_avx2(tensor::DType w);
inline TileKernels tile_avx512(tensor::DType w) {
  const TileKernels blocks = tile_blocks_avx512(w);
  return blocks.dot != nullptr ? blocks : tile_k_avx512(w);
}
inline TileKernels tile_avx2(tensor::DType w) {
  const TileKernels blocks = tile_blocks_avx2(w);
  return blocks.dot != nullptr ? blocks : tile_k_avx2(w);
}

QuantizeFn quantize_avx2_fn(tensor::DType t);

}  // namespace kernels::detail
