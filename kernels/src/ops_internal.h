// Validation shared by the reference and fast element-wise kernels, and the AVX2 entry points.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace kernels::detail {

void check_norm(const char* op, const NormParams& p, const float* x, const float* y);
void check_unary(const char* op, const UnaryParams& p, const float* a, const float* b, const float* y);
void check_softmax(const char* op, const SoftmaxParams& p, const float* x, const float* y);
void check_embedding(const char* op, const EmbeddingParams& p, const std::int32_t* ids, std::int64_t n_ids,
                     const float* out);

// AVX2 + FMA kernels (ops_avx2.cpp); callers check the CPU first. Arguments already validated.
namespace avx2 {
void rms_norm(const NormParams& p, const float* x, const float* weight, float* y);
void layer_norm(const NormParams& p, const float* x, const float* weight, const float* bias, float* y);
void silu(std::int64_t n, const float* x, float* y);
void gelu(std::int64_t n, const float* x, float* y);
void gelu_erf(std::int64_t n, const float* x, float* y);
void swiglu(std::int64_t n, const float* gate, const float* up, float* y);
void add(std::int64_t n, const float* a, const float* b, float* y);
void mul(std::int64_t n, const float* a, const float* b, float* y);
// Returns false (writing nothing) when a row is all -inf, so the caller can raise the error.
bool softmax(const SoftmaxParams& p, const float* x, float* y);
}  // namespace avx2

}  // namespace kernels::detail
