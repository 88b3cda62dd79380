// Bidirectional attention over packed sequences (kernels/attention.h): the fast version against the
// reference over sequence lengths around the kernel's blocks (1, 3, 4, 9, 40), head dims with and without
// the fast path (8, 32, 40, 12), q/k/v as column blocks of one strided buffer, one and two threads, outputs
// poisoned; rows of other sequences never read; the typed errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/error.h"
#include "tensor/thread_pool.h"
#include "test_util.h"

namespace {

using kernels::testing::max_rel_err;
using kernels::testing::poison;
using kernels::testing::random_floats;

TEST(BidirectionalAttention, MatchesTheReference) {
  tensor::ThreadPool pool2(2);
  const std::vector<std::int32_t> indptr = {0, 1, 4, 8, 17, 57, 60};
  const std::int64_t n = indptr.back();
  for (std::int64_t hd : {8, 32, 40, 12}) {
    const std::int64_t heads = 3, d = heads * hd;
    // One [n, 3 d + 5] buffer: q, k, v side by side, rows padded (strides beyond the width).
    const std::int64_t stride = 3 * d + 5;
    const std::vector<float> qkv = random_floats(n * stride, static_cast<std::uint32_t>(hd), 1.5f);
    const kernels::BidirectionalAttentionParams p{heads, hd, stride, stride, stride, d, 1.0f / std::sqrt(float(hd))};
    std::vector<float> want(static_cast<std::size_t>(n * d)), got(want.size());
    kernels::bidirectional_attention_ref(p, qkv.data(), qkv.data() + d, qkv.data() + 2 * d, indptr, want.data());
    for (kernels::Isa isa : kernels::available_isas()) {
      for (tensor::ThreadPool* pool : {static_cast<tensor::ThreadPool*>(nullptr), &pool2}) {
        poison(got);
        kernels::bidirectional_attention(p, qkv.data(), qkv.data() + d, qkv.data() + 2 * d, indptr, got.data(), pool,
                                         isa);
        EXPECT_LT(max_rel_err(got, want), 2e-6) << "head_dim " << hd << " " << kernels::isa_name(isa);
      }
    }
  }
}

// A sequence's outputs depend on its own rows only: changing another sequence's keys and values changes
// nothing in it, and a one-row sequence returns its own value.
TEST(BidirectionalAttention, SequencesDoNotSeeEachOther) {
  const std::int64_t hd = 32, d = 2 * hd, n = 12;
  const std::vector<std::int32_t> indptr = {0, 5, 6, 12};
  std::vector<float> q = random_floats(n * d, 1), k = random_floats(n * d, 2), v = random_floats(n * d, 3);
  const kernels::BidirectionalAttentionParams p{2, hd, d, d, d, d, 0.2f};
  std::vector<float> a(static_cast<std::size_t>(n * d)), b(a.size());
  kernels::bidirectional_attention(p, q.data(), k.data(), v.data(), indptr, a.data(), nullptr);
  for (std::int64_t i = 6 * d; i < n * d; ++i) k[i] += 1.0f, v[i] -= 2.0f;
  kernels::bidirectional_attention(p, q.data(), k.data(), v.data(), indptr, b.data(), nullptr);
  for (std::int64_t i = 0; i < 6 * d; ++i) ASSERT_EQ(a[i], b[i]) << i;
  for (std::int64_t e = 0; e < d; ++e) EXPECT_FLOAT_EQ(a[5 * d + e], v[5 * d + e]);
}

TEST(BidirectionalAttention, ErrorsAreTyped) {
  std::vector<float> x(64), y(64);
  const std::vector<std::int32_t> ok = {0, 2};
  auto expect_error = [&](const kernels::BidirectionalAttentionParams& p, std::vector<std::int32_t> indptr,
                          const float* q, const std::string& needle) {
    for (bool ref : {false, true}) {
      try {
        if (ref) {
          kernels::bidirectional_attention_ref(p, q, x.data(), x.data(), indptr, y.data());
        } else {
          kernels::bidirectional_attention(p, q, x.data(), x.data(), indptr, y.data(), nullptr);
        }
        FAIL() << "no error; expected: " << needle;
      } catch (const kernels::ShapeError& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    }
  };
  const kernels::BidirectionalAttentionParams good{2, 8, 16, 16, 16, 16, 1.0f};
  kernels::BidirectionalAttentionParams p = good;
  p.n_heads = 0;
  expect_error(p, ok, x.data(), "n_heads 0 and head_dim 8 must be positive");
  p = good;
  p.v_stride = 15;
  expect_error(p, ok, x.data(), "v_stride 15 is less than n_heads * head_dim = 16");
  expect_error(good, {1, 2}, x.data(), "seq_indptr must start at 0");
  expect_error(good, {}, x.data(), "seq_indptr must start at 0");
  expect_error(good, {0, 2, 1}, x.data(), "seq_indptr decreases at 2 (2 then 1)");
  expect_error(good, ok, nullptr, "null pointer with 2 rows to do");
}

}  // namespace
