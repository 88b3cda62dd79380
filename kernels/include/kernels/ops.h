// Row-wise and element-wise CPU kernels: RMSNorm, LayerNorm, SiLU, GELU (tanh and erf forms), fused SwiGLU, softmax, add,
// mul, and embedding lookup with dequantization. Each has a scalar reference (*_ref) and a fast version
// (AVX2/FMA; scalar where the CPU lacks it) sharing one params struct. Sizes that do not fit, null
// pointers with work to do, and out-of-range token ids throw kernels::ShapeError; nothing is written then.
// In-place use (y == x) is allowed everywhere.
#pragma once

#include <cstdint>

#include "kernels/isa.h"
#include "tensor/dtype.h"

namespace kernels {

// RMSNorm and LayerNorm over the last dimension.
struct NormParams {
  std::int64_t n_rows = 1;  // rows of x and y: x, y [n_rows, n]
  std::int64_t n = 0;       // elements per row
  float eps = 1e-5f;
};

// y = x / sqrt(mean(x^2) + eps) * weight; weight [n] or nullptr (no scaling).
void rms_norm_ref(const NormParams& p, const float* x, const float* weight, float* y);
void rms_norm(const NormParams& p, const float* x, const float* weight, float* y, Isa isa = best_isa());

// y = (x - mean) / sqrt(var + eps) * weight + bias; weight, bias [n] or nullptr.
void layer_norm_ref(const NormParams& p, const float* x, const float* weight, const float* bias, float* y);
void layer_norm(const NormParams& p, const float* x, const float* weight, const float* bias, float* y,
                Isa isa = best_isa());

// y = LayerNorm(a + b) (a residual add and the norm after it), row by row so each sum is normalized while
// in cache; a + b is rounded to float first, as the two separate kernels would. y may be a or b.
void add_layer_norm_ref(const NormParams& p, const float* a, const float* b, const float* weight, const float* bias,
                        float* y);
void add_layer_norm(const NormParams& p, const float* a, const float* b, const float* weight, const float* bias,
                    float* y, Isa isa = best_isa());

// Element-wise over n elements.
struct UnaryParams {
  std::int64_t n = 0;
};
// y = x * sigmoid(x)
void silu_ref(const UnaryParams& p, const float* x, float* y);
void silu(const UnaryParams& p, const float* x, float* y, Isa isa = best_isa());
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (the tanh form used by GPT-2, Gemma, ggml)
void gelu_ref(const UnaryParams& p, const float* x, float* y);
void gelu(const UnaryParams& p, const float* x, float* y, Isa isa = best_isa());
// y = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))) (the exact GELU: BERT, transformers' "gelu"); the fast
// version is within 5e-7 relative of the reference everywhere (3.9e-7 measured over [-15, 15]).
void gelu_erf_ref(const UnaryParams& p, const float* x, float* y);
void gelu_erf(const UnaryParams& p, const float* x, float* y, Isa isa = best_isa());
// y = silu(gate) * up (the fused SwiGLU of Llama's feed-forward)
void swiglu_ref(const UnaryParams& p, const float* gate, const float* up, float* y);
void swiglu(const UnaryParams& p, const float* gate, const float* up, float* y, Isa isa = best_isa());
// y = a + b, y = a * b
void add_ref(const UnaryParams& p, const float* a, const float* b, float* y);
void add(const UnaryParams& p, const float* a, const float* b, float* y, Isa isa = best_isa());
void mul_ref(const UnaryParams& p, const float* a, const float* b, float* y);
void mul(const UnaryParams& p, const float* a, const float* b, float* y, Isa isa = best_isa());

// Softmax over each row of scale * x. -inf entries get probability 0; a row of all -inf throws.
struct SoftmaxParams {
  std::int64_t n_rows = 1;  // x, y [n_rows, n]
  std::int64_t n = 0;
  float scale = 1.0f;
};
void softmax_ref(const SoftmaxParams& p, const float* x, float* y);
void softmax(const SoftmaxParams& p, const float* x, float* y, Isa isa = best_isa());

// Embedding lookup: out[i] = dequantize(table row ids[i]).
struct EmbeddingParams {
  tensor::DType table_type = tensor::DType::f32;
  const void* table = nullptr;  // [n_vocab, n_embd] of table_type, dense rows
  std::int64_t n_vocab = 0;
  std::int64_t n_embd = 0;      // a multiple of block_size(table_type)
};
// out [n_ids, n_embd]. Throws ShapeError naming the id and its index when an id is outside [0, n_vocab).
void embedding_ref(const EmbeddingParams& p, const std::int32_t* ids, std::int64_t n_ids, float* out);
void embedding(const EmbeddingParams& p, const std::int32_t* ids, std::int64_t n_ids, float* out,
               Isa isa = best_isa());

}  // namespace kernels
