// load_llama2c_model: a llama2.c checkpoint (karpathy/llama2.c run.c): 7 int32 (dim, hidden_dim, n_layers,
// n_heads, n_kv_heads, vocab_size (negative: a separate classifier), seq_len), then f32 weights in run.c's
// order, each matrix row-major [n_out][n_in]. Its RoPE rotates adjacent pairs, theta 10000, eps 1e-5.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "model/mapped_file.h"
#include "pie/error.h"
#include "pie/model.h"

namespace pie {

namespace {

constexpr std::size_t kHeaderBytes = 7 * sizeof(std::int32_t);
// Bounds each header field so that sizes computed from them cannot overflow 64 bits.
constexpr std::int32_t kMaxField = 1 << 24;

std::filesystem::path find_tokenizer(const std::filesystem::path& checkpoint) {
  const std::filesystem::path dir = checkpoint.has_parent_path() ? checkpoint.parent_path() : ".";
  if (std::filesystem::is_regular_file(dir / "tokenizer.bin")) return dir / "tokenizer.bin";
  std::error_code ec;
  std::filesystem::path best;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.starts_with("tok") && name.ends_with(".bin") && (best.empty() || entry.path() < best)) {
      best = entry.path();
    }
  }
  if (best.empty()) {
    throw ModelError(fmt::format("[llama2.c] {}: no tokenizer: neither tokenizer.bin nor tok*.bin is beside it "
                                 "(give one with the tokenizer option)",
                                 checkpoint.string()));
  }
  return best;
}

}  // namespace

