// Fast CPU paged attention against the reference over sweeps of shapes (attention_harness.h), and every
// error path of the public API.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pal/attention.h>
#include <pal/error.h>
#include <tensor/thread_pool.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "attention_harness.h"

namespace {

using pal::testing::AttentionCase;

constexpr double kTolF32 = 1e-5;  // worst |fast - ref| / max |ref| of the row, f32 KV
constexpr double kTolF16 = 1e-5;  // same bound with f16 KV: both read the same f16 values exactly

// Builds the case's cache and queries, runs the reference once, then the fast kernels on every SIMD path
// this CPU has (avx512, avx2, scalar), each into a NaN-poisoned output, and checks each against it.
void check(const AttentionCase& c, std::uint32_t seed, tensor::ThreadPool* pool = nullptr) {
  std::mt19937 rng(seed);
  pal::testing::BuiltCache cache = pal::testing::build_cache(c, rng);
  const pal::AttentionParams p = pal::testing::params_of(c);
  const bool decode = c.n_query.empty();
  std::vector<std::int32_t> qo_indptr{0};
  for (std::int32_t n : c.n_query) qo_indptr.push_back(qo_indptr.back() + n);
  const std::int64_t n_rows = decode ? static_cast<std::int64_t>(c.seq_lens.size()) : qo_indptr.back();
  const std::size_t n = static_cast<std::size_t>(n_rows * c.n_q_heads * c.head_dim);
  std::vector<float> q(n);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& x : q) x = dist(rng);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> want(n, nan);
  if (decode) {
    pal::decode_attention_ref(cache.kv, p, {q.data(), want.data()});
  } else {
    pal::prefill_attention_ref(cache.kv, p, {qo_indptr.data(), q.data(), want.data()});
  }
  for (float x : want) ASSERT_FALSE(std::isnan(x)) << "reference left an element unwritten: " << c.name();

  const std::string before = pal::attention_cpu_isa();
  const double tol = c.dtype == tensor::DType::f16 ? kTolF16 : kTolF32;
  for (const std::string& isa : pal::attention_cpu_isas()) {
    pal::set_attention_cpu_isa(isa);
    std::vector<float> got(n, nan);
    if (decode) {
      pal::decode_attention(cache.kv, p, {q.data(), got.data()}, pool);
    } else {
      pal::prefill_attention(cache.kv, p, {qo_indptr.data(), q.data(), got.data()}, pool);
    }
    const double err = pal::testing::worst_row_error(want, got, c.head_dim);
    if (std::getenv("PAL_TEST_VERBOSE") != nullptr) {
      std::printf("%.3g  %s %s\n", err, isa.c_str(), c.name().c_str());
    }
    EXPECT_LE(err, tol) << isa << ": " << c.name() << " seed " << seed << (pool ? " (thread pool)" : "");
  }
  pal::set_attention_cpu_isa(before);
}

TEST(AttentionTest, DecodeSweepHeadDimsDtypesGqa) {
  std::uint32_t seed = 1;
  for (int head_dim : {64, 80, 96, 128, 256}) {
    for (tensor::DType dtype : {tensor::DType::f32, tensor::DType::f16}) {
      for (auto [nq, nkv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{6, 1}}) {
        AttentionCase c;
        c.seq_lens = {1, 15, 16, 17, 45, 129};
        c.n_q_heads = nq;
        c.n_kv_heads = nkv;
        c.head_dim = head_dim;
        c.dtype = dtype;
        check(c, seed++);
      }
    }
  }
}

TEST(AttentionTest, DecodeWindowsSoftCapScale) {
  std::uint32_t seed = 100;
  for (int window : {0, 1, 7, 16, 33, 500}) {
    for (float cap : {0.0f, 5.0f, 50.0f}) {
      for (tensor::DType dtype : {tensor::DType::f32, tensor::DType::f16}) {
        AttentionCase c;
        c.seq_lens = {3, 31, 64, 150};
        c.n_q_heads = 8;
        c.n_kv_heads = 2;
        c.head_dim = 128;
        c.dtype = dtype;
        c.window = window;
        c.soft_cap = cap;
        c.scale = window == 7 ? 0.3f : 0.0f;
        check(c, seed++);
      }
    }
  }
}

