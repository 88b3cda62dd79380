// Scalar references of the element-wise kernels (sums in double), and the shared argument checks.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "ops_internal.h"

namespace kernels {

namespace detail {

namespace {
[[noreturn]] void fail(const char* op, const std::string& what) {
  throw ShapeError(std::string("[kernels::") + op + "] " + what);
}
}  // namespace

void check_norm(const char* op, const NormParams& p, const float* x, const float* y) {
  if (p.n_rows < 0 || p.n < 0) fail(op, "negative size [" + std::to_string(p.n_rows) + ", " + std::to_string(p.n) + "]");
  if (p.n_rows > 0 && p.n == 0) fail(op, "rows of 0 elements cannot be normalized");
  if (!(p.eps >= 0.0f)) fail(op, "eps " + std::to_string(p.eps) + " must be >= 0");
  if (p.n_rows * p.n > 0 && (x == nullptr || y == nullptr)) fail(op, "null input or output");
}

void check_unary(const char* op, const UnaryParams& p, const float* a, const float* b, const float* y) {
  if (p.n < 0) fail(op, "negative size " + std::to_string(p.n));
  if (p.n > 0 && (a == nullptr || b == nullptr || y == nullptr)) fail(op, "null input or output");
}

void check_softmax(const char* op, const SoftmaxParams& p, const float* x, const float* y) {
  if (p.n_rows < 0 || p.n < 0) fail(op, "negative size [" + std::to_string(p.n_rows) + ", " + std::to_string(p.n) + "]");
  if (p.n_rows > 0 && p.n == 0) fail(op, "rows of 0 elements have no softmax");
  if (!std::isfinite(p.scale)) fail(op, "scale " + std::to_string(p.scale) + " is not finite");
  if (p.n_rows * p.n > 0 && (x == nullptr || y == nullptr)) fail(op, "null input or output");
}

void check_embedding(const char* op, const EmbeddingParams& p, const std::int32_t* ids, std::int64_t n_ids,
                     const float* out) {
  if (p.n_vocab < 0 || p.n_embd < 0 || n_ids < 0) {
    fail(op, "negative size (n_vocab " + std::to_string(p.n_vocab) + ", n_embd " + std::to_string(p.n_embd) +
                 ", n_ids " + std::to_string(n_ids) + ")");
  }
  if (p.n_embd % tensor::block_size(p.table_type) != 0) {
    fail(op, std::string(tensor::dtype_name(p.table_type)) + ": n_embd " + std::to_string(p.n_embd) +
                 " is not a multiple of the block size " + std::to_string(tensor::block_size(p.table_type)));
  }
  if (n_ids > 0 && (ids == nullptr || out == nullptr || (p.table == nullptr && p.n_embd > 0))) {
    fail(op, "null table, ids or output");
  }
  for (std::int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || ids[i] >= p.n_vocab) {
      fail(op, "token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) + " is outside [0, " +
                   std::to_string(p.n_vocab) + ")");
    }
  }
}

}  // namespace detail

void rms_norm_ref(const NormParams& p, const float* x, const float* weight, float* y) {
  detail::check_norm("rms_norm_ref", p, x, y);
  for (std::int64_t r = 0; r < p.n_rows; ++r) {
    const float* xr = x + r * p.n;
    float* yr = y + r * p.n;
    double ss = 0;
    for (std::int64_t i = 0; i < p.n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(p.n) + p.eps));
    for (std::int64_t i = 0; i < p.n; ++i) yr[i] = xr[i] * inv * (weight ? weight[i] : 1.0f);
  }
}

