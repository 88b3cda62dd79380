// The consistency harness of the products (in the spirit of ggml's test-backend-ops): every weight type,
// every ISA this CPU has, sweeps of shapes and thread counts, fresh random inputs, outputs poisoned with
// NaN before each run; each fast result is compared with the scalar reference, and the reference itself
// with a plain double-precision sum over the dequantized weights and activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "tensor/dtype.h"
#include "tensor/thread_pool.h"
#include "test_util.h"

namespace {

using kernels::testing::make_weights;
using kernels::testing::max_rel_err;
using kernels::testing::poison;
using kernels::testing::random_floats;
using kernels::testing::Weights;
using tensor::DType;

constexpr DType kWeightTypes[] = {DType::f32,  DType::f16,  DType::bf16, DType::q4_0, DType::q4_1,
                                  DType::q5_0, DType::q5_1, DType::q8_0, DType::q2_K, DType::q3_K,
                                  DType::q4_K, DType::q5_K, DType::q6_K, DType::nf4};

std::vector<std::int64_t> n_in_sweep(DType t) {
  if (tensor::block_size(t) == 256) return {256, 768, 2048};
  if (tensor::block_size(t) == 32) return {32, 96, 544, 2048};
  if (tensor::block_size(t) == 64) return {64, 192, 576, 2048};
  return {1, 7, 33, 100, 2048};
}

TEST(MatmulConsistency, ReferenceMatchesDequantizedDoubleSum) {
  for (DType t : kWeightTypes) {
    for (std::int64_t n_in : n_in_sweep(t)) {
      const std::int64_t n_out = 5;
      const Weights w = make_weights(t, n_out, n_in, 11);
      const std::vector<float> x = random_floats(n_in, 12);
      // What the reference sees: the activations after conversion to vec_dot_type.
      const DType act = kernels::vec_dot_type(t);
      std::vector<unsigned char> xq(tensor::row_bytes(act, n_in));
      kernels::quantize_row_ref(act, x.data(), xq.data(), n_in);
      std::vector<float> xd(n_in), wd(n_in), want(n_out), got(n_out);
      kernels::dequantize_row_ref(act, xq.data(), xd.data(), n_in);
      for (std::int64_t r = 0; r < n_out; ++r) {
        kernels::dequantize_row_ref(t, w.bytes.data() + r * tensor::row_bytes(t, n_in), wd.data(), n_in);
        double s = 0;
        for (std::int64_t i = 0; i < n_in; ++i) s += static_cast<double>(wd[i]) * xd[i];
        want[r] = static_cast<float>(s);
      }
      poison(got);
      kernels::matvec_ref(w.params, x.data(), got.data());
      EXPECT_LT(max_rel_err(got, want), 2e-5) << tensor::dtype_name(t) << " n_in " << n_in;
    }
  }
}

TEST(MatmulConsistency, FastMatchesReferenceOverShapesThreadsAndIsas) {
  tensor::ThreadPool pool2(2), pool3(3);
  tensor::ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  std::uint32_t seed = 100;
  for (DType t : kWeightTypes) {
    for (std::int64_t n_in : n_in_sweep(t)) {
      for (std::int64_t n_out : {1, 33, 70}) {
        for (std::int64_t n_tokens : {1, 3}) {
          const Weights w = make_weights(t, n_out, n_in, ++seed);
          const std::vector<float> x = random_floats(n_tokens * n_in, ++seed);
          std::vector<float> want(static_cast<std::size_t>(n_tokens * n_out)), got(want.size());
          kernels::matmul_ref(w.params, x.data(), n_tokens, want.data());
          for (kernels::Isa isa : kernels::available_isas()) {
            for (tensor::ThreadPool* pool : pools) {
              // Thread hand-offs are slow to schedule on a busy 2-core CI machine: the threaded runs take the
              // shape that splits (70 rows: uneven ranges), 3 threads only once.
              if (pool != nullptr && n_out != 70) continue;
              if (pool == &pool3 && n_tokens != 3) continue;
              poison(got);
              if (n_tokens == 1) {
                kernels::matvec(w.params, x.data(), got.data(), pool, isa);
              } else {
                kernels::matmul(w.params, x.data(), n_tokens, got.data(), pool, isa);
              }
              // Same integer sums, float sums in another order: with cancellation in a dot of random signs,
              // 1e-4 of the largest output; a wrong level or scale is off by far more.
              ASSERT_LT(max_rel_err(got, want), 1e-4)
                  << tensor::dtype_name(t) << " [" << n_out << ", " << n_in << "] tokens " << n_tokens << " "
                  << kernels::isa_name(isa) << " threads " << (pool ? pool->n_threads() : 1);
            }
          }
        }
      }
    }
  }
}

// Batch invariance: a token's products are bit-for-bit the same whatever other tokens share the call (so a
// runner can batch prefill chunks and decode rows), for every type and ISA, on one thread and on a pool.
TEST(MatmulConsistency, EachTokenMatchesItsMatvecBitForBit) {
  tensor::ThreadPool pool(3);
  std::uint32_t seed = 900;
  for (DType t : kWeightTypes) {
    const std::int64_t n_in = tensor::block_size(t) == 256 ? 512 : (tensor::block_size(t) == 1 ? 113 : tensor::block_size(t) * 3);
    const std::int64_t n_out = 37;
    const Weights w = make_weights(t, n_out, n_in, ++seed);
    const std::int64_t n_tokens = 38;  // several 3-token groups, a partial tile of 32, leftovers
    const std::vector<float> x = random_floats(n_tokens * n_in, ++seed);
    for (kernels::Isa isa : kernels::available_isas()) {
      for (tensor::ThreadPool* p : {static_cast<tensor::ThreadPool*>(nullptr), &pool}) {
        std::vector<float> all(static_cast<std::size_t>(n_tokens * n_out)), one(static_cast<std::size_t>(n_out));
        kernels::matmul(w.params, x.data(), n_tokens, all.data(), p, isa);
        for (std::int64_t tok = 0; tok < n_tokens; ++tok) {
          kernels::matvec(w.params, x.data() + tok * n_in, one.data(), p, isa);
          ASSERT_EQ(0, std::memcmp(one.data(), all.data() + tok * n_out, one.size() * sizeof(float)))
              << tensor::dtype_name(t) << " " << kernels::isa_name(isa) << " token " << tok;
        }
      }
    }
  }
}

// Byte offsets of the f16 scale fields in a block of t (tensor/blocks.h): left alone by the extreme
// patterns so every scale stays finite.
std::vector<std::size_t> scale_offsets(DType t) {
  switch (t) {
    case DType::q4_0: case DType::q5_0: case DType::q8_0: return {0, 1};
    case DType::q4_1: case DType::q5_1: case DType::q4_K: case DType::q5_K: return {0, 1, 2, 3};
    case DType::q6_K: return {208, 209};
    default: return {};
  }
}

// Every byte of every block but its f16 scales set from `pattern` (cycled): all-ones gives the largest
// levels, scales and mins of each format, 0x80 / 0x81 / 0x7F the extremes of signed bytes.
void fill_levels(Weights& w, DType t, const std::vector<unsigned char>& pattern) {
  const std::size_t block = tensor::block_bytes(t);
  const std::vector<std::size_t> keep = scale_offsets(t);
  for (std::size_t off = 0; off + block <= w.bytes.size(); off += block) {
    for (std::size_t k = 0, j = 0; k < block; ++k) {
      if (std::find(keep.begin(), keep.end(), k) == keep.end()) w.bytes[off + k] = pattern[j++ % pattern.size()];
    }
  }
}

// The register tiles (four rows x up to four tokens per weight load, and the four-row matvec) against the
// one-row dot product itself: every output bit-equal to vec_dot of its row with its token quantized alone.
// Block counts odd and even, below and above a multiple of 4 (the kernels' pair and remainder paths), every
// token count 1..9 (each tile width and mixes), row counts that leave rows outside the tiles, and weights
// of extreme levels, scales and mins against activations of one sign or alternating signs, where a
// saturating or off-by-offset integer sum would show.
TEST(MatmulConsistency, QuantizedTilesMatchVecDotBitForBit) {
  tensor::ThreadPool pool(2);
  std::uint32_t seed = 4200;
  const std::vector<std::vector<unsigned char>> patterns = {{}, {0xFF}, {0x80, 0x81, 0x7F}};
  for (DType t : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q4_K, DType::q5_K,
                  DType::q6_K}) {
    const std::vector<std::int64_t> widths = tensor::block_size(t) == 256 ? std::vector<std::int64_t>{256, 768, 1536}
                                                                          : std::vector<std::int64_t>{32, 96, 128, 320, 2048};
    for (std::int64_t n_in : widths) {
      for (std::size_t pat = 0; pat < patterns.size(); ++pat) {
        const std::int64_t n_out = 38;
        Weights w = make_weights(t, n_out, n_in, ++seed);
        std::vector<float> x = random_floats(9 * n_in, ++seed);
        if (pat > 0) {
          fill_levels(w, t, patterns[pat]);
          for (std::size_t i = 0; i < x.size(); ++i) x[i] = (pat == 1 || i % 2 == 0) ? 1.0f : -1.0f;
        }
        const DType act = kernels::vec_dot_type(t);
        const std::size_t act_bytes = tensor::row_bytes(act, n_in), row = tensor::row_bytes(t, n_in);
        std::vector<float> ref(static_cast<std::size_t>(9 * n_out));
        kernels::matmul_ref(w.params, x.data(), 9, ref.data());
        for (kernels::Isa isa : kernels::available_isas()) {
          std::vector<float> want(static_cast<std::size_t>(9 * n_out));
          std::vector<unsigned char> xq(act_bytes);
          for (std::int64_t tok = 0; tok < 9; ++tok) {
            kernels::quantize_row(act, x.data() + tok * n_in, xq.data(), n_in, isa);
            for (std::int64_t r = 0; r < n_out; ++r) {
              want[static_cast<std::size_t>(tok * n_out + r)] =
                  kernels::vec_dot(t, n_in, w.bytes.data() + static_cast<std::size_t>(r) * row, xq.data(), isa);
            }
          }
          const std::string what = std::string(tensor::dtype_name(t)) + " n_in " + std::to_string(n_in) + " pattern " +
                                   std::to_string(pat) + " " + std::string(kernels::isa_name(isa));
          // Alternating signs against extreme levels may cancel to almost nothing: held to the reference only
          // where the sums cannot cancel (pattern 1) or are random (0).
          if (pat < 2) {
            ASSERT_LT(max_rel_err(want, ref), 1e-4) << what;
          }
          for (std::int64_t n_tokens = 1; n_tokens <= 9; ++n_tokens) {
            for (tensor::ThreadPool* p : {static_cast<tensor::ThreadPool*>(nullptr), &pool}) {
              std::vector<float> got(static_cast<std::size_t>(n_tokens * n_out));
              poison(got);
              kernels::matmul(w.params, x.data(), n_tokens, got.data(), p, isa);
              ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                  << what << " tokens " << n_tokens;
            }
          }
        }
      }
    }
  }
}

