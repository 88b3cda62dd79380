// Hugging Face folders: config.json (llama, mistral, qwen2, qwen3), safetensors weights (single file or
// sharded), tokenizer.json and the chat template. Weight matrices stay views into the mappings; norms and
// biases become f32 copies (the runner reads them as float arrays), as do f32 tensors the file leaves
// misaligned.
#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/bnb_nf4.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "pal/error.h"
#include "pie/error.h"
#include "pie/model.h"
#include "tensor/half.h"
#include "tokenizers/error.h"

namespace pie {
namespace {

using detail::SafetensorsSet;
using detail::SafetensorsTensor;
using nlohmann::json;

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(fmt::format("[hf] {}: cannot be opened", path.string()));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw ModelError(fmt::format("[hf] {}: not valid JSON: {}", path.string(), e.what()));
  }
}

// Typed access to config.json fields, naming the file and field in every error.
class Config {
 public:
  Config(json j, std::filesystem::path path) : j_(std::move(j)), path_(std::move(path)) {
    if (!j_.is_object()) fail("", "is not a JSON object");
  }

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    if (field.empty()) throw ModelError(fmt::format("[hf] {}: {}", path_.string(), what));
    throw ModelError(fmt::format("[hf] {}: \"{}\" {}", path_.string(), field, what));
  }
  bool has(const json& obj, const std::string& key) const {
    return obj.is_object() && obj.contains(key) && !obj[key].is_null();
  }
  bool has(const std::string& key) const { return has(j_, key); }
  const json& root() const { return j_; }

  std::int32_t integer(const json& obj, const std::string& key, const std::string& field,
                       std::optional<std::int32_t> fallback = std::nullopt) const {
    if (!has(obj, key)) {
      if (fallback) return *fallback;
      fail(field, "is missing");
    }
    const json& v = obj[key];
    if (!v.is_number_integer()) fail(field, fmt::format("must be an integer, got {}", v.dump()));
    const auto x = v.get<std::int64_t>();
    if (x < 0 || x > INT32_MAX) fail(field, fmt::format("is {}, outside [0, {}]", x, INT32_MAX));
    return static_cast<std::int32_t>(x);
  }
  std::int32_t integer(const std::string& key, std::optional<std::int32_t> fallback = std::nullopt) const {
    return integer(j_, key, key, fallback);
  }
  double number(const json& obj, const std::string& key, const std::string& field,
                std::optional<double> fallback = std::nullopt) const {
    if (!has(obj, key)) {
      if (fallback) return *fallback;
      fail(field, "is missing");
    }
    const json& v = obj[key];
    if (!v.is_number()) fail(field, fmt::format("must be a number, got {}", v.dump()));
    return v.get<double>();
  }
  double number(const std::string& key, std::optional<double> fallback = std::nullopt) const {
    return number(j_, key, key, fallback);
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) fail(key, fmt::format("must be true or false, got {}", j_[key].dump()));
    return j_[key].get<bool>();
  }
  std::string string(const json& obj, const std::string& key, const std::string& field) const {
    if (!has(obj, key)) fail(field, "is missing");
    if (!obj[key].is_string()) fail(field, fmt::format("must be a string, got {}", obj[key].dump()));
    return obj[key].get<std::string>();
  }

 private:
  json j_;
  std::filesystem::path path_;
};

Architecture architecture_of(const Config& c) {
  const std::string type = c.string(c.root(), "model_type", "model_type");
  if (type == "llama") return Architecture::llama;
  if (type == "mistral") return Architecture::mistral;
  if (type == "qwen2") return Architecture::qwen2;
  if (type == "qwen3") return Architecture::qwen3;
  c.fail("model_type", fmt::format("is \"{}\"; supported: llama, mistral, qwen2, qwen3", type));
}

