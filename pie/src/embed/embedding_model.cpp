// Loading embedding models: BERT from a Hugging Face folder (transformers' BertModel names, with or
// without the "bert." prefix) or a GGUF file (llama.cpp's bert names and keys), and decoder models
// wrapped as embedders. Pooling and normalization come from the sentence-transformers files beside
// a folder (1_Pooling/config.json, modules.json, sentence_bert_config.json) or <arch>.pooling_type
// in a GGUF.
#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/quant.h"
#include "model/safetensors.h"
#include "pie/embedding.h"
#include "pie/error.h"
#include "pie/model_store.h"
#include "tensor/error.h"
#include "tensor/gguf.h"
#include "tokenizers/error.h"

namespace pie {
namespace {

using nlohmann::json;
namespace gg = tensor::gguf;

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(fmt::format("[embed] {}: cannot be opened", path.string()));
  try {
    json j = json::parse(in);
    if (!j.is_object() && !j.is_array())
      throw ModelError(fmt::format("[embed] {}: not a JSON object", path.string()));
    return j;
  } catch (const json::exception& e) {
    throw ModelError(fmt::format("[embed] {}: not valid JSON: {}", path.string(), e.what()));
  }
}

std::int32_t int_field(const json& j, const char* key, const std::filesystem::path& path,
                       std::optional<std::int32_t> fallback = std::nullopt) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return *fallback;
    throw ModelError(fmt::format("[embed] {}: \"{}\" is missing", path.string(), key));
  }
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT32_MAX) {
    throw ModelError(fmt::format("[embed] {}: \"{}\" must be an integer in [0, {}], got {}",
                                 path.string(), key, INT32_MAX, v.dump()));
  }
  return v.get<std::int32_t>();
}

std::filesystem::path folder_name_path(std::filesystem::path folder) {
  if (!folder.has_filename()) folder = folder.parent_path();
  return folder;
}

// sentence-transformers' pooling of a folder, when it says one we support.
std::optional<Pooling> folder_pooling(const std::filesystem::path& folder) {
  const std::filesystem::path path = folder / "1_Pooling" / "config.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  const json j = read_json(path);
  auto on = [&](const char* key) {
    return j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
  };
  if (on("pooling_mode_cls_token")) return Pooling::cls;
  if (on("pooling_mode_mean_tokens")) return Pooling::mean;
  if (on("pooling_mode_lasttoken")) return Pooling::last;
  throw ModelError(
      fmt::format("[embed] {}: no supported pooling mode is on (mean_tokens, cls_token, lasttoken)",
                  path.string()));
}

// Whether modules.json lists a Normalize module (sentence-transformers); nullopt without
// modules.json.
std::optional<bool> folder_normalize(const std::filesystem::path& folder) {
  const std::filesystem::path path = folder / "modules.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  const json j = read_json(path);
  if (!j.is_array())
    throw ModelError(fmt::format("[embed] {}: must be a list of modules", path.string()));
  for (const json& m : j) {
    if (m.is_object() && m.value("type", "").find("Normalize") != std::string::npos) return true;
  }
  return false;
}

std::shared_ptr<const tokenizers::Tokenizer> load_tokenizer(const std::filesystem::path& path) {
  try {
    return std::make_shared<const tokenizers::Tokenizer>(tokenizers::Tokenizer::load(path));
  } catch (const tokenizers::Error& e) {
    throw ModelError(fmt::format("[embed] {}: {}", path.string(), e.what()));
  }
}

class SafetensorsBinder {
 public:
  SafetensorsBinder(const detail::SafetensorsSet& set, EmbeddingModel& model, std::string prefix)
      : set_(set), model_(model), prefix_(std::move(prefix)) {}