std::shared_ptr<const Model> load_llama2c_model(const std::filesystem::path& checkpoint, const LoadOptions& options) {
  const std::string where = checkpoint.string();
  auto fail = [&](const std::string& what) { throw ModelError(fmt::format("[llama2.c] {}: {}", where, what)); };
  auto file = model_detail::MappedFile::open(checkpoint);
  if (file->size() < kHeaderBytes) {
    fail(fmt::format("{} bytes is too short for the 28-byte header", file->size()));
  }
  std::int32_t h[7];
  std::memcpy(h, file->data(), kHeaderBytes);
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    const std::int32_t v = i == 5 && h[i] < 0 && h[i] != INT32_MIN ? -h[i] : h[i];
    if (v <= 0 || v > kMaxField) fail(fmt::format("header field {} = {} is out of range [1, {}]", names[i], h[i], kMaxField));
  }
  const std::int64_t dim = h[0], hidden = h[1], n_layers = h[2], n_heads = h[3], n_kv_heads = h[4];
  const bool shared_classifier = h[5] > 0;
  const std::int64_t vocab = shared_classifier ? h[5] : -static_cast<std::int64_t>(h[5]);
  const std::int64_t seq_len = h[6];
  if (dim % n_heads != 0) fail(fmt::format("dim {} is not a multiple of n_heads {}", dim, n_heads));
  if (n_kv_heads > n_heads || n_heads % n_kv_heads != 0) {
    fail(fmt::format("n_kv_heads {} does not divide n_heads {}", n_kv_heads, n_heads));
  }
  const std::int64_t head_size = dim / n_heads;
  if (head_size % 2 != 0) fail(fmt::format("head size {} is odd (RoPE rotates pairs)", head_size));
  const std::int64_t kv_dim = head_size * n_kv_heads;

  // Element counts in run.c's memory_map_weights order.
  const std::int64_t n_floats = vocab * dim                   // token_embedding_table
                                + n_layers * dim              // rms_att_weight
                                + n_layers * dim * dim        // wq
                                + 2 * n_layers * dim * kv_dim // wk, wv
                                + n_layers * dim * dim        // wo
                                + n_layers * dim              // rms_ffn_weight
                                + 3 * n_layers * dim * hidden // w1, w2, w3
                                + dim                         // rms_final_weight
                                + seq_len * head_size         // freq_cis_real, freq_cis_imag (unused)
                                + (shared_classifier ? 0 : vocab * dim);
  const std::uint64_t want = kHeaderBytes + static_cast<std::uint64_t>(n_floats) * sizeof(float);
  if (file->size() != want) {
    fail(fmt::format("{} bytes, but the header (dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, "
                     "vocab_size {}, seq_len {}) needs exactly {}{}",
                     file->size(), h[0], h[1], h[2], h[3], h[4], h[5], h[6], want,
                     file->size() < want ? " (truncated)" : ""));
  }

  auto model = std::make_shared<Model>();
  model->path = checkpoint;
  model->name = checkpoint.stem().string();
  ModelConfig& c = model->config;
  c.arch = Architecture::llama;
  c.n_vocab = static_cast<std::int32_t>(vocab);
  c.n_embd = static_cast<std::int32_t>(dim);
  c.n_layer = static_cast<std::int32_t>(n_layers);
  c.n_head = static_cast<std::int32_t>(n_heads);
  c.n_kv_head = static_cast<std::int32_t>(n_kv_heads);
  c.head_dim = static_cast<std::int32_t>(head_size);
  c.n_ff = static_cast<std::int32_t>(hidden);
  c.context_length = static_cast<std::int32_t>(seq_len);
  c.norm_eps = 1e-5f;
  c.rope.head_dim = c.head_dim;
  c.rope.rotary_dim = c.head_dim;
  c.rope.theta = 10000.0;
  c.rope.layout = pal::RopeLayout::gptj;
  c.tied_embeddings = shared_classifier;
  try {
    c.validate();
  } catch (const ModelError& e) {
    fail(e.what());
  }

  const auto* base = reinterpret_cast<const float*>(file->data() + kHeaderBytes);
  const float* at = base;
  // Takes the next n_out * n_in floats as one tensor (n_out 0: a vector of n_in).
  auto take = [&](std::int64_t n_out, std::int64_t n_in) {
    const std::int64_t n = std::max<std::int64_t>(n_out, 1) * n_in;
    const Weight w = weight_view(at, static_cast<std::size_t>(n) * sizeof(float), tensor::DType::f32, n_out, n_in);
    at += n;
    return w;
  };
  model->weights.layers.resize(static_cast<std::size_t>(n_layers));
  auto per_layer = [&](Weight LayerWeights::*field, std::int64_t n_out, std::int64_t n_in) {
    for (LayerWeights& l : model->weights.layers) l.*field = take(n_out, n_in);
  };
  model->weights.token_embd = take(vocab, dim);
  per_layer(&LayerWeights::attn_norm, 0, dim);
  per_layer(&LayerWeights::wq, dim, dim);
  per_layer(&LayerWeights::wk, kv_dim, dim);
  per_layer(&LayerWeights::wv, kv_dim, dim);
  per_layer(&LayerWeights::wo, dim, dim);
  per_layer(&LayerWeights::ffn_norm, 0, dim);
  per_layer(&LayerWeights::w_gate, hidden, dim);  // w1
  per_layer(&LayerWeights::w_down, dim, hidden);  // w2
  per_layer(&LayerWeights::w_up, hidden, dim);    // w3
  model->weights.output_norm = take(0, dim);
  at += seq_len * head_size;  // freq_cis_real and freq_cis_imag: RoPE is computed, not read
  model->weights.output = shared_classifier ? model->weights.token_embd : take(vocab, dim);
  model->storage.push_back(file);

  const std::filesystem::path tok_path = options.tokenizer_path ? *options.tokenizer_path : find_tokenizer(checkpoint);
  try {
    model->tokenizer = std::make_shared<const tokenizers::Tokenizer>(tokenizers::Tokenizer::load(tok_path));
  } catch (const tokenizers::Error& e) {
    throw ModelError(fmt::format("[llama2.c] {}: tokenizer: {}", where, e.what()));
  }
  if (model->tokenizer->vocab_size() > static_cast<std::size_t>(vocab)) {
    fail(fmt::format("the tokenizer {} has {} tokens, more than the model's vocab_size {}", tok_path.string(),
                     model->tokenizer->vocab_size(), vocab));
  }
  if (options.progress) options.progress(file->size(), file->size());
  return model;
}

}  // namespace pie