// rope_theta and rope_scaling (transformers 4.x) or rope_parameters (transformers 5), as pal::RopeConfig.
pal::RopeConfig rope_of(const Config& c, std::int32_t head_dim, std::int32_t context_length) {
  pal::RopeConfig rope;
  rope.head_dim = head_dim;
  const double partial = c.number("partial_rotary_factor", 1.0);
  rope.rotary_dim = static_cast<std::int32_t>(head_dim * partial);
  rope.layout = pal::RopeLayout::neox;  // HF checkpoints rotate halves (rotate_half)
  json scaling;
  std::string scope = "rope_scaling";
  if (c.has("rope_parameters")) {
    scaling = c.root()["rope_parameters"];
    scope = "rope_parameters";
    if (!scaling.is_object()) c.fail(scope, "must be an object");
    rope.theta = c.number(scaling, "rope_theta", scope + ".rope_theta", c.number("rope_theta", 10000.0));
  } else {
    rope.theta = c.number("rope_theta", 10000.0);
    if (c.has("rope_scaling")) {
      scaling = c.root()["rope_scaling"];
      if (!scaling.is_object()) c.fail(scope, "must be an object");
    }
  }
  if (!scaling.is_object()) return rope;
  std::string type = "default";
  if (c.has(scaling, "rope_type")) {
    type = c.string(scaling, "rope_type", scope + ".rope_type");
  } else if (c.has(scaling, "type")) {
    type = c.string(scaling, "type", scope + ".type");
  }
  auto field = [&](const char* key) { return scope + "." + key; };
  auto original = [&] {
    return c.integer(scaling, "original_max_position_embeddings", field("original_max_position_embeddings"),
                     context_length);
  };
  if (type == "default") return rope;
  rope.factor = c.number(scaling, "factor", field("factor"));
  if (type == "linear") {
    rope.scaling = pal::RopeScaling::linear;
  } else if (type == "dynamic") {
    // transformers' dynamic NTK keeps the base below the trained context: seq_len 0 means L = orig.
    rope.scaling = pal::RopeScaling::dynamic_ntk;
    rope.original_max_position = original();
  } else if (type == "yarn") {
    rope.scaling = pal::RopeScaling::yarn;
    rope.original_max_position = original();
    rope.yarn_beta_fast = c.number(scaling, "beta_fast", field("beta_fast"), 32.0);
    rope.yarn_beta_slow = c.number(scaling, "beta_slow", field("beta_slow"), 1.0);
    rope.yarn_attention_factor = c.number(scaling, "attention_factor", field("attention_factor"), 0.0);
    if (c.has(scaling, "truncate")) {
      if (!scaling["truncate"].is_boolean()) c.fail(field("truncate"), "must be true or false");
      rope.yarn_truncate = scaling["truncate"].get<bool>();
    }
  } else if (type == "llama3") {
    rope.scaling = pal::RopeScaling::llama3;
    rope.original_max_position = original();
    rope.llama3_low_freq_factor = c.number(scaling, "low_freq_factor", field("low_freq_factor"), 1.0);
    rope.llama3_high_freq_factor = c.number(scaling, "high_freq_factor", field("high_freq_factor"), 4.0);
  } else {
    c.fail(field("rope_type"), fmt::format("is \"{}\"; supported: default, linear, dynamic, yarn, llama3", type));
  }
  try {
    pal::validate_rope(rope);
  } catch (const pal::Error& e) {
    c.fail(scope, fmt::format("gives an invalid RoPE configuration: {}", e.what()));
  }
  return rope;
}

ModelConfig config_of(const Config& c) {
  ModelConfig cfg;
  cfg.arch = architecture_of(c);
  cfg.n_vocab = c.integer("vocab_size");
  cfg.n_embd = c.integer("hidden_size");
  cfg.n_ff = c.integer("intermediate_size");
  cfg.n_layer = c.integer("num_hidden_layers");
  cfg.n_head = c.integer("num_attention_heads");
  if (cfg.n_head <= 0) c.fail("num_attention_heads", fmt::format("is {}, must be positive", cfg.n_head));
  cfg.n_kv_head = c.integer("num_key_value_heads", cfg.n_head);
  cfg.head_dim = c.integer("head_dim", cfg.n_embd / cfg.n_head);
  cfg.context_length = c.integer("max_position_embeddings", 2048);
  cfg.norm_eps = static_cast<float>(c.number("rms_norm_eps", 1e-6));
  cfg.tied_embeddings = c.boolean("tie_word_embeddings", false);
  // Qwen2 always has q/k/v biases (its config has no field for them); the others say so in attention_bias.
  cfg.attention_bias = cfg.arch == Architecture::qwen2 ? true : c.boolean("attention_bias", false);
  cfg.qk_norm = cfg.arch == Architecture::qwen3;
  if (c.has("hidden_act") && c.string(c.root(), "hidden_act", "hidden_act") != "silu") {
    c.fail("hidden_act", fmt::format("is \"{}\"; only silu (SwiGLU) is supported",
                                     c.string(c.root(), "hidden_act", "hidden_act")));
  }
  if (c.boolean("mlp_bias", false)) c.fail("mlp_bias", "is true; feed-forward biases are not supported");
  if (c.has("layer_types")) {
    // transformers 5 lists each layer's attention; one window for all layers is what the runner supports.
    const json& types = c.root()["layer_types"];
    if (!types.is_array()) c.fail("layer_types", "must be an array");
    std::size_t sliding = 0;
    for (const json& t : types) {
      if (!t.is_string()) c.fail("layer_types", fmt::format("holds {}, not a string", t.dump()));
      if (t.get<std::string>() == "sliding_attention") ++sliding;
    }
    if (sliding != 0 && sliding != types.size()) {
      c.fail("layer_types", fmt::format("slides on {} of {} layers; only all or none is supported", sliding,
                                        types.size()));
    }
    if (sliding != 0) {
      cfg.sliding_window = c.integer("sliding_window");
      if (cfg.sliding_window <= 0) c.fail("sliding_window", "must be positive for sliding_attention layers");
    }
  } else if (cfg.arch == Architecture::mistral) {
    cfg.sliding_window = c.integer("sliding_window", 0);
  } else if ((cfg.arch == Architecture::qwen2 || cfg.arch == Architecture::qwen3) &&
             c.boolean("use_sliding_window", false)) {
    // Layers from max_window_layers on slide; one window for all layers is what the runner supports.
    const std::int32_t from = c.integer("max_window_layers", 0);
    if (from == 0) {
      cfg.sliding_window = c.integer("sliding_window", 0);
    } else if (from < cfg.n_layer) {
      c.fail("max_window_layers", fmt::format("is {}: sliding windows on only some of the {} layers are not "
                                              "supported", from, cfg.n_layer));
    }
  }
  if (cfg.head_dim <= 0) c.fail("head_dim", fmt::format("is {}, must be positive", cfg.head_dim));
  cfg.rope = rope_of(c, cfg.head_dim, cfg.context_length);
  return cfg;
}

