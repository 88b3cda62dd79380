// write_gguf_embedding_model: a BERT encoder as llama.cpp's bert GGUF (the names load_bert_gguf reads).
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "kernels/quant.h"

#include "pie/embedding_convert.h"
#include "pie/error.h"
#include "tensor/error.h"
#include "tensor/gguf.h"
#include "tensor/half.h"
#include "tokenizers/error.h"
#include "tokenizers/gguf_export.h"

namespace pie {
namespace {

namespace gg = tensor::gguf;
using tensor::DType;

// A tensor's values as f32 (any type the loader keeps: f32, f16, bf16, or a quantized one).
std::vector<float> as_f32(const Weight& t) {
  const std::int64_t n_in = t.dim(t.rank() - 1);
  const std::int64_t rows = t.numel() / n_in;
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  const std::size_t row_bytes = tensor::row_bytes(t.dtype(), n_in);
  for (std::int64_t r = 0; r < rows; ++r) {
    kernels::dequantize_row_ref(t.dtype(), t.data() + static_cast<std::size_t>(r) * row_bytes,
                                out.data() + r * n_in, n_in);
  }
  return out;
}

std::vector<std::uint8_t> bytes_of(const float* values, std::size_t n, DType type) {
  if (type == DType::f32) {
    const auto* b = reinterpret_cast<const std::uint8_t*>(values);
    return std::vector<std::uint8_t>(b, b + n * sizeof(float));
  }
  std::vector<std::uint8_t> out(n * sizeof(std::uint16_t));
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t h = tensor::f32_to_f16(values[i]);
    std::memcpy(out.data() + i * sizeof h, &h, sizeof h);
  }
  return out;
}

// llama.cpp's LLAMA_POOLING_TYPE.
std::uint32_t pooling_type(Pooling p) {
  switch (p) {
    case Pooling::mean: return 1;
    case Pooling::cls: return 2;
    case Pooling::last: return 3;
  }
  return 1;
}

}  // namespace

void write_gguf_embedding_model(const EmbeddingModel& model, const std::filesystem::path& path,
                                const ConvertOptions& options) {
  auto fail = [&](const std::string& what) {
    return ModelError(fmt::format("[convert] {}: {}", path.string(), what));
  };
  if (!model.encoder) {
    throw fail(fmt::format("'{}' is a decoder used as an embedder; only encoders are written as bert GGUF",
                           model.name));
  }
  if (options.type != DType::f16 && options.type != DType::f32) {
    throw fail(fmt::format("an encoder's matrices are written as f16 or f32, not {}",
                           tensor::dtype_name(options.type)));
  }
  if (!model.tokenizer) throw fail("the model has no tokenizer (GGUF files carry one)");
  const EncoderConfig& c = *model.encoder;
  const EncoderWeights& e = model.encoder_weights;
  if (static_cast<std::int32_t>(e.layers.size()) != c.n_layer) {
    throw fail(fmt::format("{} layers of weights for block_count {}", e.layers.size(), c.n_layer));
  }
  if (!model.normalize && options.notice) {
    options.notice("the model does not normalize its embeddings; a bert GGUF always does (llama.cpp's "
                   "embedding example), so vectors read from the file are L2-normalized");
  }
  gg::Writer w;
  try {
    w.set("general.architecture", gg::make_string("bert"));
    w.set("general.name", gg::make_string(model.name));
    w.set("general.file_type", gg::make_uint32(options.type == DType::f16 ? 1 : 0));  // llama_ftype
    w.set("bert.context_length", gg::make_uint32(static_cast<std::uint32_t>(c.n_positions)));
    w.set("bert.embedding_length", gg::make_uint32(static_cast<std::uint32_t>(c.n_embd)));
    w.set("bert.feed_forward_length", gg::make_uint32(static_cast<std::uint32_t>(c.n_ff)));
    w.set("bert.block_count", gg::make_uint32(static_cast<std::uint32_t>(c.n_layer)));
    w.set("bert.attention.head_count", gg::make_uint32(static_cast<std::uint32_t>(c.n_head)));
    w.set("bert.attention.layer_norm_epsilon", gg::make_float32(c.norm_eps));
    w.set("bert.attention.causal", gg::make_bool(false));
    w.set("bert.pooling_type", gg::make_uint32(pooling_type(model.pooling)));
    w.set("tokenizer.ggml.token_type_count",
          gg::make_uint32(static_cast<std::uint32_t>(std::max(c.n_token_types, 1))));
    tokenizers::add_gguf_metadata(*model.tokenizer, w, static_cast<std::size_t>(c.n_vocab));
  } catch (const tokenizers::Error& err) {
    throw fail(err.what());
  }
  std::size_t done = 0;
  const std::size_t total = 5 + 16 * e.layers.size();
  // Matrices (the token table too) in the type asked for; vectors (norms, biases) and the position
  // and token type tables in f32, as convert_hf_to_gguf.py writes them (llama.cpp adds those tables to
  // f32 activations, which it cannot do from f16).
  auto add = [&](const std::string& name, const Weight& t) {
    if (t.empty()) throw fail(fmt::format("tensor '{}' is missing", name));
    std::vector<std::uint64_t> dims;
    for (int i = t.rank() - 1; i >= 0; --i) dims.push_back(static_cast<std::uint64_t>(t.dim(i)));
    const bool added_table = name == "position_embd.weight" || name == "token_types.weight";
    const DType type = t.rank() == 2 && !added_table ? options.type : DType::f32;
    const std::vector<float> values = as_f32(t);
    w.add_tensor(name, dims, type == DType::f32 ? 0 : 1, bytes_of(values.data(), values.size(), type));
    if (options.progress) options.progress(++done, total);
  };
  add("token_embd.weight", e.token_embd);
  add("position_embd.weight", e.position_embd);
  if (!e.token_type_embd.empty()) add("token_types.weight", e.token_type_embd);
  add("token_embd_norm.weight", e.embd_norm);
  add("token_embd_norm.bias", e.embd_norm_b);
  for (std::size_t i = 0; i < e.layers.size(); ++i) {
    const EncoderLayerWeights& l = e.layers[i];
    const std::string p = fmt::format("blk.{}.", i);
    add(p + "attn_q.weight", l.wq), add(p + "attn_q.bias", l.bq);
    add(p + "attn_k.weight", l.wk), add(p + "attn_k.bias", l.bk);
    add(p + "attn_v.weight", l.wv), add(p + "attn_v.bias", l.bv);
    add(p + "attn_output.weight", l.wo), add(p + "attn_output.bias", l.bo);
    add(p + "attn_output_norm.weight", l.attn_norm), add(p + "attn_output_norm.bias", l.attn_norm_b);
    add(p + "ffn_up.weight", l.w_up), add(p + "ffn_up.bias", l.b_up);
    add(p + "ffn_down.weight", l.w_down), add(p + "ffn_down.bias", l.b_down);
    add(p + "layer_output_norm.weight", l.ffn_norm), add(p + "layer_output_norm.bias", l.ffn_norm_b);
  }
  try {
    w.write(path);
  } catch (const tensor::IoError& err) {
    throw Error(err.what());
  } catch (const tensor::Error& err) {
    throw fail(err.what());
  }
}

}  // namespace pie