TEST(AttentionTest, DecodeLongContextOnThreadPool) {
  tensor::ThreadPool pool(2);
  AttentionCase c;
  c.seq_lens = {1000, 517, 2};
  c.n_q_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.dtype = tensor::DType::f16;
  check(c, 7, &pool);
  c.window = 100;
  c.soft_cap = 30.0f;
  check(c, 8, &pool);
}

// The benchmark's head layout (32 query heads over 8 KV heads, head dim 128): every KV head of a page in
// one unit, so each head prefetches its slice of the next page in address order, and the four query rows
// of a KV head go through P.V together. Many pages per sequence, partial last pages, alone and on two threads.
TEST(AttentionTest, DecodeAllHeadsPerUnitGroupOfFour) {
  tensor::ThreadPool pool(2);
  std::uint32_t seed = 30;
  for (tensor::DType dtype : {tensor::DType::f16, tensor::DType::f32}) {
    AttentionCase c;
    c.seq_lens = {80, 147, 1, 300, 33};
    c.n_q_heads = 32;
    c.n_kv_heads = 8;
    c.head_dim = 128;
    c.dtype = dtype;
    check(c, seed++, &pool);
    check(c, seed++, nullptr);
  }
}

// Few sequences and long contexts: decode splits the keys and merges partial softmax states (windows
// leave some splits without a visible key); short ones split the KV heads.
TEST(AttentionTest, DecodeSplitKvSmallBatch) {
  tensor::ThreadPool pool(2);
  std::uint32_t seed = 50;
  for (int window : {0, 100, 700}) {
    for (auto lens : {std::vector<std::int32_t>{2000}, std::vector<std::int32_t>{1100, 3000}}) {
      AttentionCase c;
      c.seq_lens = lens;
      c.n_q_heads = 8;
      c.n_kv_heads = 1;
      c.head_dim = 80;
      c.dtype = tensor::DType::f16;
      c.window = window;
      c.soft_cap = window == 100 ? 30.0f : 0.0f;
      check(c, seed++, &pool);
      check(c, seed++, nullptr);
    }
  }
  // One short sequence on two threads: the KV heads are split into ranges instead.
  AttentionCase c;
  c.seq_lens = {300};
  c.n_q_heads = 12;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  check(c, seed++, &pool);
  c.seq_lens = {40, 700};
  c.n_kv_heads = 6;
  c.n_q_heads = 12;
  c.window = 33;
  check(c, seed++, &pool);
}

TEST(AttentionTest, PrefillSweep) {
  std::uint32_t seed = 200;
  const std::vector<std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>>> batches = {
      {{17}, {17}},               // whole prompt
      {{50, 16}, {13, 16}},       // chunked prefill: queries start at an offset
      {{100, 33, 5}, {1, 33, 0}}, // a decode-like row and an empty one in the batch
      {{83}, {70}},
  };
  for (const auto& [lens, nq] : batches) {
    for (int head_dim : {64, 80, 96, 128, 256}) {
      for (tensor::DType dtype : {tensor::DType::f32, tensor::DType::f16}) {
        AttentionCase c;
        c.seq_lens = lens;
        c.n_query = nq;
        c.n_q_heads = 4;
        c.n_kv_heads = head_dim == 96 ? 4 : (head_dim == 256 ? 1 : 2);
        c.head_dim = head_dim;
        c.dtype = dtype;
        check(c, seed++);
      }
    }
  }
}

TEST(AttentionTest, PrefillWindowsSoftCapGqaOnThreadPool) {
  tensor::ThreadPool pool(2);
  std::uint32_t seed = 300;
  for (int window : {0, 1, 5, 20}) {
    for (float cap : {0.0f, 20.0f}) {
      for (auto [nq, nkv] : {std::pair{32, 8}, std::pair{4, 1}, std::pair{2, 2}}) {
        AttentionCase c;
        c.seq_lens = {61, 40};
        c.n_query = {45, 9};
        c.n_q_heads = nq;
        c.n_kv_heads = nkv;
        c.head_dim = 64;
        c.dtype = (seed % 2) ? tensor::DType::f16 : tensor::DType::f32;
        c.window = window;
        c.soft_cap = cap;
        check(c, seed, (seed % 3) ? &pool : nullptr);
        ++seed;
      }
    }
  }
}