  Weight matrix(const std::string& name, std::int64_t n_out, std::int64_t n_in) {
    const detail::SafetensorsTensor& t = get(name, {n_out, n_in});
    const std::byte* data = t.data;
    if (reinterpret_cast<std::uintptr_t>(data) % tensor::row_bytes(t.dtype, 1) != 0) {
      auto copy = std::make_shared<std::vector<std::byte>>(t.data, t.data + t.n_bytes);
      model_.storage.push_back(copy);
      data = copy->data();
    }
    return weight_view(data, t.n_bytes, t.dtype, n_out, n_in);
  }
  // An f32 [n] copy (from f32, f16 or bf16); LayerNorm's weight and bias may be named gamma and
  // beta.
  Weight vector(const std::string& name, std::int64_t n, const std::string& old_name = {}) {
    const bool old = !old_name.empty() && set_.find(prefix_ + name) == nullptr &&
                     set_.find(prefix_ + old_name) != nullptr;
    const detail::SafetensorsTensor& t = get(old ? old_name : name, {n});
    auto values = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n));
    if (t.dtype == tensor::DType::f32) {
      std::memcpy(values->data(), t.data, static_cast<std::size_t>(n) * sizeof(float));
    } else {
      kernels::dequantize_row_ref(t.dtype, t.data, values->data(), n);
    }
    model_.storage.push_back(values);
    return weight_view(values->data(), values->size() * sizeof(float), tensor::DType::f32, 0, n);
  }

 private:
  const detail::SafetensorsTensor& get(const std::string& name,
                                       const std::vector<std::int64_t>& shape) {
    const detail::SafetensorsTensor& t = set_.get(prefix_ + name);
    if (t.shape != shape) {
      throw ModelError(fmt::format("[embed] {}: tensor '{}' has shape [{}], expected [{}]",
                                   t.file.string(), t.name, fmt::join(t.shape, ", "),
                                   fmt::join(shape, ", ")));
    }
    return t;
  }

  const detail::SafetensorsSet& set_;
  EmbeddingModel& model_;
  std::string prefix_;
};

