// The LoRA kernels' checks, scalar references and dispatch.
#include <string>

#include "kernels/error.h"
#include "lora_internal.h"

namespace kernels {
namespace detail {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw ShapeError(std::string("[kernels::") + op + "] " + what);
}

void check_rows(const char* op, const LoraRows& rows) {
  if (rows.n < 0 || rows.n_matrix_rows < 0) {
    fail(op, str(rows.n) + " rows of a " + str(rows.n_matrix_rows) + "-row matrix");
  }
  if (rows.n > 0 && rows.index == nullptr) fail(op, "null row indices");
  for (std::int64_t i = 0; i < rows.n; ++i) {
    if (rows.index[i] < 0 || rows.index[i] >= rows.n_matrix_rows) {
      fail(op, "row index " + str(rows.index[i]) + " (at " + str(i) + ") outside [0, " + str(rows.n_matrix_rows) + ")");
    }
  }
}

}  // namespace

void check_lora_shrink(const LoraShrinkParams& p, const float* t) {
  if (p.n_in <= 0 || p.rank <= 0) fail("lora_shrink", "n_in " + str(p.n_in) + ", rank " + str(p.rank) + ": both must be positive");
  if (p.x_stride < p.n_in) fail("lora_shrink", "x_stride " + str(p.x_stride) + " < n_in " + str(p.n_in));
  check_rows("lora_shrink", p.rows);
  if (p.rows.n > 0 && (p.a == nullptr || p.x == nullptr || t == nullptr)) {
    fail("lora_shrink", "null a, x or t");
  }
}

void check_lora_expand(const LoraExpandParams& p) {
  if (p.n_out <= 0 || p.rank <= 0) fail("lora_expand", "n_out " + str(p.n_out) + ", rank " + str(p.rank) + ": both must be positive");
  if (p.y_stride < p.n_out) fail("lora_expand", "y_stride " + str(p.y_stride) + " < n_out " + str(p.n_out));
  if (p.col_begin < 0 || p.col_begin > p.col_end || p.col_end > p.n_out) {
    fail("lora_expand", "columns [" + str(p.col_begin) + ", " + str(p.col_end) + ") outside [0, " + str(p.n_out) + "]");
  }
  check_rows("lora_expand", p.rows);
  if (p.rows.n > 0 && (p.b == nullptr || p.t == nullptr || p.y == nullptr)) {
    fail("lora_expand", "null b, t or y");
  }
}

}  // namespace detail

void lora_shrink_ref(const LoraShrinkParams& p, float* t) {
  detail::check_lora_shrink(p, t);
  for (std::int64_t i = 0; i < p.rows.n; ++i) {
    const float* x = p.x + static_cast<std::int64_t>(p.rows.index[i]) * p.x_stride;
    for (std::int64_t k = 0; k < p.rank; ++k) {
      const float* a = p.a + k * p.n_in;
      float s = 0.0f;
      for (std::int64_t j = 0; j < p.n_in; ++j) s += x[j] * a[j];
      t[i * p.rank + k] = s;
    }
  }
}

void lora_expand_ref(const LoraExpandParams& p) {
  detail::check_lora_expand(p);
  for (std::int64_t i = 0; i < p.rows.n; ++i) {
    float* y = p.y + static_cast<std::int64_t>(p.rows.index[i]) * p.y_stride;
    const float* t = p.t + i * p.rank;
    for (std::int64_t j = p.col_begin; j < p.col_end; ++j) {
      float s = 0.0f;
      for (std::int64_t k = 0; k < p.rank; ++k) s += t[k] * p.b[j * p.rank + k];
      y[j] += p.scale * s;
    }
  }
}

void lora_shrink(const LoraShrinkParams& p, float* t, Isa isa) {
  if (isa == Isa::scalar || !isa_supported(Isa::avx2)) return lora_shrink_ref(p, t);
  detail::check_lora_shrink(p, t);
  detail::avx2::lora_shrink(p, t);
}

void lora_expand(const LoraExpandParams& p, Isa isa) {
  if (isa == Isa::scalar || !isa_supported(Isa::avx2)) return lora_expand_ref(p);
  detail::check_lora_expand(p);
  detail::avx2::lora_expand(p);
}

}  // namespace kernels
