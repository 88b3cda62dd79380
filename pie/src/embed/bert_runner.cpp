// BERT's encoder (as transformers' BertModel): embeddings = LayerNorm(word + position + token type
// 0); each layer: x = LayerNorm(x + Attention(x) Wo + bo), x = LayerNorm(x + GELU(x Wup + bup)
// Wdown + bdown) with bidirectional attention inside each input. Inputs are packed row after row
// with no padding, so a batch costs what its tokens cost and an input's vector does not depend on
// the others.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "embed/encoder_runner.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "pie/error.h"
#include "tensor/thread_pool.h"

namespace pie {
namespace {

void require(const Weight& w, const std::string& name, std::int64_t n_out, std::int64_t n_in) {
  const bool matrix = n_out > 0;
  const bool ok = !w.empty() &&
                  (matrix ? (w.rank() == 2 && w.dim(0) == n_out && w.dim(1) == n_in)
                          : (w.rank() == 1 && w.dim(0) == n_in && w.dtype() == tensor::DType::f32));
  if (!ok) {
    const std::string want =
        matrix ? fmt::format("[{}, {}]", n_out, n_in) : fmt::format("f32 [{}]", n_in);
    const std::string got = w.empty() ? std::string("absent") : w.shape().to_string();
    throw ModelError(fmt::format("[bert] weight {}: expected {}, got {}", name, want, got));
  }
}

const float* f32(const Weight& w) { return reinterpret_cast<const float*>(w.data()); }

kernels::MatmulParams params_of(const Weight& w) {
  kernels::MatmulParams p;
  p.w_type = w.dtype();
  p.w = w.data();
  p.w_row_bytes = row_bytes(w);
  p.n_out = n_out(w);
  p.n_in = n_in(w);
  return p;
}

// q, k and v as one [3 d, d] matrix (one product, one parallel region) in f32, and their biases.
kernels::PackedMatrix pack_qkv(const EncoderLayerWeights& l, std::int64_t d) {
  std::vector<float> w(static_cast<std::size_t>(3 * d * d));
  std::int64_t row = 0;
  for (const Weight* m : {&l.wq, &l.wk, &l.wv}) {
    const kernels::MatmulParams p = params_of(*m);
    for (std::int64_t r = 0; r < d; ++r, ++row) {
      kernels::dequantize_row(p.w_type, static_cast<const std::byte*>(p.w) + r * p.w_row_bytes, w.data() + row * d, d);
    }
  }
  return kernels::PackedMatrix::pack({tensor::DType::f32, w.data(), 0, 3 * d, d});
}

class BertRunner final : public EncoderRunner {
 public:
  BertRunner(const EmbeddingModel& model, tensor::ThreadPool* pool)
      : c_(*model.encoder), w_(model.encoder_weights), pool_(pool) {
    const std::int64_t d = c_.n_embd;
    if (c_.n_head <= 0 || d % c_.n_head != 0) {
      throw ModelError(
          fmt::format("[bert] {} heads do not divide the hidden size {}", c_.n_head, d));
    }
    require(w_.token_embd, "token_embd", c_.n_vocab, d);
    require(w_.position_embd, "position_embd", c_.n_positions, d);
    if (c_.n_token_types > 0) require(w_.token_type_embd, "token_types", c_.n_token_types, d);
    require(w_.embd_norm, "token_embd_norm.weight", 0, d);
    require(w_.embd_norm_b, "token_embd_norm.bias", 0, d);
    if (static_cast<std::int32_t>(w_.layers.size()) != c_.n_layer) {
      throw ModelError(
          fmt::format("[bert] {} layers of weights for {} layers", w_.layers.size(), c_.n_layer));
    }
    for (std::int32_t i = 0; i < c_.n_layer; ++i) {
      const EncoderLayerWeights& l = w_.layers[static_cast<std::size_t>(i)];
      const std::string p = fmt::format("blk.{}.", i);
      require(l.wq, p + "attn_q.weight", d, d);
      require(l.wk, p + "attn_k.weight", d, d);
      require(l.wv, p + "attn_v.weight", d, d);
      require(l.wo, p + "attn_output.weight", d, d);
      require(l.bq, p + "attn_q.bias", 0, d);
      require(l.bk, p + "attn_k.bias", 0, d);
      require(l.bv, p + "attn_v.bias", 0, d);
      require(l.bo, p + "attn_output.bias", 0, d);
      require(l.attn_norm, p + "attn_output_norm.weight", 0, d);
      require(l.attn_norm_b, p + "attn_output_norm.bias", 0, d);
      require(l.w_up, p + "ffn_up.weight", c_.n_ff, d);
      require(l.b_up, p + "ffn_up.bias", 0, c_.n_ff);
      require(l.w_down, p + "ffn_down.weight", d, c_.n_ff);
      require(l.b_down, p + "ffn_down.bias", 0, d);
      require(l.ffn_norm, p + "layer_output_norm.weight", 0, d);
      require(l.ffn_norm_b, p + "layer_output_norm.bias", 0, d);
    }
    // The products run on f32 panels packed once (kernels/gemm.h): a batch is hundreds of tokens.
    for (const EncoderLayerWeights& l : w_.layers) {
      PackedLayer& p = packed_.emplace_back();
      p.qkv = pack_qkv(l, d);
      p.qkv_bias.reserve(static_cast<std::size_t>(3 * d));
      for (const Weight* b : {&l.bq, &l.bk, &l.bv}) p.qkv_bias.insert(p.qkv_bias.end(), f32(*b), f32(*b) + d);
      p.wo = kernels::PackedMatrix::pack(params_of(l.wo));
      p.w_up = kernels::PackedMatrix::pack(params_of(l.w_up));
      p.w_down = kernels::PackedMatrix::pack(params_of(l.w_down));
    }
  }

