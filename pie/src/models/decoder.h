// The pieces decoder-only architectures are built from, over the backend's operations: the token
// embedding, a pre-norm attention block (RMSNorm, q/k/v projections with optional biases and per-head
// q/k norms, RoPE, paged attention, the output projection, the residual add), a
// pre-norm SwiGLU feed-forward block, and the output head (final norm, logits of the wanted rows, optional
// soft-capping). An architecture's file (llama.cpp, qwen3.cpp, ...) calls them in its order.
#pragma once

#include <cstdint>
#include <span>

#include "models/architecture.h"

namespace pie::models {

// What an architecture's weights must hold (check_decoder_weights).
struct DecoderShape {
  bool qkv_bias = false;  // bq, bk, bv (Qwen2)
  bool qk_norm = false;   // q_norm, k_norm per head (Qwen3)
};

// Throws ModelError naming the first weight that is missing, misshapen or of a type the kernels cannot
// multiply, and on a layer count or RoPE setting the decoder cannot run.
void check_decoder_weights(const Model& model, const DecoderShape& shape);

// One forward pass of a decoder: the residual stream and the scratch activations of the step.
class Decoder {
 public:
  explicit Decoder(const ForwardContext& context);

  // The residual stream from the token embeddings.
  void embed();
  // x += o_proj(attention(rope(q), rope(k), v)) of norm(x), as the model's config says: q/k/v biases
  // when the layer has them, per-head q/k norms (qk_norm), the sliding window.
  void attention_block(std::int32_t layer);
  // x += down(silu(gate(norm(x))) * up(norm(x))).
  // Both blocks leave their add to x pending: the next norm (a block's or the output head's) does it.
  void swiglu_block(std::int32_t layer);
  // The logits of the wanted rows: norm(x[rows]) output^T, soft-capped when the config says so.
  void output();

 private:
  // out = norm(x) with `weight`, after adding the residual the last block left pending (one pass where
  // the backend fuses them).
  void norm(const Weight& weight, const Rows& out);
  // Whether rows are 0, 1, ..., n_tokens - 1.
  bool every_row_in_order(std::span<const std::int32_t> rows) const;

  const ForwardContext& f_;
  const ModelConfig& c_;
  std::int64_t n_tokens_;
  Rows x_, xn_;  // [n_tokens, n_embd]: the residual stream, its norm
  // A block's output not yet added to x_: the next norm adds it (Backend::add_rms_norm); empty: none.
  Rows residual_;
};

// The Llama family's forward pass (Llama, Mistral, Qwen2 and Qwen3 share it; their weights and
// configs differ): embed, then per layer the attention and SwiGLU blocks, then the output head.
void forward_llama_blocks(const ForwardContext& context);

}  // namespace pie::models
