// Dispatch of the element-wise kernels: validate, then the AVX2 version when the CPU has it and the
// caller allows it, else the reference.
#include <string>

#include "kernels/error.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "ops_internal.h"

namespace kernels {
namespace {
bool use_avx2(Isa isa) { return isa != Isa::scalar && isa_supported(Isa::avx2); }
}  // namespace

void rms_norm(const NormParams& p, const float* x, const float* weight, float* y, Isa isa) {
  if (!use_avx2(isa)) return rms_norm_ref(p, x, weight, y);
  detail::check_norm("rms_norm", p, x, y);
  detail::avx2::rms_norm(p, x, weight, y);
}

void layer_norm(const NormParams& p, const float* x, const float* weight, const float* bias, float* y, Isa isa) {
  if (!use_avx2(isa)) return layer_norm_ref(p, x, weight, bias, y);
  detail::check_norm("layer_norm", p, x, y);
  detail::avx2::layer_norm(p, x, weight, bias, y);
}

void add_layer_norm(const NormParams& p, const float* a, const float* b, const float* weight, const float* bias,
                    float* y, Isa isa) {
  if (!use_avx2(isa)) return add_layer_norm_ref(p, a, b, weight, bias, y);
  detail::check_norm("add_layer_norm", p, a, y);
  if (p.n_rows * p.n > 0 && b == nullptr) throw ShapeError("[kernels::add_layer_norm] null input or output");
  for (std::int64_t r = 0; r < p.n_rows; ++r) {
    float* yr = y + r * p.n;
    detail::avx2::add(p.n, a + r * p.n, b + r * p.n, yr);
    detail::avx2::layer_norm({1, p.n, p.eps}, yr, weight, bias, yr);
  }
}

void silu(const UnaryParams& p, const float* x, float* y, Isa isa) {
  if (!use_avx2(isa)) return silu_ref(p, x, y);
  detail::check_unary("silu", p, x, x, y);
  detail::avx2::silu(p.n, x, y);
}

void gelu(const UnaryParams& p, const float* x, float* y, Isa isa) {
  if (!use_avx2(isa)) return gelu_ref(p, x, y);
  detail::check_unary("gelu", p, x, x, y);
  detail::avx2::gelu(p.n, x, y);
}

void gelu_erf(const UnaryParams& p, const float* x, float* y, Isa isa) {
  if (!use_avx2(isa)) return gelu_erf_ref(p, x, y);
  detail::check_unary("gelu_erf", p, x, x, y);
  detail::avx2::gelu_erf(p.n, x, y);
}

void swiglu(const UnaryParams& p, const float* gate, const float* up, float* y, Isa isa) {
  if (!use_avx2(isa)) return swiglu_ref(p, gate, up, y);
  detail::check_unary("swiglu", p, gate, up, y);
  detail::avx2::swiglu(p.n, gate, up, y);
}

void add(const UnaryParams& p, const float* a, const float* b, float* y, Isa isa) {
  if (!use_avx2(isa)) return add_ref(p, a, b, y);
  detail::check_unary("add", p, a, b, y);
  detail::avx2::add(p.n, a, b, y);
}

void mul(const UnaryParams& p, const float* a, const float* b, float* y, Isa isa) {
  if (!use_avx2(isa)) return mul_ref(p, a, b, y);
  detail::check_unary("mul", p, a, b, y);
  detail::avx2::mul(p.n, a, b, y);
}

void softmax(const SoftmaxParams& p, const float* x, float* y, Isa isa) {
  if (!use_avx2(isa)) return softmax_ref(p, x, y);
  detail::check_softmax("softmax", p, x, y);
  if (!detail::avx2::softmax(p, x, y)) {
    throw ShapeError("[kernels::softmax] a row is all -inf: no probability to assign");
  }
}

void embedding(const EmbeddingParams& p, const std::int32_t* ids, std::int64_t n_ids, float* out, Isa isa) {
  detail::check_embedding("embedding", p, ids, n_ids, out);
  const std::size_t row = tensor::row_bytes(p.table_type, p.n_embd);
  for (std::int64_t i = 0; i < n_ids; ++i) {
    const auto* src = static_cast<const unsigned char*>(p.table) + static_cast<std::size_t>(ids[i]) * row;
    dequantize_row(p.table_type, src, out + i * p.n_embd, p.n_embd, isa);
  }
}

}  // namespace kernels
