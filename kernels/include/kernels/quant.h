// Quantization and dequantization of rows, bit-exact to ggml's reference implementations
// (quantize_row_*_ref / dequantize_row_*), for every tensor::DType (f32/f16/bf16 convert).
#pragma once

#include <cstdint>

#include "kernels/isa.h"
#include "tensor/dtype.h"

namespace kernels {

// x [n] floats -> y: n / block_size(t) blocks of type t. Scalar reference. Throws ShapeError when n is
// not a multiple of the block size (nothing is written then).
void quantize_row_ref(tensor::DType t, const float* x, void* y, std::int64_t n);
// x: n / block_size(t) blocks of type t -> y [n] floats. Scalar reference. Same errors.
void dequantize_row_ref(tensor::DType t, const void* x, float* y, std::int64_t n);

// The same results (bit for bit) with the fastest code for `isa` where there is one (q8_0 and q8_K
// quantization: the activations of the dot products, AVX2), the reference elsewhere. Same errors.
void quantize_row(tensor::DType t, const float* x, void* y, std::int64_t n, Isa isa = best_isa());
void dequantize_row(tensor::DType t, const void* x, float* y, std::int64_t n, Isa isa = best_isa());

}  // namespace kernels
