// The packed many-token product (kernels/gemm.h) against its scalar reference: weight types (f32, f16,
// bf16, a quantized one), sweeps of shapes around the panel width and the register tiles' token counts,
// each epilogue, every ISA this CPU has, one and two threads, outputs poisoned with NaN; a token's result
// bit-identical whatever batch it is in; and the typed errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/gemm.h"
#include "kernels/quant.h"
#include "tensor/dtype.h"
#include "tensor/thread_pool.h"
#include "test_util.h"

namespace {

using kernels::testing::make_weights;
using kernels::testing::poison;
using kernels::testing::random_floats;
using kernels::testing::Weights;
using tensor::DType;

// Max |got - want| over the scale of the sum's terms (sum_k |x_k w_k| + |bias|, the float rounding's
// natural unit); NaN anywhere gives +inf.
double max_err(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& scale) {
  double e = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return INFINITY;
    e = std::max(e, std::fabs(static_cast<double>(got[i]) - want[i]) / std::max(1e-30, static_cast<double>(scale[i])));
  }
  return e;
}

TEST(Gemm, MatchesTheReference) {
  tensor::ThreadPool pool2(2);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0}) {
    const std::vector<std::int64_t> n_ins = tensor::block_size(t) == 1 ? std::vector<std::int64_t>{1, 17, 384}
                                                                       : std::vector<std::int64_t>{32, 384};
    for (std::int64_t n_in : n_ins) {
      for (std::int64_t n_out : {1, 31, 32, 33, 100}) {
        const Weights w = make_weights(t, n_out, n_in, static_cast<std::uint32_t>(n_in * 7 + n_out));
        const kernels::PackedMatrix packed = kernels::PackedMatrix::pack(w.params);
        ASSERT_EQ(packed.n_out(), n_out);
        ASSERT_EQ(packed.n_in(), n_in);
        const std::vector<float> bias = random_floats(n_out, 3);
        for (std::int64_t n_tokens : {1, 5, 6, 7, 12, 13, 30}) {
          const std::vector<float> x = random_floats(n_tokens * n_in, static_cast<std::uint32_t>(n_tokens), 1.0f);
          // The scale of each result: sum_k |x w| + |bias| (dequantized weights).
          std::vector<float> wf(static_cast<std::size_t>(n_out * n_in));
          for (std::int64_t r = 0; r < n_out; ++r) {
            kernels::dequantize_row_ref(t, w.bytes.data() + static_cast<std::size_t>(r) * tensor::row_bytes(t, n_in),
                                        wf.data() + r * n_in, n_in);
          }
          std::vector<float> scale(static_cast<std::size_t>(n_tokens * n_out));
          for (std::int64_t i = 0; i < n_tokens; ++i) {
            for (std::int64_t r = 0; r < n_out; ++r) {
              double s = std::fabs(bias[static_cast<std::size_t>(r)]);
              for (std::int64_t k = 0; k < n_in; ++k) s += std::fabs(x[i * n_in + k] * wf[r * n_in + k]);
              scale[i * n_out + r] = static_cast<float>(s);
            }
          }
          for (const kernels::GemmEpilogue e :
               {kernels::GemmEpilogue{}, kernels::GemmEpilogue{bias.data(), kernels::GemmActivation::none},
                kernels::GemmEpilogue{bias.data(), kernels::GemmActivation::gelu_erf},
                kernels::GemmEpilogue{nullptr, kernels::GemmActivation::gelu_erf}}) {
            std::vector<float> want(static_cast<std::size_t>(n_tokens * n_out)), got(want.size());
            kernels::gemm_ref(w.params, x.data(), n_tokens, want.data(), e);
            for (kernels::Isa isa : kernels::available_isas()) {
              for (tensor::ThreadPool* pool : {static_cast<tensor::ThreadPool*>(nullptr), &pool2}) {
                poison(got);
                kernels::gemm(packed, x.data(), n_tokens, got.data(), e, pool, isa);
                EXPECT_LT(max_err(got, want, scale), 1e-5)
                    << tensor::dtype_name(t) << " n_out " << n_out << " n_in " << n_in << " tokens " << n_tokens
                    << " bias " << (e.bias != nullptr) << " gelu " << (e.act == kernels::GemmActivation::gelu_erf)
                    << " " << kernels::isa_name(isa) << (pool != nullptr ? " 2 threads" : "");
              }
            }
          }
        }
      }
    }
  }
}

