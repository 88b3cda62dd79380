#include "models/decoder.h"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <utility>

#include "pal/error.h"
#include "pie/error.h"

namespace pie::models {
namespace {

// Scratch slots of the step's activations.
enum Slot : int { kX, kXn, kQ, kK, kV, kAttn, kProj, kGate, kUp, kLast };

std::string shape_of(const Weight& w) {
  return fmt::format("{} {}", w.shape().to_string(), tensor::dtype_name(w.dtype()));
}

std::string where(const char* name, std::int32_t layer) {
  return layer >= 0 ? fmt::format("layer {}: {}", layer, name) : std::string(name);
}

void require_matrix(const Weight& w, const char* name, std::int32_t layer, std::int64_t n_out, std::int64_t n_in) {
  if (!w) throw ModelError(fmt::format("[runner] {} is missing", where(name, layer)));
  if (w.rank() != 2 || w.dim(0) != n_out || w.dim(1) != n_in) {
    throw ModelError(fmt::format("[runner] {} is {}, expected [{}, {}]", where(name, layer), shape_of(w), n_out, n_in));
  }
}

void require_vector(const Weight& w, const char* name, std::int32_t layer, std::int64_t n) {
  if (!w) throw ModelError(fmt::format("[runner] {} is missing", where(name, layer)));
  if (w.dtype() != tensor::DType::f32 || w.rank() != 1 || w.numel() != n) {
    throw ModelError(
        fmt::format("[runner] {} is {}, expected f32 of {} elements", where(name, layer), shape_of(w), n));
  }
}

}  // namespace

void check_decoder_weights(const Model& model, const DecoderShape& shape) {
  const ModelConfig& c = model.config;
  c.validate();
  if (c.rope.head_dim != c.head_dim || c.head_dim % 2 != 0) {
    throw ModelError(fmt::format("[runner] RoPE head dim {} / model head dim {}: must be equal and even",
                                 c.rope.head_dim, c.head_dim));
  }
  try {
    pal::validate_rope(c.rope);
  } catch (const pal::Error& e) {
    throw ModelError(fmt::format("[runner] {}", e.what()));
  }
  if (static_cast<std::int32_t>(model.weights.layers.size()) != c.n_layer) {
    throw ModelError(fmt::format("[runner] the model has {} layers of weights, its config says {}",
                                 model.weights.layers.size(), c.n_layer));
  }
  const std::int64_t q_dim = static_cast<std::int64_t>(c.n_head) * c.head_dim;
  const std::int64_t kv_dim = static_cast<std::int64_t>(c.n_kv_head) * c.head_dim;
  require_matrix(model.weights.token_embd, "token_embd", -1, c.n_vocab, c.n_embd);
  require_matrix(model.weights.output, "output", -1, c.n_vocab, c.n_embd);
  require_vector(model.weights.output_norm, "output_norm", -1, c.n_embd);
  for (std::int32_t i = 0; i < c.n_layer; ++i) {
    const LayerWeights& l = model.weights.layers[static_cast<std::size_t>(i)];
    require_vector(l.attn_norm, "attn_norm", i, c.n_embd);
    require_matrix(l.wq, "wq", i, q_dim, c.n_embd);
    require_matrix(l.wk, "wk", i, kv_dim, c.n_embd);
    require_matrix(l.wv, "wv", i, kv_dim, c.n_embd);
    require_matrix(l.wo, "wo", i, c.n_embd, q_dim);
    if (shape.qkv_bias || c.attention_bias) {
      require_vector(l.bq, "bq", i, q_dim);
      require_vector(l.bk, "bk", i, kv_dim);
      require_vector(l.bv, "bv", i, kv_dim);
    }
    if (shape.qk_norm || c.qk_norm) {
      require_vector(l.q_norm, "q_norm", i, c.head_dim);
      require_vector(l.k_norm, "k_norm", i, c.head_dim);
    }
    require_vector(l.ffn_norm, "ffn_norm", i, c.n_embd);
    require_matrix(l.w_gate, "w_gate", i, c.n_ff, c.n_embd);
    require_matrix(l.w_up, "w_up", i, c.n_ff, c.n_embd);
    require_matrix(l.w_down, "w_down", i, c.n_embd, c.n_ff);
  }
}

Decoder::Decoder(const ForwardContext& context)
    : f_(context), c_(context.model.config), n_tokens_(static_cast<std::int64_t>(context.tokens.size())) {
  x_ = f_.backend.scratch(kX, n_tokens_, c_.n_embd);
  xn_ = f_.backend.scratch(kXn, n_tokens_, c_.n_embd);
}

void Decoder::embed() { f_.backend.embed(f_.weights.token_embd, f_.tokens, x_); }

void Decoder::attention_block(std::int32_t layer) {
  Backend& b = f_.backend;
  const LayerWeights& l = f_.weights.layers[static_cast<std::size_t>(layer)];
  const std::int64_t q_dim = static_cast<std::int64_t>(c_.n_head) * c_.head_dim;
  const std::int64_t kv_dim = static_cast<std::int64_t>(c_.n_kv_head) * c_.head_dim;
  const Rows q = b.scratch(kQ, n_tokens_, q_dim), k = b.scratch(kK, n_tokens_, kv_dim),
             v = b.scratch(kV, n_tokens_, kv_dim), attn = b.scratch(kAttn, n_tokens_, q_dim),
             proj = b.scratch(kProj, n_tokens_, c_.n_embd);
  norm(l.attn_norm, xn_);
  const std::span<const LoraGroup> lora = f_.layout.lora;
  const Projection qkv[] = {{ProjectionSite::q, layer, &l.wq, q, lora},
                            {ProjectionSite::k, layer, &l.wk, k, lora},
                            {ProjectionSite::v, layer, &l.wv, v, lora}};
  b.project(xn_, qkv);
  if (l.bq) b.add_bias(q, l.bq);
  if (l.bk) b.add_bias(k, l.bk);
  if (l.bv) b.add_bias(v, l.bv);
  if (l.q_norm) b.rms_norm(q.reshaped(c_.head_dim), l.q_norm, c_.norm_eps, q.reshaped(c_.head_dim));
  if (l.k_norm) b.rms_norm(k.reshaped(c_.head_dim), l.k_norm, c_.norm_eps, k.reshaped(c_.head_dim));
  b.rope_append(f_.layout, f_.rope, q, k, v, f_.kv, layer);
  pal::AttentionParams params;
  params.n_q_heads = c_.n_head;
  params.scale = c_.attention_scale > 0 ? c_.attention_scale : 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
  params.logit_soft_cap = c_.attn_logit_softcap;
  params.sliding_window = c_.sliding_window;
  b.attention(f_.layout, params, q, f_.kv, layer, attn);
  const Projection o[] = {{ProjectionSite::o, layer, &l.wo, proj, lora}};
  b.project(attn, o);
  residual_ = proj;
}

void Decoder::swiglu_block(std::int32_t layer) {
  Backend& b = f_.backend;
  const LayerWeights& l = f_.weights.layers[static_cast<std::size_t>(layer)];
  const Rows gate = b.scratch(kGate, n_tokens_, c_.n_ff), up = b.scratch(kUp, n_tokens_, c_.n_ff),
             proj = b.scratch(kProj, n_tokens_, c_.n_embd);
  norm(l.ffn_norm, xn_);
  const std::span<const LoraGroup> lora = f_.layout.lora;
  const Projection gate_up[] = {{ProjectionSite::gate, layer, &l.w_gate, gate, lora},
                                {ProjectionSite::up, layer, &l.w_up, up, lora}};
  b.project(xn_, gate_up);
  b.swiglu(gate, up);
  const Projection down[] = {{ProjectionSite::down, layer, &l.w_down, proj, lora}};
  b.project(gate, down);
  residual_ = proj;
}

void Decoder::norm(const Weight& weight, const Rows& out) {
  if (residual_.data != nullptr) {
    f_.backend.add_rms_norm(x_, residual_, weight, c_.norm_eps, out);
    residual_ = {};
  } else {
    f_.backend.rms_norm(x_, weight, c_.norm_eps, out);
  }
}

bool Decoder::every_row_in_order(std::span<const std::int32_t> rows) const {
  if (static_cast<std::int64_t>(rows.size()) != n_tokens_) return false;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] != static_cast<std::int32_t>(i)) return false;
  }
  return true;
}

void Decoder::output() {
  const auto n_rows = static_cast<std::int64_t>(f_.logit_rows.size());
  if (n_rows == 0) return;
  Backend& b = f_.backend;
  const Rows last = b.scratch(kLast, n_rows, c_.n_embd);
  if (every_row_in_order(f_.logit_rows)) {  // every row wanted (a decode step): no gather
    norm(f_.weights.output_norm, last);
  } else {
    if (residual_.data != nullptr) b.add(x_, std::exchange(residual_, {}));
    b.gather_rows(x_, f_.logit_rows, last);
    b.rms_norm(last, f_.weights.output_norm, c_.norm_eps, last);
  }
  const Projection head[] = {{ProjectionSite::output, -1, &f_.weights.output, f_.logits, f_.layout.lora}};
  b.project(last, head);
  if (c_.final_logit_softcap > 0) b.soft_cap(f_.logits, c_.final_logit_softcap);
}

}  // namespace pie::models