// Several products of one input in one call: each output bit-equal to its own matmul, whatever the mix of
// weight types (activations in q8_0, q8_K and f32 side by side), token counts (inline and parallel
// activation conversion) and threads.
TEST(MatmulConsistency, MultiMatchesSeparateCallsBitForBit) {
  tensor::ThreadPool pool(2);
  const std::int64_t n_in = 512;
  std::uint32_t seed = 7000;
  const DType types[] = {DType::q4_1, DType::q8_0, DType::q4_K, DType::f16, DType::q6_K};
  const std::int64_t rows[] = {37, 8, 70, 5, 33};
  std::vector<Weights> ws;
  for (int i = 0; i < 5; ++i) ws.push_back(make_weights(types[i], rows[i], n_in, ++seed));
  for (std::int64_t n_tokens : {1, 5, 20}) {
    const std::vector<float> x = random_floats(n_tokens * n_in, ++seed);
    for (kernels::Isa isa : kernels::available_isas()) {
      for (tensor::ThreadPool* p : {static_cast<tensor::ThreadPool*>(nullptr), &pool}) {
        std::vector<kernels::MatmulParams> ps;
        std::vector<std::vector<float>> got(5);
        std::vector<float*> ys;
        for (int i = 0; i < 5; ++i) {
          ps.push_back(ws[static_cast<std::size_t>(i)].params);
          got[static_cast<std::size_t>(i)].resize(static_cast<std::size_t>(n_tokens * rows[i]));
          poison(got[static_cast<std::size_t>(i)]);
          ys.push_back(got[static_cast<std::size_t>(i)].data());
        }
        kernels::matmul_multi(ps, x.data(), n_tokens, ys, p, isa);
        for (int i = 0; i < 5; ++i) {
          std::vector<float> want(static_cast<std::size_t>(n_tokens * rows[i]));
          kernels::matmul(ps[static_cast<std::size_t>(i)], x.data(), n_tokens, want.data(), p, isa);
          ASSERT_EQ(0, std::memcmp(want.data(), got[static_cast<std::size_t>(i)].data(), want.size() * sizeof(float)))
              << tensor::dtype_name(types[i]) << " tokens " << n_tokens << " " << kernels::isa_name(isa);
        }
      }
    }
  }
}