std::shared_ptr<EmbeddingModel> load_bert_folder(const std::filesystem::path& folder,
                                                 const json& config,
                                                 const std::filesystem::path& config_path) {
  auto model = std::make_shared<EmbeddingModel>();
  model->path = folder;
  model->name = folder_name_path(folder).filename().string();
  EncoderConfig c;
  c.n_vocab = int_field(config, "vocab_size", config_path);
  c.n_embd = int_field(config, "hidden_size", config_path);
  c.n_layer = int_field(config, "num_hidden_layers", config_path);
  c.n_head = int_field(config, "num_attention_heads", config_path);
  c.n_ff = int_field(config, "intermediate_size", config_path);
  c.n_positions = int_field(config, "max_position_embeddings", config_path);
  c.n_token_types = int_field(config, "type_vocab_size", config_path, 0);
  if (config.contains("layer_norm_eps")) {
    if (!config["layer_norm_eps"].is_number()) {
      throw ModelError(
          fmt::format("[embed] {}: \"layer_norm_eps\" must be a number", config_path.string()));
    }
    c.norm_eps = config["layer_norm_eps"].get<float>();
  }
  const std::string act = config.value("hidden_act", "gelu");
  if (act != "gelu") {
    throw ModelError(fmt::format("[embed] {}: \"hidden_act\" is \"{}\"; only gelu is supported",
                                 config_path.string(), act));
  }
  const std::string pos = config.value("position_embedding_type", "absolute");
  if (pos != "absolute") {
    throw ModelError(
        fmt::format("[embed] {}: \"position_embedding_type\" is \"{}\"; only absolute is supported",
                    config_path.string(), pos));
  }
  if (c.n_embd <= 0 || c.n_head <= 0 || c.n_embd % c.n_head != 0 || c.n_vocab <= 0 ||
      c.n_positions <= 0 || c.n_ff <= 0 || c.n_layer <= 0) {
    throw ModelError(fmt::format(
        "[embed] {}: sizes do not fit (hidden {}, heads {}, vocab {}, positions {}, ff {}, "
        "layers {})",
        config_path.string(), c.n_embd, c.n_head, c.n_vocab, c.n_positions, c.n_ff, c.n_layer));
  }
  model->encoder = c;
  model->n_dims = c.n_embd;

  const detail::SafetensorsSet set(folder);
  model->storage = set.storage();
  const std::string prefix = set.find("embeddings.word_embeddings.weight") == nullptr &&
                                     set.find("bert.embeddings.word_embeddings.weight") != nullptr
                                 ? "bert."
                                 : "";
  SafetensorsBinder bind(set, *model, prefix);
  EncoderWeights& w = model->encoder_weights;
  const std::int64_t d = c.n_embd;
  w.token_embd = bind.matrix("embeddings.word_embeddings.weight", c.n_vocab, d);
  w.position_embd = bind.matrix("embeddings.position_embeddings.weight", c.n_positions, d);
  if (c.n_token_types > 0)
    w.token_type_embd = bind.matrix("embeddings.token_type_embeddings.weight", c.n_token_types, d);
  w.embd_norm = bind.vector("embeddings.LayerNorm.weight", d, "embeddings.LayerNorm.gamma");
  w.embd_norm_b = bind.vector("embeddings.LayerNorm.bias", d, "embeddings.LayerNorm.beta");
  for (std::int32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("encoder.layer.{}.", i);
    EncoderLayerWeights l;
    l.wq = bind.matrix(p + "attention.self.query.weight", d, d);
    l.bq = bind.vector(p + "attention.self.query.bias", d);
    l.wk = bind.matrix(p + "attention.self.key.weight", d, d);
    l.bk = bind.vector(p + "attention.self.key.bias", d);
    l.wv = bind.matrix(p + "attention.self.value.weight", d, d);
    l.bv = bind.vector(p + "attention.self.value.bias", d);
    l.wo = bind.matrix(p + "attention.output.dense.weight", d, d);
    l.bo = bind.vector(p + "attention.output.dense.bias", d);
    l.attn_norm = bind.vector(p + "attention.output.LayerNorm.weight", d,
                              p + "attention.output.LayerNorm.gamma");
    l.attn_norm_b = bind.vector(p + "attention.output.LayerNorm.bias", d,
                                p + "attention.output.LayerNorm.beta");
    l.w_up = bind.matrix(p + "intermediate.dense.weight", c.n_ff, d);
    l.b_up = bind.vector(p + "intermediate.dense.bias", c.n_ff);
    l.w_down = bind.matrix(p + "output.dense.weight", d, c.n_ff);
    l.b_down = bind.vector(p + "output.dense.bias", d);
    l.ffn_norm = bind.vector(p + "output.LayerNorm.weight", d, p + "output.LayerNorm.gamma");
    l.ffn_norm_b = bind.vector(p + "output.LayerNorm.bias", d, p + "output.LayerNorm.beta");
    w.layers.push_back(std::move(l));
  }

  const std::filesystem::path tokenizer_path = folder / "tokenizer.json";
  if (!std::filesystem::exists(tokenizer_path)) {
    throw ModelError(fmt::format("[embed] {}: tokenizer.json is missing", folder.string()));
  }
  model->tokenizer = load_tokenizer(tokenizer_path);
  model->max_tokens = c.n_positions;
  const std::filesystem::path st_config = folder / "sentence_bert_config.json";
  if (std::filesystem::exists(st_config)) {
    model->max_tokens =
        std::min(model->max_tokens,
                 int_field(read_json(st_config), "max_seq_length", st_config, model->max_tokens));
  }
  model->pooling = folder_pooling(folder).value_or(Pooling::mean);
  model->normalize = folder_normalize(folder).value_or(true);
  return model;
}

