// Batch invariance of the forward pass: a token's logits are bit-for-bit the same whether its sequence runs
// alone or among 16 others (prefill chunks and decode rows of other lengths), however its prompt is chunked
// (1, 7, 16 or 33 tokens per step: chunks of 1 go through decode attention), on one thread or a pool.
#include <gtest/gtest.h>
#include <tensor/thread_pool.h>

#include <cstring>
#include <random>

#include "pie/model.h"
#include "pie/runner.h"
#include "default_model.h"
#include "runner_test_util.h"

namespace pie::testing {
namespace {

using Logits = std::vector<std::vector<float>>;  // [position][n_vocab]

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The probe's logits at every position (runner_test_util.h's run_probe) over a KV cache of its own.
Logits probe_logits(ModelRunner& runner, const std::vector<std::int32_t>& tokens, std::int32_t chunk, bool crowd) {
  KvCache kv = make_kv(runner, 256);
  return run_probe(runner, kv, tokens, chunk, crowd);
}

void check_model(const std::string& name) {
  const Golden g = load_golden(name);
  std::vector<std::int32_t> tokens = g.prompt;
  tokens.insert(tokens.end(), g.greedy.begin(), g.greedy.end());  // 96 tokens: past mistral's window
  tensor::ThreadPool pool(3);
  for (tensor::ThreadPool* p : {static_cast<tensor::ThreadPool*>(nullptr), &pool}) {
    ModelRunner runner(load_hf_model(test_model_dir(name)), p);
    const Logits alone = probe_logits(runner, tokens, static_cast<std::int32_t>(tokens.size()), false);
    ASSERT_EQ(alone.size(), tokens.size());
    for (std::int32_t chunk : {1, 7, 16, 33}) {
      for (bool crowd : {false, true}) {
        if (chunk == 16 && !crowd) continue;
        const Logits got = probe_logits(runner, tokens, chunk, crowd);
        ASSERT_EQ(got.size(), alone.size());
        for (std::size_t pos = 0; pos < alone.size(); ++pos) {
          ASSERT_TRUE(same_bits(got[pos], alone[pos]))
              << name << ": position " << pos << " differs with chunks of " << chunk
              << (crowd ? " among 16 other sequences" : " alone") << (p ? " on a pool" : "");
        }
      }
    }
  }
}

// Speculative decoding's rollback: a sequence that computes a wrong tail, truncates it from the KV cache
// and computes other tokens instead gives bit-identical logits to one that computed those tokens in the
// first place; and the sequence it was forked from, which holds the page the truncated one now ends in,
// reads its own K/V there, untouched by the other's writes (the truncation copied the page).
void check_truncation(const std::string& name) {
  const Golden g = load_golden(name);
  std::vector<std::int32_t> tokens = g.prompt;
  tokens.insert(tokens.end(), g.greedy.begin(), g.greedy.end());
  const auto n = static_cast<std::int32_t>(tokens.size());
  std::vector<std::int32_t> other = tokens;  // b's continuation after position 60
  for (std::size_t i = 60; i < tokens.size(); ++i) other[i] = (tokens[i] + 13) % 256;
  ModelRunner runner(load_hf_model(test_model_dir(name)), nullptr);
  const Logits alone_a = probe_logits(runner, tokens, n, false);
  const Logits alone_b = probe_logits(runner, other, n, false);

  KvCache kv = make_kv(runner, 64);
  Seq a;
  a.id = kv.create();
  a.tokens = tokens;
  run_step(runner, kv, {{&a, 64}});  // four full pages
  kv.commit(a.id, a.tokens, a.n_cached);
  Seq b = a;
  b.id = kv.fork(a.id);
  ASSERT_GE(b.id, 0);
  // b computes 8 wrong tokens, then drops them and 4 of a's: it now ends inside a page a holds too.
  for (std::size_t i = 64; i < 72; ++i) b.tokens[i] = (tokens[i] + 7) % 256;
  run_step(runner, kv, {{&b, 8}});
  kv.commit(b.id, b.tokens, b.n_cached);
  ASSERT_TRUE(kv.truncate(b.id, 60));
  b.n_cached = 60;
  b.tokens = other;
  const auto rest_b = run_step(runner, kv, {{&b, n - 60}});
  const auto rest_a = run_step(runner, kv, {{&a, n - 64}});
  for (std::int32_t pos = 60; pos < n; ++pos) {
    ASSERT_TRUE(same_bits(rest_b[0][static_cast<std::size_t>(pos - 60)], alone_b[static_cast<std::size_t>(pos)]))
        << name << ": the truncated sequence differs at position " << pos;
    if (pos >= 64) {
      ASSERT_TRUE(same_bits(rest_a[0][static_cast<std::size_t>(pos - 64)], alone_a[static_cast<std::size_t>(pos)]))
          << name << ": the sequence forked from differs at position " << pos;
    }
  }
}

TEST(RunnerInvarianceTest, TruncatedTailRecomputesIdentically) {
  check_truncation("llama");
  check_truncation("qwen3");
}

// The real default model (Q4_1 matrices, a Q8_0 output, 576-wide rows): a token's logits are the same bits
// whether it runs as a decode row, inside a prefill chunk, or among a crowd.
TEST(RunnerInvarianceTest, DefaultModelQuantized) {
  ORCHARD_REQUIRE_DEFAULT_MODEL();
  tensor::ThreadPool pool(2);
  ModelRunner runner(load_model(orchard::testing::default_model_path()), &pool);
  std::vector<std::int32_t> tokens;
  std::mt19937 rng(3);
  for (int i = 0; i < 70; ++i) tokens.push_back(static_cast<std::int32_t>(rng() % 49152));
  const Logits alone = probe_logits(runner, tokens, static_cast<std::int32_t>(tokens.size()), false);
  for (std::int32_t chunk : {1, 2, 4, 7, 33}) {
    for (bool crowd : {false, true}) {
      const Logits got = probe_logits(runner, tokens, chunk, crowd);
      ASSERT_EQ(got.size(), alone.size());
      for (std::size_t pos = 0; pos < alone.size(); ++pos) {
        ASSERT_TRUE(same_bits(got[pos], alone[pos]))
            << "position " << pos << " differs with chunks of " << chunk << (crowd ? " in a crowd" : " alone");
      }
    }
  }
}

TEST(RunnerInvarianceTest, Llama) { check_model("llama"); }      // generic attention kernel (head dim 12)
TEST(RunnerInvarianceTest, Mistral) { check_model("mistral"); }  // sliding window
TEST(RunnerInvarianceTest, Qwen3) { check_model("qwen3"); }      // SIMD attention kernel (head dim 64)

}  // namespace
}  // namespace pie::testing
