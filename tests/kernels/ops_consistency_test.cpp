// Consistency harness of the element-wise kernels: each fast version against its reference over sweeps
// of sizes (tails included), fresh random inputs, outputs poisoned with NaN; plus the typed errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/error.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "test_util.h"

namespace {

using kernels::testing::max_rel_err;
using kernels::testing::poison;
using kernels::testing::random_floats;

constexpr std::int64_t kSizes[] = {1, 7, 8, 17, 64, 100, 4096, 5120};

// Element-wise relative error (for functions whose outputs span many magnitudes).
double max_elem_err(const std::vector<float>& got, const std::vector<float>& want, double floor) {
  double e = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    e = std::max(e, std::fabs(static_cast<double>(got[i]) - want[i]) / std::max(floor, std::fabs(static_cast<double>(want[i]))));
  }
  return e;
}

TEST(OpsConsistency, Norms) {
  for (std::int64_t n : kSizes) {
    for (std::int64_t rows : {1, 3}) {
      const std::vector<float> x = random_floats(rows * n, static_cast<std::uint32_t>(n * 10 + rows), 3.0f);
      std::vector<float> w = random_floats(n, 5), b = random_floats(n, 6);
      for (float& v : w) v = 1.0f + 0.1f * v;
      std::vector<float> want(x.size()), got(x.size());
      for (kernels::Isa isa : kernels::available_isas()) {
        const kernels::NormParams p{rows, n, 1e-6f};
        kernels::rms_norm_ref(p, x.data(), w.data(), want.data());
        poison(got);
        kernels::rms_norm(p, x.data(), w.data(), got.data(), isa);
        EXPECT_LT(max_rel_err(got, want), 2e-6) << "rms_norm n " << n << " " << kernels::isa_name(isa);
        kernels::layer_norm_ref(p, x.data(), w.data(), b.data(), want.data());
        poison(got);
        kernels::layer_norm(p, x.data(), w.data(), b.data(), got.data(), isa);
        EXPECT_LT(max_rel_err(got, want), 2e-6) << "layer_norm n " << n << " " << kernels::isa_name(isa);
        kernels::layer_norm_ref(p, x.data(), nullptr, nullptr, want.data());
        poison(got);
        kernels::layer_norm(p, x.data(), nullptr, nullptr, got.data(), isa);
        EXPECT_LT(max_rel_err(got, want), 2e-6) << "layer_norm (no affine) n " << n;
        // The residual form, in place over its first operand (the encoder's x = LayerNorm(x + y)).
        const std::vector<float> r = random_floats(rows * n, static_cast<std::uint32_t>(n + 99), 2.0f);
        kernels::add_layer_norm_ref(p, x.data(), r.data(), w.data(), b.data(), want.data());
        got = x;
        kernels::add_layer_norm(p, got.data(), r.data(), w.data(), b.data(), got.data(), isa);
        EXPECT_LT(max_rel_err(got, want), 2e-6) << "add_layer_norm n " << n << " " << kernels::isa_name(isa);
      }
    }
  }
}

TEST(OpsConsistency, Activations) {
  for (std::int64_t n : kSizes) {
    std::vector<float> x = random_floats(n, static_cast<std::uint32_t>(n), 4.0f);
    if (n > 4) {
      x[0] = 90.0f;  // overflow side of exp
      x[1] = -100.0f;  // underflow side
      x[2] = 0.0f;
    }
    const std::vector<float> up = random_floats(n, 77);
    std::vector<float> want(n), got(n);
    for (kernels::Isa isa : kernels::available_isas()) {
      const kernels::UnaryParams p{n};
      kernels::silu_ref(p, x.data(), want.data());
      poison(got);
      kernels::silu(p, x.data(), got.data(), isa);
      EXPECT_LT(max_elem_err(got, want, 1e-30), 1e-6) << "silu n " << n << " " << kernels::isa_name(isa);
      kernels::gelu_ref(p, x.data(), want.data());
      poison(got);
      kernels::gelu(p, x.data(), got.data(), isa);
      // exp's argument 2u is formed in float (|2u| up to ~100 for the outliers): 2e-5 covers its rounding.
      EXPECT_LT(max_elem_err(got, want, 1e-30), 2e-5) << "gelu n " << n << " " << kernels::isa_name(isa);
      kernels::gelu_erf_ref(p, x.data(), want.data());
      poison(got);
      kernels::gelu_erf(p, x.data(), got.data(), isa);
      // Relative to each value with a floor of 1e-30: the far negative side (tiny values) is held too.
      EXPECT_LT(max_elem_err(got, want, 1e-30), 5e-7) << "gelu_erf n " << n << " " << kernels::isa_name(isa);
      kernels::swiglu_ref(p, x.data(), up.data(), want.data());
      poison(got);
      kernels::swiglu(p, x.data(), up.data(), got.data(), isa);
      EXPECT_LT(max_elem_err(got, want, 1e-30), 1e-6) << "swiglu n " << n << " " << kernels::isa_name(isa);
      kernels::add_ref(p, x.data(), up.data(), want.data());
      poison(got);
      kernels::add(p, x.data(), up.data(), got.data(), isa);
      EXPECT_EQ(max_elem_err(got, want, 1e-30), 0.0) << "add n " << n;
      kernels::mul_ref(p, x.data(), up.data(), want.data());
      poison(got);
      kernels::mul(p, x.data(), up.data(), got.data(), isa);
      EXPECT_EQ(max_elem_err(got, want, 1e-30), 0.0) << "mul n " << n;
    }
  }
}

