// The checks of a weight matrix's MatmulParams that matmul and gemm share.
#pragma once

#include <cstddef>

#include "kernels/matmul.h"

namespace kernels::detail {

// The byte stride between w's rows. Throws ShapeError naming `op` for a negative size, a row the type
// cannot hold, a stride shorter than a row, or a null weight pointer with rows to read.
std::size_t checked_row_stride(const MatmulParams& p, const char* op);

}  // namespace kernels::detail
