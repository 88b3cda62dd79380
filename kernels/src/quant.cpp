// Dispatch of quantize_row / dequantize_row: the AVX2 activation quantizers where present, else the
// reference (bit-identical either way; the consistency tests check it).
#include "dot.h"
#include "kernels/quant.h"
#include "quant_common.h"

namespace kernels {

void quantize_row(tensor::DType t, const float* x, void* y, std::int64_t n, Isa isa) {
  detail::check_row("quantize_row", t, n);
  if (isa != Isa::scalar && isa_supported(Isa::avx2)) {
    if (detail::QuantizeFn fn = detail::quantize_avx2_fn(t)) {
      fn(x, y, n);
      return;
    }
  }
  quantize_row_ref(t, x, y, n);
}

void dequantize_row(tensor::DType t, const void* x, float* y, std::int64_t n, Isa isa) {
  (void)isa;  // dequantization is off the hot path (embedding rows, tests); the reference is used
  dequantize_row_ref(t, x, y, n);
}

}  // namespace kernels