TEST(MatmulConsistency, MultiRejectsBadProductsWithoutWriting) {
  const Weights a = make_weights(DType::q8_0, 4, 64, 1), b = make_weights(DType::q8_0, 4, 96, 2);
  std::vector<float> x(96, 1.0f), y0(4), y1(4);
  float* ys[] = {y0.data(), y1.data()};
  poison(y0);
  poison(y1);
  const kernels::MatmulParams mixed[] = {a.params, b.params};
  EXPECT_THROW(kernels::matmul_multi(mixed, x.data(), 1, ys, nullptr), kernels::ShapeError);  // n_in 64 vs 96
  const kernels::MatmulParams one[] = {a.params};
  EXPECT_THROW(kernels::matmul_multi(one, x.data(), 1, ys, nullptr), kernels::ShapeError);  // 1 product, 2 outputs
  std::vector<unsigned char> raw(4096);
  const Weights c = make_weights(DType::q8_0, 4, 256, 3);
  std::vector<float> x256(256, 1.0f);
  const kernels::MatmulParams bad_w[] = {c.params, {DType::q8_K, raw.data(), 0, 2, 256}};  // an activation type
  EXPECT_THROW(kernels::matmul_multi(bad_w, x256.data(), 1, ys, nullptr), kernels::UnsupportedError);
  const std::vector<kernels::MatmulParams> nine(9, a.params);
  const std::vector<float*> nine_ys(9, y0.data());
  EXPECT_THROW(kernels::matmul_multi(nine, x.data(), 1, nine_ys, nullptr), kernels::ShapeError);
  EXPECT_THROW(kernels::matmul_multi(one, x.data(), -1, {ys, 1}, nullptr), kernels::ShapeError);
  for (float v : y0) EXPECT_TRUE(std::isnan(v));
  for (float v : y1) EXPECT_TRUE(std::isnan(v));
}

