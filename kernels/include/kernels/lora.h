// LoRA's low-rank products on the CPU, for the rows of one adapter (Punica's SGMV, shrink then expand):
// shrink t = x A^T and expand y += scale t B^T, over a subset of an activation matrix's rows, any rank
// (no padding to a maximum). Each row is computed from that row alone, in an order fixed by the shapes
// and the columns asked for, so a row's result does not depend on the other rows of its group (batch
// invariance). A and B are read as adapters hold them (PEFT's layouts), so attaching one copies nothing. A
// scalar reference (*_ref) and an AVX2/FMA version share one params struct; sizes that do not fit, null pointers with work to do and rows out of range throw
// kernels::ShapeError, and nothing is written then.
#pragma once

#include <cstdint>

#include "kernels/isa.h"

namespace kernels {

// The rows of an activation matrix one adapter applies to.
struct LoraRows {
  const std::int32_t* index = nullptr;  // [n] row indices, each in [0, n_matrix_rows)
  std::int64_t n = 0;
  std::int64_t n_matrix_rows = 0;       // rows of the matrix they index
};

struct LoraShrinkParams {
  std::int64_t n_in = 0;
  std::int64_t rank = 0;
  const float* a = nullptr;      // A [rank, n_in]
  const float* x = nullptr;      // the activations, rows x_stride floats apart (x_stride >= n_in)
  std::int64_t x_stride = 0;
  LoraRows rows;
};
// t[i, k] = sum_j x[rows[i], j] a[k, j], t [rows.n, rank].
void lora_shrink_ref(const LoraShrinkParams& p, float* t);
void lora_shrink(const LoraShrinkParams& p, float* t, Isa isa = best_isa());

struct LoraExpandParams {
  std::int64_t n_out = 0;
  std::int64_t rank = 0;
  const float* b = nullptr;      // B [n_out, rank]
  const float* t = nullptr;      // the shrunk rows, [rows.n, rank]
  float scale = 1.0f;
  std::int64_t col_begin = 0;    // the columns [col_begin, col_end) of y updated (a caller's chunk)
  std::int64_t col_end = 0;
  float* y = nullptr;            // the projection's output, rows y_stride floats apart (y_stride >= n_out)
  std::int64_t y_stride = 0;
  LoraRows rows;
};
// y[rows[i], j] += scale sum_k t[i, k] b[j, k] for j in [col_begin, col_end); other rows and columns
// untouched. A row listed twice gets the term twice.
void lora_expand_ref(const LoraExpandParams& p);
void lora_expand(const LoraExpandParams& p, Isa isa = best_isa());

}  // namespace kernels