// The exact GELU over a fine grid of its whole useful range (both tails, the crossing at 0), not only at
// random points: the erfc fit has different error near 0 and in the tails.
TEST(OpsConsistency, GeluErfAcrossItsRange) {
  std::vector<float> x;
  for (int i = -15000; i <= 15000; ++i) x.push_back(static_cast<float>(i) * 1e-3f);
  const kernels::UnaryParams p{static_cast<std::int64_t>(x.size())};
  std::vector<float> want(x.size()), got(x.size());
  kernels::gelu_erf_ref(p, x.data(), want.data());
  for (kernels::Isa isa : kernels::available_isas()) {
    poison(got);
    kernels::gelu_erf(p, x.data(), got.data(), isa);
    EXPECT_LT(max_elem_err(got, want, 1e-30), 5e-7) << kernels::isa_name(isa);
  }
}

TEST(OpsConsistency, Softmax) {
  for (std::int64_t n : kSizes) {
    for (float scale : {1.0f, 0.125f}) {
      std::vector<float> x = random_floats(2 * n, static_cast<std::uint32_t>(n + 3), 5.0f);
      if (n > 2) x[1] = -std::numeric_limits<float>::infinity();  // a masked position
      std::vector<float> want(x.size()), got(x.size());
      for (kernels::Isa isa : kernels::available_isas()) {
        const kernels::SoftmaxParams p{2, n, scale};
        kernels::softmax_ref(p, x.data(), want.data());
        poison(got);
        kernels::softmax(p, x.data(), got.data(), isa);
        // The reference forms scale * x - max in double; in float that argument is rounded (|arg| up to
        // ~100 here: 100 * 2^-24 = 6e-6 relative on exp), which bounds the agreement.
        EXPECT_LT(max_elem_err(got, want, 1e-30), 1e-5) << "softmax n " << n << " " << kernels::isa_name(isa);
        if (n > 2) {
          EXPECT_EQ(got[1], 0.0f);
        }
      }
    }
  }
}

TEST(OpsConsistency, EmbeddingDequantizesRows) {
  const std::int64_t n_vocab = 10, n_embd = 256;
  for (tensor::DType t : {tensor::DType::f32, tensor::DType::f16, tensor::DType::q4_0, tensor::DType::q6_K}) {
    const std::vector<float> f = random_floats(n_vocab * n_embd, 3);
    const std::size_t row = tensor::row_bytes(t, n_embd);
    std::vector<unsigned char> table(row * n_vocab);
    for (std::int64_t r = 0; r < n_vocab; ++r) kernels::quantize_row_ref(t, f.data() + r * n_embd, table.data() + r * row, n_embd);
    const std::vector<std::int32_t> ids = {3, 0, 9, 3};
    std::vector<float> want(ids.size() * n_embd), got(want.size()), one(n_embd);
    kernels::EmbeddingParams p{t, table.data(), n_vocab, n_embd};
    kernels::embedding_ref(p, ids.data(), 4, want.data());
    kernels::dequantize_row_ref(t, table.data() + 9 * row, one.data(), n_embd);
    EXPECT_EQ(0, std::memcmp(one.data(), want.data() + 2 * n_embd, n_embd * sizeof(float)));
    poison(got);
    kernels::embedding(p, ids.data(), 4, got.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
  }
}

TEST(OpsConsistency, ErrorsAreTyped) {
  std::vector<float> x(64), y(64);
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> masked(8, ninf);
  EXPECT_THROW(kernels::softmax({1, 8, 1.0f}, masked.data(), y.data()), kernels::ShapeError);
  EXPECT_THROW(kernels::softmax_ref({1, 8, 1.0f}, masked.data(), y.data()), kernels::ShapeError);
  EXPECT_THROW(kernels::rms_norm({1, -1, 1e-5f}, x.data(), nullptr, y.data()), kernels::ShapeError);
  EXPECT_THROW(kernels::rms_norm({2, 0, 1e-5f}, x.data(), nullptr, y.data()), kernels::ShapeError);
  EXPECT_THROW(kernels::silu({-3}, x.data(), y.data()), kernels::ShapeError);
  EXPECT_THROW(kernels::gelu_erf({-3}, x.data(), y.data()), kernels::ShapeError);
  EXPECT_THROW(kernels::add_layer_norm({1, 8, 1e-5f}, x.data(), nullptr, nullptr, nullptr, y.data()), kernels::ShapeError);
  EXPECT_THROW(kernels::add_layer_norm_ref({2, 0, 1e-5f}, x.data(), x.data(), nullptr, nullptr, y.data()),
               kernels::ShapeError);
  EXPECT_THROW(kernels::gelu_erf_ref({4}, nullptr, y.data()), kernels::ShapeError);
  EXPECT_THROW(kernels::add({4}, x.data(), nullptr, y.data()), kernels::ShapeError);
  std::vector<unsigned char> table(18 * 4);
  const std::int32_t bad[] = {1, 7};
  kernels::EmbeddingParams p{tensor::DType::q4_0, table.data(), 4, 32};
  try {
    kernels::embedding(p, bad, 2, y.data());
    FAIL();
  } catch (const kernels::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 7 at index 1"), std::string::npos) << e.what();
  }
  p.n_embd = 48;
  EXPECT_THROW(kernels::embedding_ref(p, bad, 1, y.data()), kernels::ShapeError);
}

}  // namespace