// llama.cpp's bert GGUF: token_embd, position_embd, token_types, token_embd_norm, blk.N.{attn_q,
// attn_k, attn_v, attn_output, attn_output_norm, ffn_up, ffn_down,
// layer_output_norm}.{weight,bias}.
class GgufBinder {
 public:
  GgufBinder(const gg::File& file, EmbeddingModel& model) : file_(file), model_(model) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ModelError(fmt::format("[gguf] {}: {}", file_.name(), what));
  }
  std::int32_t integer(const std::string& key,
                       std::optional<std::int32_t> fallback = std::nullopt) const {
    const gg::Value* v = file_.find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      fail(fmt::format("metadata key '{}' is missing", key));
    }
    const std::int64_t x = v->as_int(key);
    if (x < 0 || x > INT32_MAX)
      fail(fmt::format("metadata key '{}' is {}, outside [0, {}]", key, x, INT32_MAX));
    return static_cast<std::int32_t>(x);
  }
  Weight matrix(const std::string& name, std::int64_t n_out, std::int64_t n_in,
                bool required = true) {
    const gg::TensorInfo* t = file_.find_tensor(name);
    if (t == nullptr) {
      if (required) fail(fmt::format("tensor '{}' is missing", name));
      return {};
    }
    const std::vector<std::uint64_t> want =
        n_out == 0 ? std::vector<std::uint64_t>{std::uint64_t(n_in)}
                   : std::vector<std::uint64_t>{std::uint64_t(n_in), std::uint64_t(n_out)};
    if (t->dims != want) {
      fail(fmt::format("tensor '{}' has dims [{}], expected [{}]", name, fmt::join(t->dims, ", "),
                       fmt::join(want, ", ")));
    }
    const std::optional<tensor::DType> type = tensor::dtype_from_ggml(t->type);
    if (!type)
      fail(fmt::format("tensor '{}': ggml type {} is not supported", name,
                       gg::ggml_type_name(t->type)));
    const std::span<const std::uint8_t> data = file_.tensor_data(*t);
    if (reinterpret_cast<std::uintptr_t>(data.data()) %
                tensor::row_bytes(*type, tensor::block_size(*type)) !=
            0 &&
        (*type == tensor::DType::f32 || *type == tensor::DType::f16 ||
         *type == tensor::DType::bf16)) {
      auto copy = std::make_shared<std::vector<std::uint8_t>>(data.begin(), data.end());
      model_.storage.push_back(copy);
      return weight_view(copy->data(), copy->size(), *type, n_out, n_in);
    }
    return weight_view(data.data(), data.size(), *type, n_out, n_in);
  }
  Weight vector(const std::string& name, std::int64_t n) {
    const Weight raw = matrix(name, 0, n);
    if (raw.dtype() == tensor::DType::f32) return raw;
    if (raw.dtype() != tensor::DType::f16 && raw.dtype() != tensor::DType::bf16) {
      fail(fmt::format("tensor '{}': a vector must be f32, f16 or bf16", name));
    }
    auto values = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n));
    kernels::dequantize_row_ref(raw.dtype(), raw.data(), values->data(), n);
    model_.storage.push_back(values);
    return weight_view(values->data(), values->size() * sizeof(float), tensor::DType::f32, 0, n);
  }

 private:
  const gg::File& file_;
  EmbeddingModel& model_;
};

