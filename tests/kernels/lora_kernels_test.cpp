// The LoRA kernels (shrink t = x A^T, expand y += scale t B^T over a subset of rows): every ISA against the
// reference over ranks 1..256 (odd ones and tails), row counts that leave partial tiles, column chunks,
// shrunk outputs poisoned with NaN, untouched rows and columns checked exactly; a row's result does not
// depend on the rows beside it; and the typed errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/error.h"
#include "kernels/lora.h"
#include "test_util.h"

namespace {

using kernels::testing::max_rel_err;
using kernels::testing::poison;
using kernels::testing::random_floats;

constexpr std::int64_t kRanks[] = {1, 3, 8, 16, 17, 64, 256};
constexpr std::int64_t kDims[] = {5, 64, 300};

// Rows 0..n_matrix-1 picked out of order (and a repeat for expand's "listed twice").
std::vector<std::int32_t> some_rows(std::int64_t n, std::int64_t n_matrix) {
  std::vector<std::int32_t> rows;
  for (std::int64_t i = 0; i < n; ++i) rows.push_back(static_cast<std::int32_t>((i * 5 + 3) % n_matrix));
  return rows;
}

TEST(LoraKernels, ShrinkMatchesReference) {
  constexpr std::int64_t kMatrixRows = 11;
  for (std::int64_t rank : kRanks) {
    for (std::int64_t n_in : kDims) {
      for (std::int64_t n : {1, 3, 4, 7}) {
        const auto seed = static_cast<std::uint32_t>(rank * 1000 + n_in * 10 + n);
        const std::vector<float> x = random_floats(kMatrixRows * (n_in + 2), seed);
        const std::vector<float> a = random_floats(rank * n_in, seed + 1, 0.1f);
        const std::vector<std::int32_t> rows = some_rows(n, kMatrixRows);
        kernels::LoraShrinkParams p;
        p.n_in = n_in;
        p.rank = rank;
        p.a = a.data();
        p.x = x.data();
        p.x_stride = n_in + 2;
        p.rows = {rows.data(), n, kMatrixRows};
        std::vector<float> want(static_cast<std::size_t>(n * rank)), got(want.size());
        poison(want);
        kernels::lora_shrink_ref(p, want.data());
        // The reference itself against a double-precision sum.
        for (std::int64_t i = 0; i < n; ++i) {
          for (std::int64_t k = 0; k < rank; ++k) {
            double s = 0;
            for (std::int64_t j = 0; j < n_in; ++j) {
              s += static_cast<double>(x[static_cast<std::size_t>(rows[static_cast<std::size_t>(i)] * (n_in + 2) + j)]) *
                   a[static_cast<std::size_t>(k * n_in + j)];
            }
            ASSERT_NEAR(want[static_cast<std::size_t>(i * rank + k)], s, 1e-4 * (1 + std::fabs(s)));
          }
        }
        for (kernels::Isa isa : kernels::available_isas()) {
          poison(got);
          kernels::lora_shrink(p, got.data(), isa);
          EXPECT_LT(max_rel_err(got, want), 1e-5) << kernels::isa_name(isa) << " rank " << rank << " n_in " << n_in
                                                  << " rows " << n;
        }
      }
    }
  }
}

TEST(LoraKernels, ExpandMatchesReferenceAndLeavesOtherRowsAndColumns) {
  constexpr std::int64_t kMatrixRows = 9;
  for (std::int64_t rank : kRanks) {
    for (std::int64_t n_out : kDims) {
      for (std::int64_t n : {1, 4, 6}) {
        const auto seed = static_cast<std::uint32_t>(rank * 1000 + n_out * 10 + n + 7);
        const std::int64_t stride = n_out + 3;
        const std::vector<float> y0 = random_floats(kMatrixRows * stride, seed);
        const std::vector<float> b = random_floats(n_out * rank, seed + 1, 0.1f);
        const std::vector<float> t = random_floats(n * rank, seed + 2);
        // Row 3 appears twice when n >= 6 ((i * 5 + 3) % 9 for i = 0 and i = 9 would; force one here).
        std::vector<std::int32_t> rows = some_rows(n, kMatrixRows);
        if (n >= 6) rows[5] = rows[0];
        const std::int64_t c0 = n_out > 64 ? 17 : 0, c1 = n_out > 64 ? n_out - 5 : n_out;
        kernels::LoraExpandParams p;
        p.n_out = n_out;
        p.rank = rank;
        p.b = b.data();
        p.t = t.data();
        p.scale = 0.75f;
        p.col_begin = c0;
        p.col_end = c1;
        p.y_stride = stride;
        p.rows = {rows.data(), n, kMatrixRows};
        std::vector<float> want = y0;
        p.y = want.data();
        kernels::lora_expand_ref(p);
        for (kernels::Isa isa : kernels::available_isas()) {
          std::vector<float> got = y0;
          p.y = got.data();
          kernels::lora_expand(p, isa);
          EXPECT_LT(max_rel_err(got, want), 1e-5) << kernels::isa_name(isa) << " rank " << rank << " n_out " << n_out;
          // Elements outside the rows and columns asked for are bit-identical to before.
          for (std::int64_t r = 0; r < kMatrixRows; ++r) {
            const bool listed = std::find(rows.begin(), rows.end(), r) != rows.end();
            for (std::int64_t j = 0; j < stride; ++j) {
              if (listed && j >= c0 && j < c1) continue;
              ASSERT_EQ(got[static_cast<std::size_t>(r * stride + j)], y0[static_cast<std::size_t>(r * stride + j)])
                  << kernels::isa_name(isa) << " row " << r << " column " << j;
            }
          }
        }
      }
    }
  }
}

// A row's shrunk and expanded values are bit-identical whether it is computed alone or in a tile of four.
TEST(LoraKernels, RowResultIndependentOfItsNeighbours) {
  const std::int64_t n_in = 300, n_out = 300, rank = 17;
  const std::vector<float> x = random_floats(8 * n_in, 1);
  const std::vector<float> a = random_floats(rank * n_in, 2, 0.1f);
  const std::vector<float> b = random_floats(n_out * rank, 3, 0.1f);
  for (kernels::Isa isa : kernels::available_isas()) {
    const std::vector<std::int32_t> all{0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<float> t_all(8 * rank), t_one(rank);
    kernels::lora_shrink({n_in, rank, a.data(), x.data(), n_in, {all.data(), 8, 8}}, t_all.data(), isa);
    std::vector<float> y_all(8 * n_out, 1.0f), y_one(8 * n_out, 1.0f);
    kernels::lora_expand({n_out, rank, b.data(), t_all.data(), 0.5f, 0, n_out, y_all.data(), n_out, {all.data(), 8, 8}},
                         isa);
    for (std::int32_t r : {0, 5, 7}) {
      kernels::lora_shrink({n_in, rank, a.data(), x.data(), n_in, {&r, 1, 8}}, t_one.data(), isa);
      for (std::int64_t k = 0; k < rank; ++k) ASSERT_EQ(t_one[static_cast<std::size_t>(k)], t_all[static_cast<std::size_t>(r * rank + k)]);
      kernels::lora_expand({n_out, rank, b.data(), t_one.data(), 0.5f, 0, n_out, y_one.data(), n_out, {&r, 1, 8}}, isa);
      for (std::int64_t j = 0; j < n_out; ++j) {
        ASSERT_EQ(y_one[static_cast<std::size_t>(r * n_out + j)], y_all[static_cast<std::size_t>(r * n_out + j)])
            << kernels::isa_name(isa) << " row " << r;
      }
    }
  }
}

TEST(LoraKernels, BadShapesAreTypedErrorsAndWriteNothing) {
  const std::vector<float> x(4 * 8, 1.0f), a(2 * 8, 1.0f);
  std::vector<float> t(8, -1.0f);
  const std::int32_t bad_row = 4, good_row = 1;
  for (kernels::Isa isa : kernels::available_isas()) {
    EXPECT_THROW(kernels::lora_shrink({8, 2, a.data(), x.data(), 8, {&bad_row, 1, 4}}, t.data(), isa),
                 kernels::ShapeError);
    EXPECT_THROW(kernels::lora_shrink({8, 0, a.data(), x.data(), 8, {&good_row, 1, 4}}, t.data(), isa),
                 kernels::ShapeError);
    EXPECT_THROW(kernels::lora_shrink({8, 2, a.data(), x.data(), 7, {&good_row, 1, 4}}, t.data(), isa),
                 kernels::ShapeError);
    EXPECT_THROW(kernels::lora_shrink({8, 2, nullptr, x.data(), 8, {&good_row, 1, 4}}, t.data(), isa),
                 kernels::ShapeError);
    EXPECT_THROW(kernels::lora_shrink({8, 2, a.data(), x.data(), 8, {nullptr, 1, 4}}, t.data(), isa),
                 kernels::ShapeError);
    for (float v : t) EXPECT_EQ(v, -1.0f);
    std::vector<float> y(4 * 8, 2.0f);
    const std::vector<float> b(8 * 2, 1.0f), tt(2, 1.0f);
    EXPECT_THROW(kernels::lora_expand({8, 2, b.data(), tt.data(), 1.0f, 0, 8, y.data(), 8, {&bad_row, 1, 4}}, isa),
                 kernels::ShapeError);
    EXPECT_THROW(kernels::lora_expand({8, 2, b.data(), tt.data(), 1.0f, 4, 9, y.data(), 8, {&good_row, 1, 4}}, isa),
                 kernels::ShapeError);
    EXPECT_THROW(kernels::lora_expand({8, 2, b.data(), tt.data(), 1.0f, 5, 4, y.data(), 8, {&good_row, 1, 4}}, isa),
                 kernels::ShapeError);
    EXPECT_THROW(kernels::lora_expand({8, 2, b.data(), tt.data(), 1.0f, 0, 8, y.data(), 6, {&good_row, 1, 4}}, isa),
                 kernels::ShapeError);
    EXPECT_THROW(kernels::lora_expand({8, 2, nullptr, tt.data(), 1.0f, 0, 8, y.data(), 8, {&good_row, 1, 4}}, isa),
                 kernels::ShapeError);
    for (float v : y) EXPECT_EQ(v, 2.0f);
    // No rows: nothing to do, no error even without pointers.
    EXPECT_NO_THROW(kernels::lora_expand({8, 2, nullptr, nullptr, 1.0f, 0, 8, nullptr, 8, {nullptr, 0, 0}}, isa));
  }
}

}  // namespace