std::string chat_template_of(const std::filesystem::path& folder) {
  const std::filesystem::path jinja = folder / "chat_template.jinja";
  if (std::filesystem::exists(jinja)) {
    std::ifstream in(jinja, std::ios::binary);
    if (!in) throw ModelError(fmt::format("[hf] {}: cannot be opened", jinja.string()));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  const std::filesystem::path path = folder / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return {};
  const json j = read_json(path);
  if (!j.is_object() || !j.contains("chat_template") || j["chat_template"].is_null()) return {};
  const json& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  // A list of named templates: the "default" one.
  if (t.is_array()) {
    for (const json& entry : t) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
  }
  throw ModelError(fmt::format("[hf] {}: \"chat_template\" is neither a string nor a list holding a "
                               "\"default\" template", path.string()));
}

class WeightBinder {
 public:
  WeightBinder(const SafetensorsSet& set, Model& model) : set_(set), model_(model) {}

  // A matrix [n_out, n_in], kept in the file's dtype (copied only when misaligned); bitsandbytes' NF4
  // weights as nf4 rows.
  Weight matrix(const std::string& name, std::int64_t n_out, std::int64_t n_in) {
    if (detail::is_bnb_4bit(set_, name)) return detail::read_bnb_nf4(set_, name, n_out, n_in, model_);
    const SafetensorsTensor& t = set_.get(name);
    check_shape(t, {n_out, n_in});
    const std::size_t elem = tensor::row_bytes(t.dtype, 1);
    const std::byte* data = t.data;
    if (reinterpret_cast<std::uintptr_t>(t.data) % elem != 0) {
      auto copy = std::make_shared<std::vector<std::byte>>(t.data, t.data + t.n_bytes);
      data = copy->data();
      model_.storage.push_back(copy);
    }
    return weight_view(data, t.n_bytes, t.dtype, n_out, n_in);
  }
  // A vector [n] as f32.
  Weight vector(const std::string& name, std::int64_t n) {
    const SafetensorsTensor& t = set_.get(name);
    check_shape(t, {n});
    auto values = std::make_unique<std::vector<float>>(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::byte* p = t.data + static_cast<std::size_t>(i) * tensor::row_bytes(t.dtype, 1);
      float x = 0;
      std::uint16_t h = 0;
      switch (t.dtype) {
        case tensor::DType::f32: std::memcpy(&x, p, 4); break;
        case tensor::DType::f16: std::memcpy(&h, p, 2); x = tensor::f16_to_f32(h); break;
        case tensor::DType::bf16: std::memcpy(&h, p, 2); x = tensor::bf16_to_f32(h); break;
        default: throw ModelError(fmt::format("[hf] {}: tensor '{}' has an unexpected dtype", t.file.string(), name));
      }
      (*values)[static_cast<std::size_t>(i)] = x;
    }
    return model_detail::own_f32(model_, std::move(*values));
  }
  Weight optional_vector(const std::string& name, std::int64_t n) {
    return set_.find(name) != nullptr ? vector(name, n) : Weight{};
  }

 private:
  static void check_shape(const SafetensorsTensor& t, const std::vector<std::int64_t>& want) {
    if (t.shape != want) {
      auto dims = [](const std::vector<std::int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); };
      throw ModelError(fmt::format("[hf] {}: tensor '{}' has shape {}, expected {}", t.file.string(), t.name,
                                   dims(t.shape), dims(want)));
    }
  }

  const SafetensorsSet& set_;
  Model& model_;
};

}  // namespace