std::shared_ptr<EmbeddingModel> load_bert_gguf(const std::filesystem::path& path) {
  auto model = std::make_shared<EmbeddingModel>();
  model->path = path;
  model->name = path.stem().string();
  std::shared_ptr<const gg::File> file;
  try {
    file = std::make_shared<const gg::File>(gg::File::open(path));
  } catch (const tensor::Error& e) {
    throw ModelError(fmt::format("[gguf] {}: {}", path.string(), e.what()));
  }
  model->storage.push_back(file);
  GgufBinder bind(*file, *model);
  if (const gg::Value* v = file->find("general.name")) model->name = v->as_string("general.name");
  EncoderConfig c;
  c.n_embd = bind.integer("bert.embedding_length");
  c.n_layer = bind.integer("bert.block_count");
  c.n_head = bind.integer("bert.attention.head_count");
  c.n_ff = bind.integer("bert.feed_forward_length");
  c.n_positions = bind.integer("bert.context_length");
  if (const gg::Value* v = file->find("bert.attention.layer_norm_epsilon")) {
    c.norm_eps = static_cast<float>(v->as_float("bert.attention.layer_norm_epsilon"));
  }
  if (c.n_embd <= 0 || c.n_head <= 0 || c.n_embd % c.n_head != 0 || c.n_layer <= 0 || c.n_ff <= 0 ||
      c.n_positions <= 0) {
    bind.fail(fmt::format(
        "sizes do not fit (embedding_length {}, head_count {}, block_count {}, feed_forward_length "
        "{}, context_length {})",
        c.n_embd, c.n_head, c.n_layer, c.n_ff, c.n_positions));
  }
  const gg::TensorInfo* embd = file->find_tensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2)
    bind.fail("tensor 'token_embd.weight' is missing or not a matrix");
  c.n_vocab = static_cast<std::int32_t>(embd->dims[1]);
  const gg::TensorInfo* types = file->find_tensor("token_types.weight");
  c.n_token_types =
      types != nullptr && types->dims.size() == 2 ? static_cast<std::int32_t>(types->dims[1]) : 0;
  model->encoder = c;
  model->n_dims = c.n_embd;
  EncoderWeights& w = model->encoder_weights;
  const std::int64_t d = c.n_embd;
  w.token_embd = bind.matrix("token_embd.weight", c.n_vocab, d);
  w.position_embd = bind.matrix("position_embd.weight", c.n_positions, d);
  if (c.n_token_types > 0)
    w.token_type_embd = bind.matrix("token_types.weight", c.n_token_types, d);
  w.embd_norm = bind.vector("token_embd_norm.weight", d);
  w.embd_norm_b = bind.vector("token_embd_norm.bias", d);
  for (std::int32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    EncoderLayerWeights l;
    l.wq = bind.matrix(p + "attn_q.weight", d, d);
    l.bq = bind.vector(p + "attn_q.bias", d);
    l.wk = bind.matrix(p + "attn_k.weight", d, d);
    l.bk = bind.vector(p + "attn_k.bias", d);
    l.wv = bind.matrix(p + "attn_v.weight", d, d);
    l.bv = bind.vector(p + "attn_v.bias", d);
    l.wo = bind.matrix(p + "attn_output.weight", d, d);
    l.bo = bind.vector(p + "attn_output.bias", d);
    l.attn_norm = bind.vector(p + "attn_output_norm.weight", d);
    l.attn_norm_b = bind.vector(p + "attn_output_norm.bias", d);
    l.w_up = bind.matrix(p + "ffn_up.weight", c.n_ff, d);
    l.b_up = bind.vector(p + "ffn_up.bias", c.n_ff);
    l.w_down = bind.matrix(p + "ffn_down.weight", d, c.n_ff);
    l.b_down = bind.vector(p + "ffn_down.bias", d);
    l.ffn_norm = bind.vector(p + "layer_output_norm.weight", d);
    l.ffn_norm_b = bind.vector(p + "layer_output_norm.bias", d);
    w.layers.push_back(std::move(l));
  }
  model->tokenizer = load_tokenizer(path);
  model->max_tokens = c.n_positions;
  // llama.cpp's LLAMA_POOLING_TYPE: 0 none, 1 mean, 2 cls, 3 last, 4 rank.
  switch (bind.integer("bert.pooling_type", 1)) {
    case 1:
      model->pooling = Pooling::mean;
      break;
    case 2:
      model->pooling = Pooling::cls;
      break;
    case 3:
      model->pooling = Pooling::last;
      break;
    default:
      bind.fail(fmt::format("bert.pooling_type {} is not supported (1 mean, 2 cls, 3 last are)",
                            bind.integer("bert.pooling_type")));
  }
  model->normalize = true;
  return model;
}