// Head dims without a SIMD kernel (tiny models) take the generic kernel: decode (split over key chunks on a
// pool, and not), prefill, windows, soft cap, f16.
TEST(AttentionTest, GenericHeadDims) {
  tensor::ThreadPool pool(2);
  std::uint32_t seed = 400;
  for (int head_dim : {2, 8, 24, 72}) {
    for (tensor::DType dtype : {tensor::DType::f32, tensor::DType::f16}) {
      AttentionCase c;
      c.seq_lens = {1, 17, 40, 1300};
      c.n_q_heads = 4;
      c.n_kv_heads = 2;
      c.head_dim = head_dim;
      c.dtype = dtype;
      check(c, seed++);
      c.seq_lens = {1300};
      c.window = head_dim == 8 ? 600 : 0;
      check(c, seed++, &pool);
      c.seq_lens = {50, 33};
      c.n_query = {20, 33};
      c.soft_cap = 10.0f;
      c.window = head_dim == 24 ? 9 : 0;
      check(c, seed++, &pool);
    }
  }
}

TEST(AttentionTest, ReportsAndSetsIsa) {
  const std::string isa = pal::attention_cpu_isa();
  EXPECT_THAT(isa, ::testing::AnyOf("avx512", "avx2", "scalar"));
  EXPECT_EQ(pal::attention_cpu_isas().front(), isa);
  EXPECT_EQ(pal::attention_cpu_isas().back(), "scalar");
  try {
    pal::set_attention_cpu_isa("neon");
    ADD_FAILURE() << "no error";
  } catch (const pal::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("unknown ISA \"neon\""));
  }
  EXPECT_EQ(pal::attention_cpu_isa(), isa);
}

// --- errors -------------------------------------------------------------------------------------------

struct ErrorFixture {
  AttentionCase c;
  std::mt19937 rng{5};
  pal::testing::BuiltCache cache;
  pal::AttentionParams p;
  std::vector<float> q, out;
  std::vector<std::int32_t> qo{0, 3, 5};
  ErrorFixture() {
    c.seq_lens = {20, 5};
    c.n_q_heads = 4;
    c.n_kv_heads = 2;
    cache = pal::testing::build_cache(c, rng);
    p = pal::testing::params_of(c);
    q.assign(5 * 4 * 64, 0.5f);
    out.assign(q.size(), std::numeric_limits<float>::quiet_NaN());
  }
  // Runs all four entry points; each must throw pal::Error whose message contains `needle` and leave out
  // unwritten.
  void expect_error(const std::string& needle) {
    auto expect = [&](auto&& fn, const char* which) {
      try {
        fn();
        ADD_FAILURE() << which << ": no error, expected one containing '" << needle << "'";
      } catch (const pal::Error& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr(needle)) << which;
      }
      for (float x : out) ASSERT_TRUE(std::isnan(x)) << which << " wrote output before failing";
    };
    expect([&] { pal::decode_attention_ref(cache.kv, p, {q.data(), out.data()}); }, "decode_ref");
    expect([&] { pal::decode_attention(cache.kv, p, {q.data(), out.data()}); }, "decode");
    expect([&] { pal::prefill_attention_ref(cache.kv, p, {qo.data(), q.data(), out.data()}); }, "prefill_ref");
    expect([&] { pal::prefill_attention(cache.kv, p, {qo.data(), q.data(), out.data()}); }, "prefill");
  }
};

TEST(AttentionErrorTest, UnsupportedHeadDim) {
  for (int head_dim : {7, 0, -2}) {
    ErrorFixture f;
    f.cache.kv.head_dim = head_dim;
    f.expect_error("head dim " + std::to_string(head_dim) + " is not supported (an even number >= 2)");
  }
}

TEST(AttentionErrorTest, UnsupportedDtype) {
  ErrorFixture f;
  f.cache.kv.dtype = tensor::DType::bf16;
  f.expect_error("KV dtype bf16 is not supported");
}

