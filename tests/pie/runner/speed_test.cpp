// Throughput of the forward pass on a synthetic TinyLlama-1.1B-shaped model (random weights; 22 layers,
// n_embd 2048, 32 heads / 4 KV heads of 64, n_ff 5632, vocab 32000) in q8_0 (or f16 with
// ORCHARD_SPEED_DTYPE=f16). Not a correctness test, and slow: disabled unless asked for, e.g.
//   flock /tmp/orchard-cpu-bench.lock build-runner/tests/pie/runner/pie_runner_speed_test
//     --gtest_also_run_disabled_tests   (one command line)
// It prints prefill (one 512-token prompt), single-sequence decode at context 512, and 16-sequence decode
// throughput on all cores.
#include <gtest/gtest.h>
#include <tensor/thread_pool.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "kernels/quant.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "runner_test_util.h"

namespace pie::testing {
namespace {

std::shared_ptr<const Model> synthetic_model(tensor::DType type) {
  auto m = std::make_shared<Model>();
  ModelConfig& c = m->config;
  c.arch = Architecture::llama;
  c.n_vocab = 32000;
  c.n_embd = 2048;
  c.n_layer = 22;
  c.n_head = 32;
  c.n_kv_head = 4;
  c.head_dim = 64;
  c.n_ff = 5632;
  c.context_length = 2048;
  c.rope.head_dim = 64;
  c.rope.rotary_dim = 64;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row;
  auto matrix = [&](std::int64_t n_out, std::int64_t n_in) {
    auto bytes = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(n_out) * tensor::row_bytes(type, n_in));
    row.resize(static_cast<std::size_t>(n_in));
    const float scale = 1.0f / std::sqrt(static_cast<float>(n_in));
    for (std::int64_t r = 0; r < n_out; ++r) {
      for (float& x : row) x = dist(rng) * scale;
      kernels::quantize_row(type, row.data(), bytes->data() + static_cast<std::size_t>(r) * tensor::row_bytes(type, n_in), n_in);
    }
    m->storage.push_back(bytes);
    return weight_view(bytes->data(), bytes->size(), type, n_out, n_in);
  };
  auto ones = [&](std::int64_t n) {
    auto v = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n), 1.0f);
    m->storage.push_back(v);
    return weight_view(v->data(), v->size() * sizeof(float), tensor::DType::f32, 0, n);
  };
  m->weights.token_embd = matrix(c.n_vocab, c.n_embd);
  m->weights.output = matrix(c.n_vocab, c.n_embd);
  m->weights.output_norm = ones(c.n_embd);
  for (int i = 0; i < c.n_layer; ++i) {
    LayerWeights l;
    l.attn_norm = ones(c.n_embd);
    l.wq = matrix(c.n_head * c.head_dim, c.n_embd);
    l.wk = matrix(c.n_kv_head * c.head_dim, c.n_embd);
    l.wv = matrix(c.n_kv_head * c.head_dim, c.n_embd);
    l.wo = matrix(c.n_embd, c.n_head * c.head_dim);
    l.ffn_norm = ones(c.n_embd);
    l.w_gate = matrix(c.n_ff, c.n_embd);
    l.w_up = matrix(c.n_ff, c.n_embd);
    l.w_down = matrix(c.n_embd, c.n_ff);
    m->weights.layers.push_back(l);
  }
  return m;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(RunnerSpeedTest, DISABLED_TinyLlamaShape) {
  const char* env = std::getenv("ORCHARD_SPEED_DTYPE");
  const tensor::DType type = env != nullptr ? tensor::dtype_from_name(env) : tensor::DType::q8_0;
  const int n_threads = static_cast<int>(std::thread::hardware_concurrency());
  tensor::ThreadPool pool(n_threads);
  ModelRunner runner(synthetic_model(type), &pool);
  KvCache kv = make_kv(runner, 16 * 40 + 64);
  std::mt19937 rng(2);
  auto random_tokens = [&](int n) {
    std::vector<std::int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<std::int32_t>(rng() % 32000));
    return t;
  };

  Seq s;
  s.id = kv.create();
  s.tokens = random_tokens(512 + 32);
  run_step(runner, kv, {{&s, 16}});  // warm-up (page faults, scratch growth)
  auto t0 = std::chrono::steady_clock::now();
  run_step(runner, kv, {{&s, 496}});
  const double prefill = 496 / seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 32; ++i) run_step(runner, kv, {{&s, 1}});
  const double decode1 = 32 / seconds_since(t0);
  kv.release(s.id);

  std::vector<Seq> seqs(16);
  std::vector<std::pair<Seq*, std::int32_t>> work;
  for (Seq& q : seqs) {
    q.id = kv.create();
    q.tokens = random_tokens(128 + 16);
    work.emplace_back(&q, 128);
  }
  run_step(runner, kv, work);
  for (auto& w : work) w.second = 1;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 16; ++i) run_step(runner, kv, work);
  const double decode16 = 16 * 16 / seconds_since(t0);
  std::printf("synthetic TinyLlama-1.1B shape, %s weights, %d threads: prefill 496 tokens at context 16: %.1f tok/s; "
              "decode 1 sequence at context 512: %.2f tok/s; decode 16 sequences at context 128: %.2f tok/s\n",
              std::string(tensor::dtype_name(type)).c_str(), n_threads, prefill, decode1, decode16);
}

}  // namespace
}  // namespace pie::testing
