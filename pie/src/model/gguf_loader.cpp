// load_gguf_model: a GGUF file (llama.cpp's key and tensor names) as a Model whose weights are views
// into the file's mapping.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "model/weights.h"
#include "pie/error.h"
#include "pie/model.h"
#include "tensor/error.h"
#include "tensor/half.h"
#include "tokenizers/error.h"
#include "tensor/gguf.h"

namespace pie {

namespace {

namespace gg = tensor::gguf;

class GgufReader {
 public:
  GgufReader(const gg::File& file, std::string where, Model& model, const LoadOptions& options)
      : file_(file), where_(std::move(where)), model_(model), options_(options) {
    for (const gg::TensorInfo& t : file_.tensors()) total_bytes_ += t.n_bytes;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw ModelError(fmt::format("[gguf] {}: {}", where_, what));
  }

  void set_arch(const std::string& arch) { arch_ = arch; }
  std::string key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }

  std::int32_t required_int(std::string_view suffix) const {
    const std::string k = key(suffix);
    const gg::Value* v = file_.find(k);
    if (v == nullptr) fail(fmt::format("metadata key '{}' is missing", k));
    return to_int32(k, v->as_int(k));
  }
  std::int32_t optional_int(std::string_view suffix, std::int32_t fallback) const {
    const std::string k = key(suffix);
    const gg::Value* v = file_.find(k);
    return v == nullptr ? fallback : to_int32(k, v->as_int(k));
  }
  double optional_float(std::string_view suffix, double fallback) const {
    const std::string k = key(suffix);
    const gg::Value* v = file_.find(k);
    return v == nullptr ? fallback : v->as_float(k);
  }
  const std::string* optional_string(std::string_view suffix) const {
    const std::string k = key(suffix);
    const gg::Value* v = file_.find(k);
    return v == nullptr ? nullptr : &v->as_string(k);
  }

  // Reports the whole file done (tensors the model does not use are never read).
  void finish_progress() const {
    if (options_.progress) options_.progress(total_bytes_, total_bytes_);
  }

  bool has_tensor(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

  // A [n_out, n_in] matrix (GGUF dims {n_in, n_out}) of any supported storage type, viewed in place.
  Weight matrix(const std::string& name, std::int64_t n_out, std::int64_t n_in, bool required = true) {
    const gg::TensorInfo* t = find(name, required);
    if (t == nullptr) return {};
    const tensor::DType type = storage_type(*t);
    check_dims(*t, {n_in, n_out});
    return view(*t, type, n_out, n_in);
  }

  // An f32 vector [n]: viewed when stored as f32, converted into an owned buffer from f16/bf16.
  Weight vector(const std::string& name, std::int64_t n, bool required = true) {
    const gg::TensorInfo* t = find(name, required);
    if (t == nullptr) return {};
    const tensor::DType type = storage_type(*t);
    check_dims(*t, {n});
    const Weight raw = view(*t, type, 0, n);
    if (type == tensor::DType::f32) return raw;
    if (type != tensor::DType::f16 && type != tensor::DType::bf16) {
      fail(fmt::format("tensor '{}': type {} is not supported for a vector (f32, f16, bf16 are)", name,
                       tensor::dtype_name(type)));
    }
    std::vector<float> values(static_cast<std::size_t>(n));
    const auto* src = raw.data_as<const std::uint16_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      values[static_cast<std::size_t>(i)] = type == tensor::DType::f16 ? tensor::f16_to_f32(src[i]) : tensor::bf16_to_f32(src[i]);
    }
    return model_detail::own_f32(model_, std::move(values));
  }

  // The raw f32 values of a small f32 vector (rope_freqs.weight).
  std::vector<float> f32_values(const std::string& name, std::int64_t n) {
    const Weight w = vector(name, n);
    const auto* p = w.data_as<const float>();
    return {p, p + n};
  }

  const gg::TensorInfo* find(const std::string& name, bool required) const {
    const gg::TensorInfo* t = file_.find_tensor(name);
    if (t == nullptr && required) fail(fmt::format("tensor '{}' is missing", name));
    return t;
  }

