// Batch invariance of the fast CPU attention: a query row's output is bit-for-bit the same whatever else is
// in the call (other sequences, more query rows of its own sequence, the thread count, split-KV decode) and
// whether it goes through decode or prefill, and how a few rows of one sequence are cut into runs.
#include <gtest/gtest.h>
#include <pal/attention.h>
#include <tensor/thread_pool.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#include "attention_harness.h"

namespace {

using pal::testing::AttentionCase;

// The probe: sequence 0 of `c` (its last query row); the other sequences are company.
struct Probe {
  AttentionCase c;
  pal::testing::BuiltCache cache;
  std::vector<float> q;  // [rows][n_q_heads][head_dim], one row per query token of every sequence
};

// Output of sequence `s`'s query row at position `pos` as prefill (rows pos - n + 1 .. pos of s only) or
// decode (only sequence s, truncated to pos + 1 tokens, or together with the whole batch).
std::vector<float> row_output(const Probe& p, std::int32_t pos, std::int32_t n_query, bool decode,
                              bool whole_batch, tensor::ThreadPool* pool) {
  const std::int32_t d = p.c.head_dim, h = p.c.n_q_heads;
  const std::size_t row = static_cast<std::size_t>(h) * d;
  // Sequences of the call: s0 truncated to pos + 1 tokens first, then (whole_batch) the others in full.
  pal::PagedKv kv = p.cache.kv;
  std::vector<std::int32_t> indptr{0}, indices, lens;
  auto add_seq = [&](std::int32_t s, std::int32_t len) {
    const std::int32_t n_pages = (len + pal::kPageSize - 1) / pal::kPageSize;
    for (std::int32_t i = 0; i < n_pages; ++i) indices.push_back(p.cache.indices[p.cache.indptr[s] + i]);
    indptr.push_back(static_cast<std::int32_t>(indices.size()));
    lens.push_back(len);
  };
  add_seq(0, pos + 1);
  std::vector<float> q;
  std::vector<std::int32_t> qo{0};
  auto add_queries = [&](std::int32_t first, std::int32_t n) {  // rows first .. first + n - 1 of p.q
    q.insert(q.end(), p.q.begin() + static_cast<std::ptrdiff_t>(first * row),
             p.q.begin() + static_cast<std::ptrdiff_t>((first + n) * row));
    qo.push_back(qo.back() + n);
  };
  const std::int32_t n0 = decode ? 1 : n_query;
  add_queries(pos - n0 + 1, n0);
  if (whole_batch) {
    for (std::int32_t s = 1; s < static_cast<std::int32_t>(p.c.seq_lens.size()); ++s) {
      add_seq(s, p.c.seq_lens[s]);
      add_queries(0, decode ? 1 : std::min<std::int32_t>(p.c.seq_lens[s], 5));
    }
  }
  kv.n_seqs = static_cast<std::int32_t>(lens.size());
  kv.page_indptr = indptr.data();
  kv.page_indices = indices.data();
  kv.seq_lens = lens.data();
  std::vector<float> out(q.size());
  const pal::AttentionParams params = pal::testing::params_of(p.c);
  if (decode) {
    pal::decode_attention(kv, params, {q.data(), out.data()}, pool);
  } else {
    pal::prefill_attention(kv, params, {qo.data(), q.data(), out.data()}, pool);
  }
  // Sequence 0's last query row.
  const std::size_t first = static_cast<std::size_t>(decode ? 0 : n_query - 1) * row;
  return std::vector<float>(out.begin() + first, out.begin() + first + row);
}

void check_invariance(int head_dim, tensor::DType dtype, std::int32_t window) {
  Probe p;
  p.c.seq_lens = {1400, 37, 900, 5};
  p.c.n_q_heads = 8;
  p.c.n_kv_heads = 2;
  p.c.head_dim = head_dim;
  p.c.dtype = dtype;
  p.c.window = window;
  std::mt19937 rng(11);
  p.cache = pal::testing::build_cache(p.c, rng);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  p.q.resize(static_cast<std::size_t>(1400) * p.c.n_q_heads * head_dim);
  for (float& x : p.q) x = dist(rng);
  tensor::ThreadPool pool(3);
  for (std::int32_t pos : {0, 15, 16, 511, 512, 700, 1399}) {
    const std::vector<float> want = row_output(p, pos, 1, true, false, nullptr);
    auto same = [&](const std::vector<float>& got, const char* how) {
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << how << ": position " << pos << " head_dim " << head_dim << " window " << window;
    };
    same(row_output(p, pos, 1, true, false, &pool), "decode alone on a pool (split keys)");
    same(row_output(p, pos, 1, true, true, &pool), "decode in a batch on a pool");
    same(row_output(p, pos, 1, true, true, nullptr), "decode in a batch");
    for (std::int32_t n : {1, 7, 16, 33}) {
      if (n > pos + 1) continue;
      same(row_output(p, pos, n, false, false, nullptr), "prefill chunk");
      same(row_output(p, pos, n, false, false, &pool), "prefill chunk alone on a pool (shorter runs of tokens)");
      same(row_output(p, pos, n, false, true, &pool), "prefill chunk in a batch on a pool");
    }
  }
}

TEST(AttentionInvarianceTest, SimdHeadDim) {
  if (std::string(pal::attention_cpu_isa()) == "scalar") GTEST_SKIP() << "no SIMD path on this CPU";
  check_invariance(64, tensor::DType::f32, 0);
  check_invariance(128, tensor::DType::f16, 300);
}

TEST(AttentionInvarianceTest, GenericHeadDim) {
  if (std::string(pal::attention_cpu_isa()) == "scalar") GTEST_SKIP() << "no SIMD path on this CPU";
  check_invariance(8, tensor::DType::f32, 0);
  check_invariance(24, tensor::DType::f16, 100);
}

}  // namespace
