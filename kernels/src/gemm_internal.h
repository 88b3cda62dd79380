// The per-ISA panel kernels of kernels/gemm.h (private to kernels/).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kernels::detail {

// Every token against one packed panel: y[t * y_stride + j] = act(sum_k x[t * n_in + k] panel[k * kGemmPanel
// + j] + bias[j]) for t < n_tokens, j < n_valid (the panel's real outputs; nothing written past them).
// bias: kGemmPanel values (zero-padded) or nullptr; gelu: the exact GELU after the bias.
using GemmPanelFn = void (*)(const float* panel, std::int64_t n_in, const float* x, std::int64_t n_tokens, float* y,
                             std::size_t y_stride, const float* bias, bool gelu, int n_valid);
GemmPanelFn gemm_panel_avx512();
GemmPanelFn gemm_panel_avx2();

}  // namespace kernels::detail