void layer_norm_ref(const NormParams& p, const float* x, const float* weight, const float* bias, float* y) {
  detail::check_norm("layer_norm_ref", p, x, y);
  for (std::int64_t r = 0; r < p.n_rows; ++r) {
    const float* xr = x + r * p.n;
    float* yr = y + r * p.n;
    double mean = 0;
    for (std::int64_t i = 0; i < p.n; ++i) mean += xr[i];
    mean /= static_cast<double>(p.n);
    double var = 0;
    for (std::int64_t i = 0; i < p.n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(p.n);
    const double inv = 1.0 / std::sqrt(var + p.eps);
    for (std::int64_t i = 0; i < p.n; ++i) {
      const double v = (xr[i] - mean) * inv;
      yr[i] = static_cast<float>(v * (weight ? weight[i] : 1.0f) + (bias ? bias[i] : 0.0f));
    }
  }
}

void add_layer_norm_ref(const NormParams& p, const float* a, const float* b, const float* weight, const float* bias,
                        float* y) {
  detail::check_norm("add_layer_norm_ref", p, a, y);
  if (p.n_rows * p.n > 0 && b == nullptr) detail::fail("add_layer_norm_ref", "null input or output");
  std::vector<float> sum(static_cast<std::size_t>(p.n));
  for (std::int64_t r = 0; r < p.n_rows; ++r) {
    for (std::int64_t i = 0; i < p.n; ++i) sum[static_cast<std::size_t>(i)] = a[r * p.n + i] + b[r * p.n + i];
    layer_norm_ref({1, p.n, p.eps}, sum.data(), weight, bias, y + r * p.n);
  }
}

void silu_ref(const UnaryParams& p, const float* x, float* y) {
  detail::check_unary("silu_ref", p, x, x, y);
  for (std::int64_t i = 0; i < p.n; ++i) y[i] = static_cast<float>(x[i] / (1.0 + std::exp(-static_cast<double>(x[i]))));
}

void gelu_ref(const UnaryParams& p, const float* x, float* y) {
  detail::check_unary("gelu_ref", p, x, x, y);
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  for (std::int64_t i = 0; i < p.n; ++i) {
    const double v = x[i];
    // 0.5 v (1 + tanh(u)) written as v / (1 + e^{-2u}): equal, and free of cancellation near tanh = -1.
    y[i] = static_cast<float>(v / (1.0 + std::exp(-2.0 * kSqrt2OverPi * (v + 0.044715 * v * v * v))));
  }
}

void gelu_erf_ref(const UnaryParams& p, const float* x, float* y) {
  detail::check_unary("gelu_erf_ref", p, x, x, y);
  for (std::int64_t i = 0; i < p.n; ++i) {
    const double v = x[i];
    // erfc(-v / sqrt 2) rather than 1 + erf: no cancellation for negative v.
    y[i] = static_cast<float>(0.5 * v * std::erfc(-v * 0.70710678118654752440));
  }
}

void swiglu_ref(const UnaryParams& p, const float* gate, const float* up, float* y) {
  detail::check_unary("swiglu_ref", p, gate, up, y);
  for (std::int64_t i = 0; i < p.n; ++i) {
    const double g = gate[i];
    y[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void add_ref(const UnaryParams& p, const float* a, const float* b, float* y) {
  detail::check_unary("add_ref", p, a, b, y);
  for (std::int64_t i = 0; i < p.n; ++i) y[i] = a[i] + b[i];
}

void mul_ref(const UnaryParams& p, const float* a, const float* b, float* y) {
  detail::check_unary("mul_ref", p, a, b, y);
  for (std::int64_t i = 0; i < p.n; ++i) y[i] = a[i] * b[i];
}

void softmax_ref(const SoftmaxParams& p, const float* x, float* y) {
  detail::check_softmax("softmax_ref", p, x, y);
  for (std::int64_t r = 0; r < p.n_rows; ++r) {
    const float* xr = x + r * p.n;
    float* yr = y + r * p.n;
    double max = -std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < p.n; ++i) max = std::max(max, static_cast<double>(p.scale) * xr[i]);
    if (std::isinf(max) && max < 0) {
      throw ShapeError("[kernels::softmax_ref] row " + std::to_string(r) + " is all -inf: no probability to assign");
    }
    double sum = 0;
    for (std::int64_t i = 0; i < p.n; ++i) sum += std::exp(static_cast<double>(p.scale) * xr[i] - max);
    for (std::int64_t i = 0; i < p.n; ++i) {
      yr[i] = static_cast<float>(std::exp(static_cast<double>(p.scale) * xr[i] - max) / sum);
    }
  }
}

void embedding_ref(const EmbeddingParams& p, const std::int32_t* ids, std::int64_t n_ids, float* out) {
  detail::check_embedding("embedding_ref", p, ids, n_ids, out);
  const std::size_t row = tensor::row_bytes(p.table_type, p.n_embd);
  for (std::int64_t i = 0; i < n_ids; ++i) {
    const auto* src = static_cast<const unsigned char*>(p.table) + static_cast<std::size_t>(ids[i]) * row;
    dequantize_row_ref(p.table_type, src, out + i * p.n_embd, p.n_embd);
  }
}

}  // namespace kernels
