// kernels/gemm.h: packing, validation, the reference, the scalar path and the dispatch over panels.
#include "kernels/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "gemm_internal.h"
#include "kernels/error.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "matmul_check.h"
#include "quant_common.h"

namespace kernels {
namespace {

constexpr std::align_val_t kAlign{64};

void check_call(const char* op, std::int64_t n_out, std::int64_t n_in, const float* x, std::int64_t n_tokens,
                const float* y) {
  if (n_tokens < 0) throw ShapeError(std::string("[kernels::") + op + "] negative n_tokens " + std::to_string(n_tokens));
  if (n_tokens > 0 && n_out > 0 && y == nullptr) throw ShapeError(std::string("[kernels::") + op + "] null output");
  if (n_tokens > 0 && n_in > 0 && x == nullptr) throw ShapeError(std::string("[kernels::") + op + "] null input");
}

// Every token against one panel in plain C++ (the scalar ISA): the same order of operations per result.
void panel_scalar(const float* panel, std::int64_t n_in, const float* x, std::int64_t n_tokens, float* y,
                  std::size_t y_stride, const float* bias, bool gelu, int n_valid) {
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    float acc[kGemmPanel] = {};
    const float* xt = x + t * n_in;
    for (std::int64_t k = 0; k < n_in; ++k) {
      for (int j = 0; j < kGemmPanel; ++j) acc[j] = std::fma(xt[k], panel[k * kGemmPanel + j], acc[j]);
    }
    float* row = y + static_cast<std::size_t>(t) * y_stride;
    for (int j = 0; j < n_valid; ++j) row[j] = acc[j] + (bias != nullptr ? bias[j] : 0.0f);
    if (gelu) gelu_erf_ref({n_valid}, row, row);
  }
}

}  // namespace

void PackedMatrix::AlignedDelete::operator()(float* p) const { ::operator delete[](p, kAlign); }

PackedMatrix PackedMatrix::pack(const MatmulParams& p) {
  const std::size_t stride = detail::checked_row_stride(p, "PackedMatrix::pack");
  PackedMatrix m;
  m.n_out_ = p.n_out;
  m.n_in_ = p.n_in;
  const std::size_t n = static_cast<std::size_t>(m.n_panels() * kGemmPanel * p.n_in);
  m.data_.reset(static_cast<float*>(::operator new[](std::max<std::size_t>(n, 1) * sizeof(float), kAlign)));
  std::fill(m.data_.get(), m.data_.get() + n, 0.0f);
  std::vector<float> row(static_cast<std::size_t>(p.n_in));
  const auto* w = static_cast<const unsigned char*>(p.w);
  for (std::int64_t r = 0; r < p.n_out; ++r) {
    dequantize_row(p.w_type, w + static_cast<std::size_t>(r) * stride, row.data(), p.n_in);
    float* dst = m.data_.get() + (r / kGemmPanel) * p.n_in * kGemmPanel + r % kGemmPanel;
    for (std::int64_t k = 0; k < p.n_in; ++k) dst[k * kGemmPanel] = row[static_cast<std::size_t>(k)];
  }
  return m;
}

void gemm(const PackedMatrix& w, const float* x, std::int64_t n_tokens, float* y, const GemmEpilogue& epilogue,
          tensor::ThreadPool* pool, Isa isa) {
  check_call("gemm", w.n_out(), w.n_in(), x, n_tokens, y);
  if (n_tokens == 0 || w.n_out() == 0) return;
  detail::GemmPanelFn kernel = panel_scalar;
  if (isa == Isa::avx512 && isa_supported(Isa::avx512)) {
    kernel = detail::gemm_panel_avx512();
  } else if (isa != Isa::scalar && isa_supported(Isa::avx2)) {
    kernel = detail::gemm_panel_avx2();
  }
  const bool gelu = epilogue.act == GemmActivation::gelu_erf;
  const std::int64_t n_out = w.n_out();
  auto panels = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      const int n_valid = static_cast<int>(std::min(kGemmPanel, n_out - p * kGemmPanel));
      alignas(64) float bias[kGemmPanel] = {};
      if (epilogue.bias != nullptr) std::copy_n(epilogue.bias + p * kGemmPanel, n_valid, bias);
      kernel(w.panel(p), w.n_in(), x, n_tokens, y + p * kGemmPanel, static_cast<std::size_t>(n_out),
             epilogue.bias != nullptr ? bias : nullptr, gelu, n_valid);
    }
  };
  if (pool != nullptr && pool->n_threads() > 1 && w.n_panels() > 1) {
    pool->parallel_for(w.n_panels(), panels, 1);
  } else {
    panels(0, w.n_panels());
  }
}

void gemm_ref(const MatmulParams& w, const float* x, std::int64_t n_tokens, float* y, const GemmEpilogue& epilogue) {
  const std::size_t stride = detail::checked_row_stride(w, "gemm_ref");
  check_call("gemm_ref", w.n_out, w.n_in, x, n_tokens, y);
  std::vector<float> row(static_cast<std::size_t>(w.n_in));
  const auto* base = static_cast<const unsigned char*>(w.w);
  for (std::int64_t r = 0; r < w.n_out; ++r) {
    dequantize_row_ref(w.w_type, base + static_cast<std::size_t>(r) * stride, row.data(), w.n_in);
    for (std::int64_t t = 0; t < n_tokens; ++t) {
      double sum = epilogue.bias != nullptr ? epilogue.bias[r] : 0.0;
      for (std::int64_t k = 0; k < w.n_in; ++k) sum += static_cast<double>(x[t * w.n_in + k]) * row[static_cast<std::size_t>(k)];
      if (epilogue.act == GemmActivation::gelu_erf) sum = 0.5 * sum * std::erfc(-sum * 0.70710678118654752440);
      y[t * w.n_out + r] = static_cast<float>(sum);
    }
  }
}

}  // namespace kernels