// Each result is one multiply-add chain over k whichever register tile holds its token: a token alone
// gives the same bits as the same token in a batch of 29 (full tiles and a remainder on every ISA).
TEST(Gemm, ATokensResultDoesNotDependOnItsBatch) {
  const std::int64_t n_out = 70, n_in = 96, n_tokens = 29;
  const Weights w = make_weights(DType::f32, n_out, n_in, 5);
  const kernels::PackedMatrix packed = kernels::PackedMatrix::pack(w.params);
  const std::vector<float> x = random_floats(n_tokens * n_in, 6);
  const std::vector<float> bias = random_floats(n_out, 7);
  const kernels::GemmEpilogue e{bias.data(), kernels::GemmActivation::gelu_erf};
  for (kernels::Isa isa : kernels::available_isas()) {
    std::vector<float> all(static_cast<std::size_t>(n_tokens * n_out)), one(static_cast<std::size_t>(n_out));
    kernels::gemm(packed, x.data(), n_tokens, all.data(), e, nullptr, isa);
    for (std::int64_t t = 0; t < n_tokens; ++t) {
      kernels::gemm(packed, x.data() + t * n_in, 1, one.data(), e, nullptr, isa);
      for (std::int64_t r = 0; r < n_out; ++r) {
        ASSERT_EQ(one[static_cast<std::size_t>(r)], all[static_cast<std::size_t>(t * n_out + r)])
            << "token " << t << " output " << r << " " << kernels::isa_name(isa);
      }
    }
  }
}

TEST(Gemm, ErrorsAreTyped) {
  const Weights w = make_weights(DType::f32, 4, 8, 1);
  const kernels::PackedMatrix packed = kernels::PackedMatrix::pack(w.params);
  std::vector<float> x(16), y(8);
  auto expect_error = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      FAIL() << "no error; expected one containing: " << needle;
    } catch (const kernels::ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { kernels::gemm(packed, x.data(), -1, y.data(), {}, nullptr); }, "negative n_tokens -1");
  expect_error([&] { kernels::gemm(packed, nullptr, 2, y.data(), {}, nullptr); }, "null input");
  expect_error([&] { kernels::gemm(packed, x.data(), 2, nullptr, {}, nullptr); }, "null output");
  expect_error([&] { kernels::gemm_ref(w.params, x.data(), -2, y.data(), {}); }, "negative n_tokens -2");
  kernels::MatmulParams bad = w.params;
  bad.w_row_bytes = 4;
  expect_error([&] { kernels::PackedMatrix::pack(bad); }, "w_row_bytes 4 is smaller than a row of 8 f32");
  bad = w.params;
  bad.w = nullptr;
  expect_error([&] { kernels::PackedMatrix::pack(bad); }, "null weight pointer");
  bad = {DType::q8_0, w.bytes.data(), 0, 1, 40};
  EXPECT_THROW(kernels::PackedMatrix::pack(bad), kernels::ShapeError);  // 40 is not a multiple of 32
  bad = {DType::f32, w.bytes.data(), 0, -1, 8};
  expect_error([&] { kernels::PackedMatrix::pack(bad); }, "negative size [-1, 8]");
  // An empty matrix is no error: nothing to compute.
  const kernels::PackedMatrix empty;
  EXPECT_NO_THROW(kernels::gemm(empty, x.data(), 2, y.data(), {}, nullptr));
}

}  // namespace
