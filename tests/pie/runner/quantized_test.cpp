// Quantized weights: a model whose matrices are quantized to type T runs, and its logits stay close to its
// f32 twin (the same quantized values dequantized to f32: the only difference left is the activations'
// conversion to q8_0 / q8_K, measured at 2-3e-2 relative over two random layers, so 5e-2 is allowed; a
// misread block is off by O(1)), and stay batch invariant (chunked prefill gives the same bits). The _0/_1
// types run on the qwen2 test model (rows of 64 and 96); the K types (256-element super-blocks) on a random
// 256-wide model.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/quant.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "runner_test_util.h"

namespace pie::testing {
namespace {

using tensor::DType;

// A copy of `src` with every matrix quantized to `type` (dequantized back to f32 when `twin`).
std::shared_ptr<const Model> quantized(const Model& src, DType type, bool twin) {
  auto m = std::make_shared<Model>(src);
  auto convert = [&](Weight& w) {
    const auto* f = w.data_as<const float>();
    const std::size_t qrow = tensor::row_bytes(type, pie::n_in(w));
    auto q = std::make_shared<std::vector<std::uint8_t>>(qrow * static_cast<std::size_t>(pie::n_out(w)));
    auto back = std::make_shared<std::vector<float>>(static_cast<std::size_t>(pie::n_out(w) * pie::n_in(w)));
    for (std::int64_t r = 0; r < pie::n_out(w); ++r) {
      std::uint8_t* qr = q->data() + static_cast<std::size_t>(r) * qrow;
      kernels::quantize_row_ref(type, f + r * pie::n_in(w), qr, pie::n_in(w));
      kernels::dequantize_row_ref(type, qr, back->data() + r * pie::n_in(w), pie::n_in(w));
    }
    if (twin) {
      w = weight_view(back->data(), back->size() * sizeof(float), DType::f32, pie::n_out(w), pie::n_in(w));
      m->storage.push_back(back);
    } else {
      w = weight_view(q->data(), q->size(), type, pie::n_out(w), pie::n_in(w));
      m->storage.push_back(q);
    }
  };
  const bool tied = src.weights.output.data() == src.weights.token_embd.data();
  convert(m->weights.token_embd);
  if (tied) {
    m->weights.output = m->weights.token_embd;
  } else {
    convert(m->weights.output);
  }
  for (LayerWeights& l : m->weights.layers) {
    for (Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) convert(*w);
  }
  return m;
}

// A random f32 llama: n_embd 256, 2 layers, 4 heads / 2 KV heads of 64, n_ff 512, vocab 256.
std::shared_ptr<const Model> random_wide_model() {
  auto m = std::make_shared<Model>();
  ModelConfig& c = m->config;
  c.arch = Architecture::llama;
  c.n_vocab = 256;
  c.n_embd = 256;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 64;
  c.n_ff = 512;
  c.context_length = 256;
  c.rope.head_dim = 64;
  c.rope.rotary_dim = 64;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto weight = [&](std::int64_t n_out, std::int64_t n_in, float scale, float offset) {
    auto v = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n_out * n_in));
    for (float& x : *v) x = offset + scale * dist(rng);
    m->storage.push_back(v);
    // One row is a vector ([n_in]), as the loaders give norms.
    return weight_view(v->data(), v->size() * sizeof(float), DType::f32, n_out == 1 ? 0 : n_out, n_in);
  };
  auto matrix = [&](std::int64_t n_out, std::int64_t n_in) { return weight(n_out, n_in, 1.0f / std::sqrt(float(n_in)), 0); };
  m->weights.token_embd = weight(c.n_vocab, c.n_embd, 1.0f, 0);
  m->weights.output = matrix(c.n_vocab, c.n_embd);
  m->weights.output_norm = weight(1, c.n_embd, 0.1f, 1.0f);
  for (int i = 0; i < c.n_layer; ++i) {
    LayerWeights l;
    l.attn_norm = weight(1, c.n_embd, 0.1f, 1.0f);
    l.wq = matrix(c.n_head * c.head_dim, c.n_embd);
    l.wk = matrix(c.n_kv_head * c.head_dim, c.n_embd);
    l.wv = matrix(c.n_kv_head * c.head_dim, c.n_embd);
    l.wo = matrix(c.n_embd, c.n_head * c.head_dim);
    l.ffn_norm = weight(1, c.n_embd, 0.1f, 1.0f);
    l.w_gate = matrix(c.n_ff, c.n_embd);
    l.w_up = matrix(c.n_ff, c.n_embd);
    l.w_down = matrix(c.n_embd, c.n_ff);
    m->weights.layers.push_back(l);
  }
  return m;
}

std::vector<std::vector<float>> prompt_logits(std::shared_ptr<const Model> model, const std::vector<std::int32_t>& prompt,
                                              std::int32_t chunk) {
  ModelRunner runner(std::move(model), nullptr);
  KvCache kv = make_kv(runner, 8);
  Seq s;
  s.id = kv.create();
  s.tokens = prompt;
  std::vector<std::vector<float>> out;
  while (s.n_cached < static_cast<std::int32_t>(prompt.size())) {
    const std::int32_t n = std::min<std::int32_t>(chunk, static_cast<std::int32_t>(prompt.size()) - s.n_cached);
    auto l = run_step(runner, kv, {{&s, n}});
    out.insert(out.end(), l[0].begin(), l[0].end());
  }
  return out;
}

void check(const std::shared_ptr<const Model>& f32, DType type, double tolerance) {
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 256);
  const auto q = quantized(*f32, type, false);
  const auto twin = quantized(*f32, type, true);
  const auto got = prompt_logits(q, prompt, 40);
  const auto want = prompt_logits(twin, prompt, 40);
  double worst = 0;
  for (std::size_t p = 0; p < got.size(); ++p) worst = std::max(worst, relative_error(got[p], want[p]));
  EXPECT_LE(worst, tolerance) << tensor::dtype_name(type);
  const auto chunked = prompt_logits(q, prompt, 7);
  for (std::size_t p = 0; p < got.size(); ++p) {
    ASSERT_EQ(0, std::memcmp(got[p].data(), chunked[p].data(), got[p].size() * sizeof(float)))
        << tensor::dtype_name(type) << " position " << p << ": chunked prefill differs";
  }
}

TEST(RunnerQuantizedTest, BlockTypesOnQwen2) {
  const auto qwen2 = load_hf_model(test_model_dir("qwen2"));
  for (DType t : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1}) check(qwen2, t, 5e-2);
  check(qwen2, DType::f16, 1e-5);
  check(qwen2, DType::bf16, 1e-5);
}

TEST(RunnerQuantizedTest, KTypesOnWideModel) {
  const auto wide = random_wide_model();
  for (DType t : {DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K}) check(wide, t, 5e-2);
}

}  // namespace
}  // namespace pie::testing