  // The dims of a tensor as GGUF stores them (ne[0] first).
  std::string dims_text(const std::vector<std::uint64_t>& dims) const {
    std::string s = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", dims[i]);
    return s + "]";
  }

 private:
  static constexpr std::int64_t kMaxInt32 = 0x7FFFFFFF;

  std::int32_t to_int32(const std::string& k, std::int64_t v) const {
    if (v < 0 || v > kMaxInt32) fail(fmt::format("metadata key '{}': {} is out of range", k, v));
    return static_cast<std::int32_t>(v);
  }

  tensor::DType storage_type(const gg::TensorInfo& t) const {
    const std::optional<tensor::DType> type = tensor::dtype_from_ggml(t.type);
    if (!type || *type == tensor::DType::q8_K) {
      fail(fmt::format("tensor '{}': type {} (ggml type {}) is not supported", t.name, gg::ggml_type_name(t.type),
                       t.type));
    }
    return *type;
  }

  // Dims must be `want` (ne[0] first), trailing dims of 1 allowed.
  void check_dims(const gg::TensorInfo& t, std::vector<std::int64_t> want) const {
    bool ok = t.dims.size() >= want.size();
    for (std::size_t i = 0; ok && i < t.dims.size(); ++i) {
      const std::uint64_t w = i < want.size() ? static_cast<std::uint64_t>(want[i]) : 1;
      ok = t.dims[i] == w;
    }
    if (!ok) {
      std::vector<std::uint64_t> w(want.begin(), want.end());
      fail(fmt::format("tensor '{}' has shape {}, expected {} (GGUF order: elements per row first)", t.name,
                       dims_text(t.dims), dims_text(w)));
    }
  }

  Weight view(const gg::TensorInfo& t, tensor::DType type, std::int64_t n_out, std::int64_t n_in) {
    if (n_in % tensor::block_size(type) != 0) {
      fail(fmt::format("tensor '{}': rows of {} elements are not whole {} blocks", t.name, n_in,
                       tensor::dtype_name(type)));
    }
    const auto rows = static_cast<std::uint64_t>(std::max<std::int64_t>(n_out, 1));  // n_out 0: a vector
    const std::uint64_t want = tensor::row_bytes(type, n_in) * rows;
    const std::span<const std::uint8_t> data = file_.tensor_data(t);
    if (data.size() != want) {
      fail(fmt::format("tensor '{}': {} bytes of data, expected {}", t.name, data.size(), want));
    }
    done_bytes_ += data.size();
    if (options_.progress) options_.progress(done_bytes_, total_bytes_);
    const void* ptr = data.data();
    // A file with general.alignment below 4 may place data where f32 (or a block's f16 scale) cannot be
    // read in place: such a tensor is copied into an aligned buffer.
    if (reinterpret_cast<std::uintptr_t>(ptr) % alignof(float) != 0) {
      auto copy = std::make_shared<std::vector<float>>((data.size() + sizeof(float) - 1) / sizeof(float));
      std::memcpy(copy->data(), data.data(), data.size());
      ptr = copy->data();
      model_.storage.push_back(std::move(copy));
    }
    return weight_view(ptr, data.size(), type, n_out, n_in);
  }

