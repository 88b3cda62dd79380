// Quantization: round-trip error bounds per type, fast activation quantizers bit-identical to the
// references, K-type invariants, and the typed errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/error.h"
#include "kernels/quant.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "test_util.h"

namespace {

using kernels::testing::random_floats;
using tensor::DType;

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

// Relative RMS error of quantize -> dequantize on Gaussian data; bounds a little above what ggml's
// reference quantizers reach (test-quantize-fns uses absolute bounds of the same order).
struct Bound {
  DType t;
  double max_rel_rmse;
};
constexpr Bound kBounds[] = {
    {DType::f16, 1e-3},  {DType::bf16, 5e-3}, {DType::q8_0, 0.01}, {DType::q8_K, 0.01},
    {DType::q5_0, 0.05}, {DType::q5_1, 0.05}, {DType::q4_0, 0.11}, {DType::q4_1, 0.11},
    {DType::q6_K, 0.03}, {DType::q5_K, 0.05}, {DType::q4_K, 0.10}, {DType::q3_K, 0.20},
    {DType::q2_K, 0.40}, {DType::nf4, 0.11},
};

TEST(Quant, RoundTripErrorBounds) {
  constexpr std::int64_t n = 4096;
  for (const Bound& b : kBounds) {
    for (std::uint32_t seed : {1u, 2u, 3u}) {
      const std::vector<float> x = random_floats(n, seed);
      std::vector<unsigned char> q(tensor::row_bytes(b.t, n));
      std::vector<float> y(n);
      kernels::quantize_row_ref(b.t, x.data(), q.data(), n);
      kernels::dequantize_row_ref(b.t, q.data(), y.data(), n);
      std::vector<float> diff(n);
      for (std::int64_t i = 0; i < n; ++i) diff[i] = x[i] - y[i];
      const double rel = rms(diff) / rms(x);
      EXPECT_LT(rel, b.max_rel_rmse) << tensor::dtype_name(b.t) << " seed " << seed;
      EXPECT_GT(rel, 0.0) << tensor::dtype_name(b.t);
    }
  }
}

TEST(Quant, ZerosRoundTripToZeros) {
  constexpr std::int64_t n = 512;
  const std::vector<float> x(n, 0.0f);
  for (const tensor::DTypeInfo& info : tensor::all_dtypes()) {
    std::vector<unsigned char> q(tensor::row_bytes(info.dtype, n), 0x5A);
    std::vector<float> y(n, 1.0f);
    kernels::quantize_row_ref(info.dtype, x.data(), q.data(), n);
    kernels::dequantize_row_ref(info.dtype, q.data(), y.data(), n);
    for (float v : y) ASSERT_EQ(v, 0.0f) << info.name;
  }
}

TEST(Quant, FastActivationQuantizersAreBitExact) {
  for (DType t : {DType::q8_0, DType::q8_K, DType::q4_0, DType::f16}) {
    for (std::int64_t n : {256, 4096, 14336}) {
      for (std::uint32_t seed = 0; seed < 4; ++seed) {
        std::vector<float> x = random_floats(n, seed * 7 + 1, seed == 3 ? 1e-4f : 1.0f);
        if (seed == 2) {  // exact ties for roundf: multiples of 0.5 of the step
          for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((static_cast<int>(i * 37 % 255) - 127)) * 0.5f;
        }
        std::vector<unsigned char> want(tensor::row_bytes(t, n)), got(want.size(), 0xEE);
        kernels::quantize_row_ref(t, x.data(), want.data(), n);
        for (kernels::Isa isa : kernels::available_isas()) {
          std::fill(got.begin(), got.end(), 0xEE);
          kernels::quantize_row(t, x.data(), got.data(), n, isa);
          ASSERT_EQ(got, want) << tensor::dtype_name(t) << " n " << n << " seed " << seed << " "
                               << kernels::isa_name(isa);
        }
      }
    }
  }
}

TEST(Quant, Q8KBlockSumsMatchValues) {
  const std::vector<float> x = random_floats(1024, 9);
  std::vector<tensor::BlockQ8_K> q(4);
  kernels::quantize_row(DType::q8_K, x.data(), q.data(), 1024);
  for (const auto& b : q) {
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += b.qs[16 * j + i];
      EXPECT_EQ(s, b.bsums[j]);
    }
  }
}

TEST(Quant, RowLengthNotMultipleOfBlockThrows) {
  std::vector<float> x(300);
  std::vector<unsigned char> q(4096);
  EXPECT_THROW(kernels::quantize_row_ref(DType::q4_K, x.data(), q.data(), 300), kernels::ShapeError);
  EXPECT_THROW(kernels::dequantize_row_ref(DType::q4_0, q.data(), x.data(), 33), kernels::ShapeError);
  EXPECT_THROW(kernels::quantize_row(DType::q8_0, x.data(), q.data(), -32), kernels::ShapeError);
  try {
    kernels::quantize_row_ref(DType::q6_K, x.data(), q.data(), 300);
    FAIL();
  } catch (const tensor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q6_K"), std::string::npos) << e.what();
  }
}

}  // namespace
