// Test helpers: synthetic models with random f32 weights, and GGUF files rewritten with one change.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pie/model.h"
#include "tensor/gguf.h"

namespace model_test {

// Random f32 weights for config `c` (n_vocab rows; the tokenizer given, which must fit). Norms near 1.
inline std::shared_ptr<pie::Model> make_model(const pie::ModelConfig& c,
                                              std::shared_ptr<const tokenizers::Tokenizer> tokenizer,
                                              std::uint32_t seed = 1) {
  auto m = std::make_shared<pie::Model>();
  m->name = "synthetic";
  m->config = c;
  m->tokenizer = std::move(tokenizer);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  auto make = [&](std::int64_t n_out, std::int64_t n_in, float offset = 0.0f, float scale = 1.0f) {
    auto buf = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n_out * n_in));
    for (float& v : *buf) v = offset + scale * normal(rng);
    m->storage.push_back(buf);
    // One row is a vector ([n_in]), as the loaders give norms and biases.
    return pie::weight_view(buf->data(), buf->size() * sizeof(float), tensor::DType::f32, n_out == 1 ? 0 : n_out,
                            n_in);
  };
  const std::int64_t e = c.n_embd, hd = c.head_dim, q = c.n_head * hd, kv = c.n_kv_head * hd;
  m->weights.token_embd = make(c.n_vocab, e);
  m->weights.output_norm = make(1, e, 1.0f, 0.1f);
  m->weights.output = c.tied_embeddings ? m->weights.token_embd : make(c.n_vocab, e);
  m->weights.layers.resize(static_cast<std::size_t>(c.n_layer));
  for (pie::LayerWeights& l : m->weights.layers) {
    l.attn_norm = make(1, e, 1.0f, 0.1f);
    l.wq = make(q, e);
    l.wk = make(kv, e);
    l.wv = make(kv, e);
    l.wo = make(e, q);
    if (c.attention_bias) {
      l.bq = make(1, q);
      l.bk = make(1, kv);
      l.bv = make(1, kv);
    }
    if (c.qk_norm) {
      l.q_norm = make(1, hd, 1.0f, 0.1f);
      l.k_norm = make(1, hd, 1.0f, 0.1f);
    }
    l.ffn_norm = make(1, e, 1.0f, 0.1f);
    l.w_gate = make(c.n_ff, e);
    l.w_up = make(c.n_ff, e);
    l.w_down = make(e, c.n_ff);
  }
  return m;
}

// A llama config of the given sizes (head_dim = n_embd / n_head, NeoX RoPE as Hugging Face has it).
inline pie::ModelConfig llama_config(std::int32_t n_vocab, std::int32_t n_embd, std::int32_t n_ff, std::int32_t n_head,
                                     std::int32_t n_kv_head, std::int32_t n_layer) {
  pie::ModelConfig c;
  c.arch = pie::Architecture::llama;
  c.n_vocab = n_vocab;
  c.n_embd = n_embd;
  c.n_ff = n_ff;
  c.n_head = n_head;
  c.n_kv_head = n_kv_head;
  c.n_layer = n_layer;
  c.head_dim = n_embd / n_head;
  c.context_length = 256;
  c.norm_eps = 1e-6f;
  c.rope.head_dim = c.head_dim;
  c.rope.rotary_dim = c.head_dim;
  c.rope.theta = 500000.0;
  c.rope.layout = pal::RopeLayout::neox;
  return c;
}

// Copies GGUF `from` into a Writer, letting `edit_tensor` change each tensor (return false to drop it)
// and `edit_meta` the metadata, and writes the result to `to`.
struct TensorCopy {
  std::string name;
  std::vector<std::uint64_t> dims;
  std::uint32_t type;
  std::vector<std::uint8_t> data;
};
inline void rewrite_gguf(const std::string& from, const std::string& to,
                         const std::function<bool(TensorCopy&)>& edit_tensor,
                         const std::function<void(tensor::gguf::Writer&)>& edit_meta = {}) {
  namespace gg = tensor::gguf;
  const gg::File f = gg::File::open(from);
  gg::Writer w;
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  if (edit_meta) edit_meta(w);
  for (const gg::TensorInfo& t : f.tensors()) {
    const auto bytes = f.tensor_data(t);
    TensorCopy c{t.name, t.dims, t.type, std::vector<std::uint8_t>(bytes.begin(), bytes.end())};
    if (edit_tensor && !edit_tensor(c)) continue;
    w.add_tensor(c.name, c.dims, c.type, std::move(c.data));
  }
  w.write(to);
}

}  // namespace model_test