  const gg::File& file_;
  std::string where_;
  Model& model_;
  const LoadOptions& options_;
  std::string arch_;
  std::uint64_t total_bytes_ = 0;
  std::uint64_t done_bytes_ = 0;
};


void read_config(GgufReader& r, const gg::File& file, Model& model) {
  ModelConfig& c = model.config;
  const gg::Value* arch_value = file.find("general.architecture");
  if (arch_value == nullptr) r.fail("metadata key 'general.architecture' is missing");
  const std::string& arch = arch_value->as_string("general.architecture");
  try {
    c.arch = architecture_from_name(arch);
  } catch (const ModelError& e) {
    r.fail(e.what());
  }
  r.set_arch(arch);
  c.n_embd = r.required_int("embedding_length");
  c.n_layer = r.required_int("block_count");
  c.n_ff = r.required_int("feed_forward_length");
  c.n_head = r.required_int("attention.head_count");
  c.n_kv_head = r.optional_int("attention.head_count_kv", c.n_head);
  c.context_length = r.required_int("context_length");
  if (c.n_head <= 0) r.fail(fmt::format("{}: must be positive, got {}", r.key("attention.head_count"), c.n_head));
  if (!file.find(r.key("attention.key_length")) && c.n_embd % c.n_head != 0) {
    r.fail(fmt::format("embedding length {} is not a multiple of the head count {}", c.n_embd, c.n_head));
  }
  c.head_dim = r.optional_int("attention.key_length", c.n_embd / c.n_head);
  const std::int32_t value_dim = r.optional_int("attention.value_length", c.head_dim);
  if (value_dim != c.head_dim) {
    r.fail(fmt::format("{} {} differs from the key length {} (not supported)", r.key("attention.value_length"),
                       value_dim, c.head_dim));
  }
  c.norm_eps = static_cast<float>(r.optional_float("attention.layer_norm_rms_epsilon", 1e-5));
  c.sliding_window = r.optional_int("attention.sliding_window", 0);
  c.attention_scale = static_cast<float>(r.optional_float("attention.scale", 0));
  c.attn_logit_softcap = static_cast<float>(r.optional_float("attn_logit_softcapping", 0));
  c.final_logit_softcap = static_cast<float>(r.optional_float("final_logit_softcapping", 0));

  pal::RopeConfig& rope = c.rope;
  rope.head_dim = c.head_dim;
  rope.rotary_dim = r.optional_int("rope.dimension_count", c.head_dim);
  rope.theta = r.optional_float("rope.freq_base", 10000.0);
  rope.layout = model_detail::gguf_rope_is_neox(c.arch) ? pal::RopeLayout::neox : pal::RopeLayout::gptj;
  const std::string* scaling = r.optional_string("rope.scaling.type");
  const double factor = r.optional_float("rope.scaling.factor", r.optional_float("rope.scale_linear", 0));
  const std::int32_t original = r.optional_int("rope.scaling.original_context_length", 0);
  if ((scaling == nullptr && factor > 0 && factor != 1) || (scaling != nullptr && *scaling == "linear")) {
    rope.scaling = pal::RopeScaling::linear;
    rope.factor = factor;
  } else if (scaling != nullptr && *scaling == "yarn") {
    rope.scaling = pal::RopeScaling::yarn;
    rope.factor = factor;
    rope.original_max_position = original;
    rope.yarn_beta_fast = r.optional_float("rope.scaling.yarn_beta_fast", rope.yarn_beta_fast);
    rope.yarn_beta_slow = r.optional_float("rope.scaling.yarn_beta_slow", rope.yarn_beta_slow);
  } else if (scaling != nullptr && *scaling != "none") {
    r.fail(fmt::format("{} '{}' is not supported (none, linear, yarn are; llama3 comes as rope_freqs.weight)",
                       r.key("rope.scaling.type"), *scaling));
  }
  if (r.has_tensor("rope_factors_long") || r.has_tensor("rope_factors_short") ||
      r.has_tensor("rope_factors_long.weight") || r.has_tensor("rope_factors_short.weight")) {
    r.fail("LongRoPE scaling (rope_factors_long/short) is not supported");
  }
  if (r.has_tensor("rope_freqs.weight")) {
    if (rope.scaling != pal::RopeScaling::none) r.fail("rope_freqs.weight together with rope.scaling.type");
    if (rope.rotary_dim <= 0 || rope.rotary_dim % 2 != 0) {
      r.fail(fmt::format("{} {} is not a positive even number", r.key("rope.dimension_count"), rope.rotary_dim));
    }
    const std::vector<float> factors = r.f32_values("rope_freqs.weight", rope.rotary_dim / 2);
    model_detail::fit_llama3_rope(rope, factors, original > 0 ? original : 8192, model.path.string());
  }
}

void read_weights(GgufReader& r, Model& model) {
  ModelConfig& c = model.config;
  const gg::TensorInfo* embd = r.find("token_embd.weight", true);
  if (embd->dims.size() < 2 || embd->dims[1] == 0 || embd->dims[1] > 0x7FFFFFFF) {
    r.fail(fmt::format("tensor 'token_embd.weight' has shape {}, expected [{}, n_vocab]", r.dims_text(embd->dims),
                       c.n_embd));
  }
  c.n_vocab = static_cast<std::int32_t>(embd->dims[1]);
  try {
    c.validate();  // sizes are sane before any tensor shape is computed from them
  } catch (const ModelError& e) {
    r.fail(e.what());
  }

  const std::int64_t n_embd = c.n_embd, hd = c.head_dim, n_q = c.n_head * hd, n_kv = c.n_kv_head * hd;
  model.weights.token_embd = r.matrix("token_embd.weight", c.n_vocab, n_embd);
  model.weights.output_norm = r.vector("output_norm.weight", n_embd);
  model.weights.output = r.matrix("output.weight", c.n_vocab, n_embd, false);
  c.tied_embeddings = !model.weights.output;
  if (c.tied_embeddings) model.weights.output = model.weights.token_embd;

  c.attention_bias = r.has_tensor("blk.0.attn_q.bias");
  c.qk_norm = r.has_tensor("blk.0.attn_q_norm.weight");
  model.weights.layers.resize(static_cast<std::size_t>(c.n_layer));
  for (std::int32_t i = 0; i < c.n_layer; ++i) {
    LayerWeights& l = model.weights.layers[static_cast<std::size_t>(i)];
    auto name = [i](const char* t) { return fmt::format("blk.{}.{}", i, t); };
    l.attn_norm = r.vector(name("attn_norm.weight"), n_embd);
    l.wq = r.matrix(name("attn_q.weight"), n_q, n_embd);
    l.wk = r.matrix(name("attn_k.weight"), n_kv, n_embd);
    l.wv = r.matrix(name("attn_v.weight"), n_kv, n_embd);
    l.wo = r.matrix(name("attn_output.weight"), n_embd, n_q);
    if (c.attention_bias) {
      l.bq = r.vector(name("attn_q.bias"), n_q);
      l.bk = r.vector(name("attn_k.bias"), n_kv);
      l.bv = r.vector(name("attn_v.bias"), n_kv);
    }
    if (c.qk_norm) {
      l.q_norm = r.vector(name("attn_q_norm.weight"), hd);
      l.k_norm = r.vector(name("attn_k_norm.weight"), hd);
    }
    l.ffn_norm = r.vector(name("ffn_norm.weight"), n_embd);
    l.w_gate = r.matrix(name("ffn_gate.weight"), c.n_ff, n_embd);
    l.w_up = r.matrix(name("ffn_up.weight"), c.n_ff, n_embd);
    l.w_down = r.matrix(name("ffn_down.weight"), n_embd, c.n_ff);
  }
}

}  // namespace