bool is_gguf(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

std::optional<std::string> gguf_architecture(const std::filesystem::path& path) {
  try {
    const gg::File file = gg::File::open(path);
    if (const gg::Value* v = file.find("general.architecture"))
      return v->as_string("general.architecture");
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

void apply(EmbeddingModel& model, const EmbeddingLoadOptions& options) {
  if (options.pooling) model.pooling = *options.pooling;
  if (options.normalize) model.normalize = *options.normalize;
}

}  // namespace

const char* pooling_name(Pooling pooling) {
  switch (pooling) {
    case Pooling::mean:
      return "mean";
    case Pooling::cls:
      return "cls";
    case Pooling::last:
      return "last";
  }
  return "?";
}

Pooling pooling_from_name(const std::string& name) {
  if (name == "mean") return Pooling::mean;
  if (name == "cls") return Pooling::cls;
  if (name == "last") return Pooling::last;
  throw RequestError(fmt::format("[embed] pooling \"{}\" is not one of mean, cls, last", name),
                     "pooling");
}

std::string EmbeddingModel::architecture() const {
  return decoder ? architecture_name(decoder->config.arch) : "bert";
}

bool is_embedding_model_path(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path config = path / "config.json";
    std::ifstream in(config, std::ios::binary);
    if (!in) return false;
    const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    return j.is_object() && j.value("model_type", "") == "bert";
  }
  return std::filesystem::is_regular_file(path, ec) && is_gguf(path) &&
         gguf_architecture(path) == "bert";
}

std::shared_ptr<const EmbeddingModel> load_embedding_model(const std::filesystem::path& path,
                                                           const EmbeddingLoadOptions& options) {
  std::shared_ptr<EmbeddingModel> model;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path config_path = path / "config.json";
    if (!std::filesystem::exists(config_path)) {
      throw ModelError(fmt::format("[embed] {}: config.json is missing", path.string()));
    }
    const json config = read_json(config_path);
    if (!config.is_object())
      throw ModelError(fmt::format("[embed] {}: not a JSON object", config_path.string()));
    if (config.value("model_type", "") == "bert") {
      model = load_bert_folder(path, config, config_path);
    } else {
      auto wrapped =
          std::const_pointer_cast<EmbeddingModel>(embedding_model_from_decoder(load_model(path)));
      wrapped->pooling = folder_pooling(path).value_or(Pooling::last);
      wrapped->normalize = folder_normalize(path).value_or(true);
      model = wrapped;
    }
  } else if (is_gguf(path) && gguf_architecture(path) == "bert") {
    model = load_bert_gguf(path);
  } else {
    model = std::const_pointer_cast<EmbeddingModel>(embedding_model_from_decoder(load_model(path)));
  }
  apply(*model, options);
  return model;
}

std::shared_ptr<const EmbeddingModel> open_embedding_model(const std::string& given,
                                                           const EmbeddingLoadOptions& options) {
  std::error_code ec;
  if (given != kRandomModelName && std::filesystem::exists(given, ec))
    return load_embedding_model(given, options);
  if (given != kRandomModelName && ModelName::valid(given)) {
    const ModelStore store;
    const ModelName name = ModelName::parse(given);
    if (store.contains(name.str())) {
      auto model = std::const_pointer_cast<EmbeddingModel>(
          load_embedding_model(store.find(name.str()).file, options));
      model->name = name.str();
      return model;
    }
  }
  return embedding_model_from_decoder(open_model(given).model, options);
}

std::shared_ptr<const EmbeddingModel> embedding_model_from_decoder(
    std::shared_ptr<const Model> decoder, const EmbeddingLoadOptions& options) {
  if (!decoder) throw ModelError("[embed] no decoder model given");
  auto model = std::make_shared<EmbeddingModel>();
  model->name = decoder->name;
  model->path = decoder->path;
  model->tokenizer = decoder->tokenizer;
  model->max_tokens = decoder->config.context_length;
  model->n_dims = decoder->config.n_embd;
  model->pooling = Pooling::last;
  model->normalize = true;
  model->decoder = std::move(decoder);
  apply(*model, options);
  return model;
}

}  // namespace pie
