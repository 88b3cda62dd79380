// write_gguf_embedding_model: a BERT encoder as llama.cpp's bert GGUF (the names load_bert_gguf reads).
#include <fmt/format.h>

#include <vector>

#include "pie/embedding_convert.h"
#include "pie/error.h"
#include "tensor/error.h"
#include "tensor/gguf.h"
#include "tokenizers/error.h"
#include "tokenizers/gguf_export.h"

namespace pie {
namespace {

namespace gg = tensor::gguf;
using tensor::DType;

// ggml's type numbers of what an encoder's tensors hold after loading.
std::uint32_t ggml_type(DType t, const std::filesystem::path& path, const std::string& name) {
  switch (t) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::bf16: return 30;
    default:
      throw ModelError(fmt::format("[convert] {}: tensor '{}' is {}; an encoder's tensors are written as f32, "
                                   "f16 or bf16",
                                   path.string(), name, tensor::dtype_name(t)));
  }
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
  if (options.type != DType::f16) {
    throw fail(fmt::format("an encoder's matrices are written as f16 (what Orchard runs them as), not {}",
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
    w.set("general.file_type", gg::make_uint32(1));  // mostly f16
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
  auto add = [&](const std::string& name, const Weight& t) {
    if (t.empty()) throw fail(fmt::format("tensor '{}' is missing", name));
    std::vector<std::uint64_t> dims;
    for (int i = t.rank() - 1; i >= 0; --i) dims.push_back(static_cast<std::uint64_t>(t.dim(i)));
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(t.data());
    w.add_tensor(name, dims, ggml_type(t.dtype(), path, name), std::vector<std::uint8_t>(bytes, bytes + t.nbytes()));
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