std::shared_ptr<const Model> load_gguf_model(const std::filesystem::path& path, const LoadOptions& options) {
  auto model = std::make_shared<Model>();
  model->path = path;
  try {
    auto file = std::make_shared<const gg::File>(gg::File::open(path));
    model->storage.push_back(file);
    GgufReader reader(*file, path.string(), *model, options);
    read_config(reader, *file, *model);
    read_weights(reader, *model);
    reader.finish_progress();
    model->name = path.stem().string();
    if (const gg::Value* v = file->find("general.name")) model->name = v->as_string("general.name");
    if (const gg::Value* v = file->find("tokenizer.chat_template")) {
      model->chat_template = v->as_string("tokenizer.chat_template");
    }
    model->tokenizer = std::make_shared<const tokenizers::Tokenizer>(tokenizers::Tokenizer::load(path));
  } catch (const tokenizers::Error& e) {
    throw ModelError(e.what());
  } catch (const tensor::IoError& e) {  // the container's own errors name the file already
    throw ModelError(e.what());
  } catch (const tensor::FormatError& e) {
    throw ModelError(e.what());
  } catch (const tensor::Error& e) {
    throw ModelError(fmt::format("[gguf] {}: {}", path.string(), e.what()));
  }
  if (model->tokenizer->vocab_size() > static_cast<std::size_t>(model->config.n_vocab)) {
    throw ModelError(fmt::format("[gguf] {}: the tokenizer has {} tokens, more than the {} rows of token_embd.weight",
                                 path.string(), model->tokenizer->vocab_size(), model->config.n_vocab));
  }
  return model;
}

}  // namespace pie