std::shared_ptr<const Model> load_hf_model(const std::filesystem::path& folder, const LoadOptions& options) {
  if (!std::filesystem::is_directory(folder)) {
    throw ModelError(fmt::format("[hf] {}: not a folder", folder.string()));
  }
  const std::filesystem::path config_path = folder / "config.json";
  if (!std::filesystem::exists(config_path)) {
    throw ModelError(fmt::format("[hf] {}: config.json is missing", folder.string()));
  }
  auto model = std::make_shared<Model>();
  model->path = folder;
  const Config config(read_json(config_path), config_path);
  model->config = config_of(config);
  try {
    model->config.validate();
  } catch (const ModelError& e) {
    throw ModelError(fmt::format("[hf] {}: {}", config_path.string(), e.what()));
  }
  const ModelConfig& cfg = model->config;
  std::filesystem::path name_path = folder;
  if (!name_path.has_filename()) name_path = name_path.parent_path();
  model->name = name_path.filename().string();

  const SafetensorsSet set(folder);
  if (options.progress) options.progress(0, set.total_bytes());
  model->storage = set.storage();
  WeightBinder bind(set, *model);
  const std::int64_t q_dim = static_cast<std::int64_t>(cfg.n_head) * cfg.head_dim;
  const std::int64_t kv_dim = static_cast<std::int64_t>(cfg.n_kv_head) * cfg.head_dim;
  model->weights.token_embd = bind.matrix("model.embed_tokens.weight", cfg.n_vocab, cfg.n_embd);
  model->weights.output_norm = bind.vector("model.norm.weight", cfg.n_embd);
  if (cfg.tied_embeddings) {
    model->weights.output = model->weights.token_embd;
  } else {
    model->weights.output = bind.matrix("lm_head.weight", cfg.n_vocab, cfg.n_embd);
  }
  model->weights.layers.resize(static_cast<std::size_t>(cfg.n_layer));
  for (std::int32_t i = 0; i < cfg.n_layer; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    LayerWeights& l = model->weights.layers[static_cast<std::size_t>(i)];
    l.attn_norm = bind.vector(p + "input_layernorm.weight", cfg.n_embd);
    l.wq = bind.matrix(p + "self_attn.q_proj.weight", q_dim, cfg.n_embd);
    l.wk = bind.matrix(p + "self_attn.k_proj.weight", kv_dim, cfg.n_embd);
    l.wv = bind.matrix(p + "self_attn.v_proj.weight", kv_dim, cfg.n_embd);
    l.wo = bind.matrix(p + "self_attn.o_proj.weight", cfg.n_embd, q_dim);
    if (cfg.attention_bias) {
      l.bq = bind.vector(p + "self_attn.q_proj.bias", q_dim);
      l.bk = bind.vector(p + "self_attn.k_proj.bias", kv_dim);
      l.bv = bind.vector(p + "self_attn.v_proj.bias", kv_dim);
    }
    if (cfg.qk_norm) {
      l.q_norm = bind.vector(p + "self_attn.q_norm.weight", cfg.head_dim);
      l.k_norm = bind.vector(p + "self_attn.k_norm.weight", cfg.head_dim);
    }
    l.ffn_norm = bind.vector(p + "post_attention_layernorm.weight", cfg.n_embd);
    l.w_gate = bind.matrix(p + "mlp.gate_proj.weight", cfg.n_ff, cfg.n_embd);
    l.w_up = bind.matrix(p + "mlp.up_proj.weight", cfg.n_ff, cfg.n_embd);
    l.w_down = bind.matrix(p + "mlp.down_proj.weight", cfg.n_embd, cfg.n_ff);
  }

  const std::filesystem::path tokenizer_path = folder / "tokenizer.json";
  if (std::filesystem::exists(tokenizer_path)) {
    try {
      model->tokenizer =
          std::make_shared<const tokenizers::Tokenizer>(tokenizers::Tokenizer::load(tokenizer_path));
    } catch (const tokenizers::Error& e) {
      throw ModelError(fmt::format("[hf] {}: {}", tokenizer_path.string(), e.what()));
    }
  }
  model->chat_template = chat_template_of(folder);
  if (options.progress) options.progress(set.total_bytes(), set.total_bytes());
  return model;
}

}  // namespace pie
