// Weights repacked at load (kernels::WeightLayout, repack_weights): the q4_1_x16 layout round-trips to the
// plain blocks byte for byte; its AVX-512/VNNI kernels against the scalar reference on the plain weights
// (fresh random inputs, row lengths below, at and past a run of 16 blocks, row counts outside the four-row
// tiles, every token count 1..9, outputs poisoned with NaN, extreme levels); each token's result bit-equal
// to its one-token product whatever shares the call (batch invariance); and the layout's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/matmul.h"
#include "tensor/dtype.h"
#include "tensor/thread_pool.h"
#include "test_util.h"

namespace {

using kernels::WeightLayout;
using kernels::testing::make_weights;
using kernels::testing::max_rel_err;
using kernels::testing::poison;
using kernels::testing::random_floats;
using kernels::testing::Weights;
using tensor::DType;

// Blocks a row: one, a partial run, one run, a run and one or two, two runs and one, three runs.
constexpr std::int64_t kBlocks[] = {1, 2, 15, 16, 17, 18, 33, 48};

// The weights in the q4_1_x16 layout, and their params.
struct Repacked {
  std::vector<unsigned char> bytes;
  kernels::MatmulParams params;
};
Repacked repack(const Weights& w) {
  Repacked r;
  r.bytes.resize(w.bytes.size());
  kernels::repack_weights(WeightLayout::q4_1_x16, DType::q4_1, w.bytes.data(), 0, w.params.n_out, w.params.n_in,
                          r.bytes.data());
  r.params = w.params;
  r.params.w = r.bytes.data();
  r.params.w_layout = WeightLayout::q4_1_x16;
  return r;
}

bool has_x16() { return kernels::preferred_layout(DType::q4_1) == WeightLayout::q4_1_x16; }

TEST(WeightLayout, Q4_1X16RoundTripsAndTheReferenceReadsIt) {
  std::uint32_t seed = 7000;
  for (const std::int64_t nb : kBlocks) {
    const std::int64_t n_in = 32 * nb, n_out = 5;
    const Weights w = make_weights(DType::q4_1, n_out, n_in, ++seed);
    const Repacked r = repack(w);
    if (nb >= 16) {  // whole runs of 16 blocks move; a row's last blocks stay
      EXPECT_NE(0, std::memcmp(r.bytes.data(), w.bytes.data(), w.bytes.size())) << nb;
    }
    const std::size_t row = tensor::row_bytes(DType::q4_1, n_in);
    std::vector<unsigned char> back(row);
    for (std::int64_t k = 0; k < n_out; ++k) {
      kernels::unpack_weight_row(WeightLayout::q4_1_x16, DType::q4_1, r.bytes.data() + k * row, n_in, back.data());
      ASSERT_EQ(0, std::memcmp(back.data(), w.bytes.data() + k * row, row)) << nb << " blocks, row " << k;
    }
    const std::vector<float> x = random_floats(3 * n_in, ++seed);
    std::vector<float> want(3 * n_out), got(want.size());
    kernels::matmul_ref(w.params, x.data(), 3, want.data());
    poison(got);
    kernels::matmul_ref(r.params, x.data(), 3, got.data());
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << nb;
  }
  // Strided plain rows repack to dense ones.
  const Weights w = make_weights(DType::q4_1, 3, 64, 1);
  const std::size_t row = tensor::row_bytes(DType::q4_1, 64);
  std::vector<unsigned char> strided(3 * (row + 8)), dense(3 * row), direct(3 * row);
  for (int k = 0; k < 3; ++k) std::memcpy(strided.data() + k * (row + 8), w.bytes.data() + k * row, row);
  kernels::repack_weights(WeightLayout::q4_1_x16, DType::q4_1, strided.data(), row + 8, 3, 64, dense.data());
  kernels::repack_weights(WeightLayout::q4_1_x16, DType::q4_1, w.bytes.data(), 0, 3, 64, direct.data());
  EXPECT_EQ(dense, direct);
}

TEST(WeightLayout, Q4_1X16KernelsMatchTheReference) {
  if (!has_x16()) GTEST_SKIP() << "no AVX-512/VNNI on this CPU: the q4_1_x16 kernels do not run here";
  tensor::ThreadPool pool(2);
  std::uint32_t seed = 7100;
  const std::vector<std::vector<unsigned char>> patterns = {{}, {0xFF}, {0x00}, {0x0F, 0xF0}};
  for (const std::int64_t nb : kBlocks) {
    const std::int64_t n_in = 32 * nb;
    for (const std::int64_t n_out : {1, 7, 37}) {
      for (const auto& pattern : patterns) {
        Weights w = make_weights(DType::q4_1, n_out, n_in, ++seed);
        if (!pattern.empty()) {  // every nibble byte from the pattern, scales and mins kept
          for (std::size_t off = 0; off < w.bytes.size(); off += 20) {
            for (std::size_t k = 4; k < 20; ++k) w.bytes[off + k] = pattern[k % pattern.size()];
          }
        }
        const Repacked r = repack(w);
        for (std::int64_t n_tokens = 1; n_tokens <= 9; ++n_tokens) {
          // Activations of one sign for the extreme patterns (no cancellation to hide a wrong sum).
          std::vector<float> x = random_floats(n_tokens * n_in, ++seed);
          if (!pattern.empty()) {
            for (float& v : x) v = std::abs(v);
          }
          std::vector<float> want(static_cast<std::size_t>(n_tokens * n_out)), got(want.size());
          kernels::matmul_ref(w.params, x.data(), n_tokens, want.data());
          for (tensor::ThreadPool* p : {static_cast<tensor::ThreadPool*>(nullptr), &pool}) {
            if (p != nullptr && n_out != 37) continue;
            poison(got);
            kernels::matmul(r.params, x.data(), n_tokens, got.data(), p, kernels::Isa::avx512);
            ASSERT_LT(max_rel_err(got, want), 1e-4)
                << "[" << n_out << ", " << n_in << "] tokens " << n_tokens << " pattern " << pattern.size();
          }
        }
      }
    }
  }
}

// A token's products are the same bits whatever tokens share the call (the one-row kernel at one token,
// four-row tiles of 1..4 tokens, runs of four past that), as the plain layout's are.
TEST(WeightLayout, Q4_1X16EachTokenMatchesItsMatvecBitForBit) {
  if (!has_x16()) GTEST_SKIP() << "no AVX-512/VNNI on this CPU: the q4_1_x16 kernels do not run here";
  tensor::ThreadPool pool(2);
  std::uint32_t seed = 7200;
  for (const std::int64_t nb : {std::int64_t{15}, std::int64_t{18}, std::int64_t{48}}) {
    const std::int64_t n_in = 32 * nb, n_out = 38;
    const Repacked r = repack(make_weights(DType::q4_1, n_out, n_in, ++seed));
    for (const std::int64_t n_tokens : {2, 3, 5, 8, 9, 38}) {
      const std::vector<float> x = random_floats(n_tokens * n_in, ++seed);
      std::vector<float> all(static_cast<std::size_t>(n_tokens * n_out)), one(static_cast<std::size_t>(n_out));
      for (tensor::ThreadPool* p : {static_cast<tensor::ThreadPool*>(nullptr), &pool}) {
        poison(all);
        kernels::matmul(r.params, x.data(), n_tokens, all.data(), p, kernels::Isa::avx512);
        for (std::int64_t tok = 0; tok < n_tokens; ++tok) {
          poison(one);
          kernels::matvec(r.params, x.data() + tok * n_in, one.data(), p, kernels::Isa::avx512);
          ASSERT_EQ(0, std::memcmp(one.data(), all.data() + tok * n_out, one.size() * sizeof(float)))
              << nb << " blocks, " << n_tokens << " tokens, token " << tok;
        }
      }
    }
  }
}

TEST(WeightLayout, BadLayoutsAreErrors) {
  const Weights w = make_weights(DType::q4_1, 4, 64, 3);
  std::vector<unsigned char> out(w.bytes.size());
  // Another type in the q4_1 layout, a row that is not whole blocks, a stride below a row.
  EXPECT_THROW(kernels::repack_weights(WeightLayout::q4_1_x16, DType::q8_0, w.bytes.data(), 0, 1, 64, out.data()),
               kernels::ShapeError);
  EXPECT_THROW(kernels::repack_weights(WeightLayout::q4_1_x16, DType::q4_1, w.bytes.data(), 0, 1, 48, out.data()),
               kernels::ShapeError);
  EXPECT_THROW(kernels::repack_weights(WeightLayout::q4_1_x16, DType::q4_1, w.bytes.data(), 20, 2, 64, out.data()),
               kernels::ShapeError);
  EXPECT_THROW(kernels::unpack_weight_row(WeightLayout::q4_1_x16, DType::q5_1, w.bytes.data(), 64, out.data()),
               kernels::ShapeError);
  Repacked r = repack(w);
  const std::vector<float> x = random_floats(64, 4);
  std::vector<float> y(4);
  // The layout's kernels need AVX-512/VNNI; the layout is q4_1's only.
  EXPECT_THROW(kernels::matvec(r.params, x.data(), y.data(), nullptr, kernels::Isa::avx2), kernels::UnsupportedError);
  EXPECT_THROW(kernels::matvec(r.params, x.data(), y.data(), nullptr, kernels::Isa::scalar),
               kernels::UnsupportedError);
  r.params.w_type = DType::q4_0;
  EXPECT_THROW(kernels::matvec(r.params, x.data(), y.data(), nullptr), kernels::ShapeError);
  EXPECT_THROW(kernels::matvec_ref(r.params, x.data(), y.data()), kernels::ShapeError);
  // Where the CPU has no AVX-512/VNNI, the preferred layout is the plain one; never for another type.
  EXPECT_EQ(kernels::preferred_layout(DType::q4_1, kernels::Isa::avx2), WeightLayout::plain);
  EXPECT_EQ(kernels::preferred_layout(DType::q8_0), WeightLayout::plain);
}

}  // namespace