TEST(MatmulConsistency, StridedRowsAreHonoured) {
  const std::int64_t n_in = 256, n_out = 9;
  const Weights dense = make_weights(DType::q4_K, n_out, n_in, 5);
  const std::size_t row = tensor::row_bytes(DType::q4_K, n_in), stride = row + 64;
  std::vector<unsigned char> padded(stride * n_out, 0xFF);
  for (std::int64_t r = 0; r < n_out; ++r) std::memcpy(padded.data() + r * stride, dense.bytes.data() + r * row, row);
  const std::vector<float> x = random_floats(n_in, 6);
  std::vector<float> want(n_out), got(n_out);
  kernels::matvec_ref(dense.params, x.data(), want.data());
  kernels::MatmulParams p = dense.params;
  p.w = padded.data();
  p.w_row_bytes = stride;
  for (kernels::Isa isa : kernels::available_isas()) {
    poison(got);
    kernels::matvec(p, x.data(), got.data(), nullptr, isa);
    EXPECT_LT(max_rel_err(got, want), 1e-5) << kernels::isa_name(isa);
  }
}

TEST(MatmulConsistency, BadShapesAndTypesThrow) {
  std::vector<unsigned char> w(4096);
  std::vector<float> x(512), y(8);
  kernels::MatmulParams p{DType::q4_0, w.data(), 0, 2, 100};
  EXPECT_THROW(kernels::matvec(p, x.data(), y.data(), nullptr), kernels::ShapeError);
  EXPECT_THROW(kernels::matvec_ref(p, x.data(), y.data()), kernels::ShapeError);
  p = {DType::q8_K, w.data(), 0, 2, 256};
  EXPECT_THROW(kernels::matvec(p, x.data(), y.data(), nullptr), kernels::UnsupportedError);
  p = {DType::q8_0, w.data(), 10, 2, 64};
  EXPECT_THROW(kernels::matvec(p, x.data(), y.data(), nullptr), kernels::ShapeError);
  p = {DType::f32, w.data(), 0, -1, 4};
  EXPECT_THROW(kernels::matmul(p, x.data(), 1, y.data(), nullptr), kernels::ShapeError);
  p = {DType::f32, w.data(), 0, 1, 4};
  EXPECT_THROW(kernels::matmul(p, x.data(), -1, y.data(), nullptr), kernels::ShapeError);
}

}  // namespace