TEST(AttentionErrorTest, PageTableTooShortForLength) {
  ErrorFixture f;
  f.cache.lens[0] = 33;  // needs 3 pages, owns 2
  f.expect_error("sequence 0: 33 tokens need 3 pages of 16, the page table gives 2");
}

TEST(AttentionErrorTest, PageTableTooLongForLength) {
  ErrorFixture f;
  f.cache.lens[0] = 16;  // needs 1 page, owns 2
  f.expect_error("sequence 0: 16 tokens need 1 pages of 16, the page table gives 2");
}

TEST(AttentionErrorTest, PageIndptrBackwards) {
  ErrorFixture f;
  f.cache.indptr = {0, 2, 1};
  f.cache.kv.page_indptr = f.cache.indptr.data();
  f.expect_error("sequence 1: page_indptr goes backwards (2 then 1)");
}

TEST(AttentionErrorTest, PageIndptrNotStartingAtZero) {
  ErrorFixture f;
  f.cache.indptr[0] = 1;
  f.expect_error("page_indptr[0] is 1, must be 0");
}

TEST(AttentionErrorTest, PageOutOfRange) {
  ErrorFixture f;
  f.cache.indices[2] = f.cache.kv.n_pages;  // sequence 1, entry 0
  f.expect_error("sequence 1: page table entry 0 is page " + std::to_string(f.cache.kv.n_pages) +
                 ", outside [0, " + std::to_string(f.cache.kv.n_pages) + ")");
}

TEST(AttentionErrorTest, NegativePage) {
  ErrorFixture f;
  f.cache.indices[1] = -1;
  f.expect_error("sequence 0: page table entry 1 is page -1");
}

TEST(AttentionErrorTest, NegativeLength) {
  ErrorFixture f;
  f.cache.lens[1] = -4;
  f.expect_error("sequence 1: length -4 is negative");
}

TEST(AttentionErrorTest, HeadsNotAMultiple) {
  ErrorFixture f;
  f.p.n_q_heads = 3;
  f.expect_error("n_q_heads 3 must be a positive multiple of n_kv_heads 2");
}

TEST(AttentionErrorTest, BadWindowCapScale) {
  {
    ErrorFixture f;
    f.p.sliding_window = -1;
    f.expect_error("sliding_window -1 is negative");
  }
  {
    ErrorFixture f;
    f.p.logit_soft_cap = -2.0f;
    f.expect_error("logit_soft_cap -2 must be finite and >= 0");
  }
  {
    ErrorFixture f;
    f.p.scale = std::numeric_limits<float>::infinity();
    f.expect_error("scale inf is not finite");
  }
}

TEST(AttentionErrorTest, DecodeEmptySequence) {
  ErrorFixture f;
  f.c.seq_lens = {0, 5};
  f.cache = pal::testing::build_cache(f.c, f.rng);
  for (auto* fn : {&pal::decode_attention_ref}) {
    EXPECT_THROW(fn(f.cache.kv, f.p, {f.q.data(), f.out.data()}), pal::Error);
  }
  try {
    pal::decode_attention(f.cache.kv, f.p, {f.q.data(), f.out.data()});
    ADD_FAILURE() << "no error";
  } catch (const pal::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("[pal::decode_attention] sequence 0: length 0"));
  }
}

TEST(AttentionErrorTest, PrefillMoreQueriesThanCached) {
  ErrorFixture f;
  std::vector<std::int32_t> qo{0, 3, 9};  // sequence 1: 6 queries, 5 cached
  for (auto* fn : {&pal::prefill_attention_ref}) {
    EXPECT_THROW(fn(f.cache.kv, f.p, {qo.data(), f.q.data(), f.out.data()}), pal::Error);
  }
  std::vector<float> q(9 * 4 * 64, 0.5f), out(q.size(), std::numeric_limits<float>::quiet_NaN());
  try {
    pal::prefill_attention(f.cache.kv, f.p, {qo.data(), q.data(), out.data()});
    ADD_FAILURE() << "no error";
  } catch (const pal::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("sequence 1: 6 query tokens but only 5 cached tokens"));
  }
  qo = {0, 4, 2};
  EXPECT_THROW(pal::prefill_attention(f.cache.kv, f.p, {qo.data(), q.data(), out.data()}), pal::Error);
}

}  // namespace