  std::int64_t token_budget() const override { return 4096; }

  void hidden_states(std::span<const std::int32_t> tokens, std::span<const std::int32_t> seq_indptr,
                     float* out) override {
    const std::int64_t n = static_cast<std::int64_t>(tokens.size());
    const std::int64_t d = c_.n_embd;
    const std::int64_t ff = c_.n_ff;
    if (n == 0) return;
    qkv_.resize(static_cast<std::size_t>(n * 3 * d));
    attn_.resize(static_cast<std::size_t>(n * d));
    tmp_.resize(attn_.size());
    h_.resize(static_cast<std::size_t>(n * ff));
    float* x = out;  // [n, d]: the residual stream, written in place

    embed(tokens, seq_indptr, x);
    using kernels::GemmActivation;
    for (std::size_t i = 0; i < w_.layers.size(); ++i) {
      const EncoderLayerWeights& l = w_.layers[i];
      const PackedLayer& p = packed_[i];
      kernels::gemm(p.qkv, x, n, qkv_.data(), {p.qkv_bias.data(), GemmActivation::none}, pool_);
      attention(seq_indptr);
      kernels::gemm(p.wo, attn_.data(), n, tmp_.data(), {f32(l.bo), GemmActivation::none}, pool_);
      residual_norm(x, tmp_.data(), n, l.attn_norm, l.attn_norm_b);

      kernels::gemm(p.w_up, x, n, h_.data(), {f32(l.b_up), GemmActivation::gelu_erf}, pool_);
      kernels::gemm(p.w_down, h_.data(), n, tmp_.data(), {f32(l.b_down), GemmActivation::none}, pool_);
      residual_norm(x, tmp_.data(), n, l.ffn_norm, l.ffn_norm_b);
    }
  }

 private:
  void embed(std::span<const std::int32_t> tokens, std::span<const std::int32_t> seq_indptr,
             float* x) {
    const std::int64_t n = static_cast<std::int64_t>(tokens.size());
    const std::int64_t d = c_.n_embd;
    auto table = [&](const Weight& w) {
      return kernels::EmbeddingParams{w.dtype(), w.data(), n_out(w), n_in(w)};
    };
    kernels::embedding(table(w_.token_embd), tokens.data(), n, x);
    std::vector<std::int32_t> positions(static_cast<std::size_t>(n));
    for (std::size_t s = 0; s + 1 < seq_indptr.size(); ++s) {
      for (std::int32_t t = seq_indptr[s]; t < seq_indptr[s + 1]; ++t) {
        positions[static_cast<std::size_t>(t)] = t - seq_indptr[s];
      }
    }
    kernels::embedding(table(w_.position_embd), positions.data(), n, tmp_.data());
    kernels::add({n * d}, x, tmp_.data(), x);
    if (c_.n_token_types > 0) {
      // Every input is one segment: token type 0.
      std::vector<float> type0(static_cast<std::size_t>(d));
      const std::int32_t zero = 0;
      kernels::embedding(table(w_.token_type_embd), &zero, 1, type0.data());
      for (std::int64_t t = 0; t < n; ++t) kernels::add({d}, x + t * d, type0.data(), x + t * d);
    }
    kernels::layer_norm({n, d, c_.norm_eps}, x, f32(w_.embd_norm), f32(w_.embd_norm_b), x);
  }

  // x = LayerNorm(x + y), rows in parallel.
  void residual_norm(float* x, const float* y, std::int64_t n, const Weight& w, const Weight& b) {
    const std::int64_t d = c_.n_embd;
    auto rows = [&](std::int64_t begin, std::int64_t end) {
      kernels::add_layer_norm({end - begin, d, c_.norm_eps}, x + begin * d, y + begin * d, f32(w), f32(b),
                              x + begin * d);
    };
    if (pool_ != nullptr) {
      pool_->parallel_for(n, rows, 16);
    } else {
      rows(0, n);
    }
  }

  // attn_ = softmax(q k^T / sqrt(head_dim)) v per input and head, over the input's own tokens.
  void attention(std::span<const std::int32_t> seq_indptr) {
    const std::int64_t d = c_.n_embd, hd = d / c_.n_head;
    const kernels::BidirectionalAttentionParams p{
        c_.n_head, hd, 3 * d, 3 * d, 3 * d, d, 1.0f / std::sqrt(static_cast<float>(hd))};
    const float* q = qkv_.data();
    kernels::bidirectional_attention(p, q, q + d, q + 2 * d, seq_indptr, attn_.data(), pool_);
  }

  struct PackedLayer {
    kernels::PackedMatrix qkv, wo, w_up, w_down;
    std::vector<float> qkv_bias;  // [3 n_embd]: q's, k's, v's
  };

  const EncoderConfig& c_;
  const EncoderWeights& w_;
  tensor::ThreadPool* pool_;
  std::vector<PackedLayer> packed_;
  std::vector<float> qkv_;           // [n, 3 n_embd]: each token's q, k, v side by side
  std::vector<float> attn_, tmp_, h_;  // [n, n_embd] each; h_ [n, n_ff]
};

}  // namespace

std::unique_ptr<EncoderRunner> make_bert_runner(const EmbeddingModel& model,
                                                tensor::ThreadPool* pool) {
  if (!model.encoder) throw ModelError("[bert] the model is not an encoder");
  return std::make_unique<BertRunner>(model, pool);
}

}  // namespace pie
