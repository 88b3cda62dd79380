// The random-weight model (orchard-random): a small Llama (4 layers, n_embd 256, 4 query heads of 64 over
// 2 key/value heads, SwiGLU 768) with RANDOM weights drawn from a fixed seed, on the byte-level BPE of
// random_tokenizer.cpp. It knows no language; it exists so that constrained generation, the server and the
// unit tests run anywhere without a model file. Built once, at first use (about 12 MB of f32).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "random_tokenizer.h"
#include "pie/engine.h"

namespace pie {

namespace {

constexpr std::uint64_t kSeed = 0x6f7263686172640aULL;  // "orchard\n"

// splitmix64 -> uniform (0, 1) -> Box-Muller: the same weights on every platform with IEEE doubles.
class NormalStream {
 public:
  explicit NormalStream(std::uint64_t seed) : state_(seed) {}
  float next(float stddev) {
    if (has_spare_) {
      has_spare_ = false;
      return static_cast<float>(spare_ * stddev);
    }
    const double u1 = uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2.0 * M_PI * u2) * stddev);
  }

 private:
  double uniform() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (static_cast<double>(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
  std::uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

std::shared_ptr<const Model> build_random_model() {
  const std::string json = detail::random_tokenizer_json();
  auto tokenizer = std::make_shared<const tokenizers::Tokenizer>(tokenizers::Tokenizer::parse(
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(json.data()), json.size()),
      "default-model tokenizer.json"));

  auto model = std::make_shared<Model>();
  model->name = "orchard-random";
  model->tokenizer = tokenizer;
  model->chat_template = detail::random_chat_template();
  ModelConfig& c = model->config;
  c.arch = Architecture::llama;
  c.n_vocab = static_cast<std::int32_t>(tokenizer->vocab_size());
  c.n_embd = 256;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 64;
  c.n_ff = 768;
  c.context_length = 2048;
  c.norm_eps = 1e-5f;
  c.rope.head_dim = 64;
  c.rope.rotary_dim = 64;
  c.rope.theta = 10000.0;
  c.rope.layout = pal::RopeLayout::neox;
  c.tied_embeddings = true;

  // One buffer for every tensor; views into it.
  const std::int64_t e = c.n_embd, q = c.n_head * c.head_dim, kv = c.n_kv_head * c.head_dim, ff = c.n_ff;
  const std::int64_t per_layer = 2 * e + e * q + 2 * e * kv + q * e + 3 * e * ff;
  auto buffer = std::make_shared<std::vector<float>>(
      static_cast<std::size_t>(c.n_vocab * e + e + c.n_layer * per_layer));
  float* cursor = buffer->data();
  NormalStream rng(kSeed);
  // Matrices [n_out][n_in] with stddev 1/sqrt(n_in) keep activations near unit scale; the embedding's
  // scale (tied to the output) sets the logits' spread, about 2: peaked enough to be non-uniform, flat
  // enough that sampling explores.
  auto matrix = [&](std::int64_t n_out, std::int64_t n_in, float stddev) {
    const Weight w = weight_view(cursor, sizeof(float) * n_out * n_in, tensor::DType::f32, n_out, n_in);
    for (std::int64_t i = 0; i < n_out * n_in; ++i) *cursor++ = rng.next(stddev);
    return w;
  };
  auto ones = [&](std::int64_t n) {
    const Weight w = weight_view(cursor, sizeof(float) * n, tensor::DType::f32, 0, n);
    for (std::int64_t i = 0; i < n; ++i) *cursor++ = 1.0f;
    return w;
  };
  const auto inv_sqrt = [](std::int64_t n) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))); };
  model->weights.token_embd = matrix(c.n_vocab, e, 2.0f * inv_sqrt(e));
  model->weights.output = model->weights.token_embd;
  model->weights.output_norm = ones(e);
  for (std::int32_t l = 0; l < c.n_layer; ++l) {
    LayerWeights lw;
    lw.attn_norm = ones(e);
    lw.wq = matrix(q, e, inv_sqrt(e));
    lw.wk = matrix(kv, e, inv_sqrt(e));
    lw.wv = matrix(kv, e, inv_sqrt(e));
    lw.wo = matrix(e, q, inv_sqrt(q));
    lw.ffn_norm = ones(e);
    lw.w_gate = matrix(ff, e, inv_sqrt(e));
    lw.w_up = matrix(ff, e, inv_sqrt(e));
    lw.w_down = matrix(e, ff, inv_sqrt(ff));
    model->weights.layers.push_back(lw);
  }
  model->storage.push_back(buffer);
  return model;
}

}  // namespace

std::shared_ptr<const Model> random_model() {
  static const std::shared_ptr<const Model> model = build_random_model();
  return model;
}

}  // namespace pie
