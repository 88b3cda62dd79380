// Reading adapters: PEFT folders (adapter_config.json, adapter_model.safetensors with
// base_model.model.<module>.lora_A.weight [rank, n_in] and .lora_B.weight [n_out, rank]) and llama.cpp
// GGUF adapters (<base tensor>.lora_a with GGUF dims [n_in, rank], .lora_b with [rank, n_out]). Both end
// as f32 pairs keyed by projection site and layer; what needs no base is checked here.
#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>

#include "kernels/quant.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "pie/lora.h"
#include "tensor/gguf.h"
#include "tensor/half.h"

namespace pie {
namespace {

using nlohmann::json;

struct SiteName {
  const char* peft;  // the Hugging Face module name
  const char* gguf;  // llama.cpp's tensor name
  ProjectionSite site;
};

constexpr SiteName kSites[] = {
    {"self_attn.q_proj", "attn_q", ProjectionSite::q},       {"self_attn.k_proj", "attn_k", ProjectionSite::k},
    {"self_attn.v_proj", "attn_v", ProjectionSite::v},       {"self_attn.o_proj", "attn_output", ProjectionSite::o},
    {"mlp.gate_proj", "ffn_gate", ProjectionSite::gate},     {"mlp.up_proj", "ffn_up", ProjectionSite::up},
    {"mlp.down_proj", "ffn_down", ProjectionSite::down},
};

// Names target_modules may list (PEFT matches them against module name suffixes).
bool known_target_module(const std::string& m) {
  if (m == "lm_head" || m == "all-linear") return true;
  for (const SiteName& s : kSites) {
    const std::string full = s.peft;
    if (m == full || m == full.substr(full.find('.') + 1)) return true;
  }
  return false;
}

// A pair under construction: A and B as read, in f32.
struct PendingPair {
  std::optional<std::vector<float>> a, b;
  std::int64_t a_rows = 0, a_cols = 0, b_rows = 0, b_cols = 0;
  std::string a_name, b_name;
};

using PairKey = std::pair<std::int32_t, ProjectionSite>;  // (layer, site)

void check_finite(const std::vector<float>& v, const std::string& where) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw LoraError(fmt::format("[lora] {}: element {} is {} (weights must be finite)", where, i, v[i]));
    }
  }
}

// The checked pairs of `pending`, in (layer, site) order.
std::vector<LoraPair> finish_pairs(std::map<PairKey, PendingPair>& pending, const std::string& file) {
  std::vector<LoraPair> pairs;
  for (auto& [key, p] : pending) {
    const std::string where = key.first >= 0 ? fmt::format("{}: layer {} {}", file, key.first, projection_site_name(key.second))
                                             : fmt::format("{}: {}", file, projection_site_name(key.second));
    if (!p.a) throw LoraError(fmt::format("[lora] {}: '{}' has no lora_A / lora_a partner", where, p.b_name));
    if (!p.b) throw LoraError(fmt::format("[lora] {}: '{}' has no lora_B / lora_b partner", where, p.a_name));
    if (p.a_rows != p.b_cols) {
      throw LoraError(fmt::format("[lora] {}: A '{}' has rank {}, B '{}' has rank {}", where, p.a_name, p.a_rows,
                                  p.b_name, p.b_cols));
    }
    if (p.a_rows < 1 || p.a_rows > kMaxLoraRank) {
      throw LoraError(fmt::format("[lora] {}: rank {} outside [1, {}]", where, p.a_rows, kMaxLoraRank));
    }
    check_finite(*p.a, fmt::format("{} '{}'", file, p.a_name));
    check_finite(*p.b, fmt::format("{} '{}'", file, p.b_name));
    LoraPair pair;
    pair.site = key.second;
    pair.layer = key.first;
    pair.rank = p.a_rows;
    pair.n_in = p.a_cols;
    pair.n_out = p.b_rows;
    pair.a = std::move(*p.a);
    pair.b = std::move(*p.b);
    pairs.push_back(std::move(pair));
  }
  if (pairs.empty()) throw LoraError(fmt::format("[lora] {}: no LoRA pairs", file));
  return pairs;
}

void set_scales(LoraAdapter& adapter) {
  for (LoraPair& p : adapter.pairs) {
    const auto r = static_cast<float>(p.rank);
    // Without alpha (a GGUF adapter may omit it), llama.cpp applies the pair as it is: a scale of 1.
    if (adapter.alpha == 0) {
      p.scale = 1.0f;
    } else {
      p.scale = adapter.rslora ? adapter.alpha / std::sqrt(r) : adapter.alpha / r;
    }
  }
}

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LoraError(fmt::format("[lora] {}: cannot be opened", path.string()));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw LoraError(fmt::format("[lora] {}: not valid JSON: {}", path.string(), e.what()));
  }
}

std::vector<float> safetensors_floats(const detail::SafetensorsTensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.n_elements()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint16_t h = 0;
    switch (t.dtype) {
      case tensor::DType::f32: std::memcpy(&out[i], t.data + i * 4, 4); break;
      case tensor::DType::f16: std::memcpy(&h, t.data + i * 2, 2); out[i] = tensor::f16_to_f32(h); break;
      case tensor::DType::bf16: std::memcpy(&h, t.data + i * 2, 2); out[i] = tensor::bf16_to_f32(h); break;
      default: throw LoraError(fmt::format("[lora] {}: tensor '{}' is not f32, f16 or bf16", t.file.string(), t.name));
    }
  }
  return out;
}

}  // namespace

const char* projection_site_name(ProjectionSite site) {
  switch (site) {
    case ProjectionSite::q: return "q";
    case ProjectionSite::k: return "k";
    case ProjectionSite::v: return "v";
    case ProjectionSite::o: return "o";
    case ProjectionSite::gate: return "gate";
    case ProjectionSite::up: return "up";
    case ProjectionSite::down: return "down";
    case ProjectionSite::output: return "output";
  }
  return "unknown";
}

std::int64_t LoraAdapter::max_rank() const {
  std::int64_t r = 0;
  for (const LoraPair& p : pairs) r = std::max(r, p.rank);
  return r;
}

std::size_t LoraAdapter::bytes() const {
  std::size_t n = 0;
  for (const LoraPair& p : pairs) n += (p.a.size() + p.b.size()) * sizeof(float);
  return n;
}

void LoraAdapter::build_index(std::int32_t n_layer) {
  static std::atomic<std::uint64_t> next_uid{1};
  uid_ = next_uid.fetch_add(1);
  index_.assign(static_cast<std::size_t>(n_layer + 1) * kSites, -1);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::size_t s = slot(pairs[i].site, pairs[i].layer);
    if (s >= index_.size()) {
      throw LoraError(fmt::format("[lora] {}: layer {} past the base's {} layers", path.string(), pairs[i].layer, n_layer));
    }
    index_[s] = static_cast<std::int32_t>(i);
  }
}

std::shared_ptr<LoraAdapter> read_peft_adapter(const std::filesystem::path& folder_or_config) {
  std::filesystem::path folder = folder_or_config;
  if (std::filesystem::is_regular_file(folder) && folder.filename() == "adapter_config.json") folder = folder.parent_path();
  const std::filesystem::path config_path = folder / "adapter_config.json";
  if (!std::filesystem::exists(config_path)) {
    throw LoraError(fmt::format("[lora] {}: adapter_config.json is missing", folder.string()));
  }
  const json config = read_json(config_path);
  const std::string cfg = config_path.string();
  if (!config.is_object()) throw LoraError(fmt::format("[lora] {}: not a JSON object", cfg));
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->path = folder;
  std::filesystem::path stem = folder;
  if (!stem.has_filename()) stem = stem.parent_path();
  adapter->name = stem.filename().string();
  const std::string peft_type = config.value("peft_type", "LORA");
  if (peft_type != "LORA") {
    throw LoraError(fmt::format("[lora] {}: peft_type is \"{}\"; only LORA adapters are supported", cfg, peft_type));
  }
  auto number = [&](const char* key, double fallback) {
    if (!config.contains(key) || config[key].is_null()) return fallback;
    if (!config[key].is_number()) throw LoraError(fmt::format("[lora] {}: \"{}\" must be a number", cfg, key));
    return config[key].get<double>();
  };
  auto flag = [&](const char* key) {
    if (!config.contains(key) || config[key].is_null()) return false;
    if (!config[key].is_boolean()) throw LoraError(fmt::format("[lora] {}: \"{}\" must be true or false", cfg, key));
    return config[key].get<bool>();
  };
  const double r = number("r", 8);
  const double alpha = number("lora_alpha", r);
  if (!(std::fabs(alpha) <= 1e6)) throw LoraError(fmt::format("[lora] {}: \"lora_alpha\" {} outside [-1e6, 1e6]", cfg, alpha));
  adapter->alpha = static_cast<float>(alpha);
  adapter->rslora = flag("use_rslora");
  if (flag("use_dora")) throw LoraError(fmt::format("[lora] {}: DoRA adapters (use_dora) are not supported", cfg));
  if (flag("fan_in_fan_out")) {
    throw LoraError(fmt::format("[lora] {}: fan_in_fan_out adapters (Conv1D bases) are not supported", cfg));
  }
  if (flag("lora_bias") || config.value("bias", "none") != "none") {
    throw LoraError(fmt::format("[lora] {}: adapters with biases (bias, lora_bias) are not supported", cfg));
  }
  if (config.contains("modules_to_save") && config["modules_to_save"].is_array() && !config["modules_to_save"].empty()) {
    throw LoraError(fmt::format("[lora] {}: modules_to_save (whole weights saved beside the pairs) is not supported", cfg));
  }
  if (config.contains("alpha_pattern") && config["alpha_pattern"].is_object() && !config["alpha_pattern"].empty()) {
    throw LoraError(fmt::format("[lora] {}: per-module alpha (alpha_pattern) is not supported", cfg));
  }
  if (config.contains("target_modules") && config["target_modules"].is_array()) {
    for (const json& m : config["target_modules"]) {
      if (!m.is_string() || !known_target_module(m.get<std::string>())) {
        throw LoraError(fmt::format("[lora] {}: unknown target module {} (known: q_proj, k_proj, v_proj, o_proj, "
                                    "gate_proj, up_proj, down_proj, lm_head)",
                                    cfg, m.dump()));
      }
    }
  }

  const std::filesystem::path weights = folder / "adapter_model.safetensors";
  if (!std::filesystem::exists(weights)) {
    throw LoraError(fmt::format("[lora] {}: adapter_model.safetensors is missing", folder.string()));
  }
  std::optional<detail::SafetensorsFile> file;
  try {
    file.emplace(weights);
  } catch (const ModelError& e) {
    throw LoraError(fmt::format("[lora] {}", e.what()));
  }
  static const std::regex kName(R"(^base_model\.model\.(model\.layers\.(\d+)\.([a-z_0-9]+\.[a-z_0-9]+)|lm_head)\.lora_([AB])\.weight$)");
  std::map<PairKey, PendingPair> pending;
  for (const auto& [name, t] : file->tensors()) {
    std::smatch m;
    if (!std::regex_match(name, m, kName)) {
      throw LoraError(fmt::format("[lora] {}: tensor '{}' is not a LoRA pair of a known target module "
                                  "(q/k/v/o_proj, gate/up/down_proj, lm_head)",
                                  weights.string(), name));
    }
    PairKey key{-1, ProjectionSite::output};
    if (m[1] != "lm_head") {
      const std::string module = m[3];
      const SiteName* site = nullptr;
      for (const SiteName& s : kSites) {
        if (module == s.peft) site = &s;
      }
      if (site == nullptr) {
        throw LoraError(fmt::format("[lora] {}: tensor '{}': unknown target module '{}'", weights.string(), name, module));
      }
      key = {std::stoi(m[2]), site->site};
    }
    if (t.shape.size() != 2) {
      throw LoraError(fmt::format("[lora] {}: tensor '{}' has {} dims, expected 2", weights.string(), name, t.shape.size()));
    }
    PendingPair& p = pending[key];
    if (m[4] == "A") {
      p.a = safetensors_floats(t);
      p.a_rows = t.shape[0];
      p.a_cols = t.shape[1];
      p.a_name = name;
    } else {
      p.b = safetensors_floats(t);
      p.b_rows = t.shape[0];
      p.b_cols = t.shape[1];
      p.b_name = name;
    }
  }
  adapter->pairs = finish_pairs(pending, weights.string());
  adapter->qk_layout = pal::RopeLayout::neox;
  set_scales(*adapter);
  return adapter;
}

std::shared_ptr<LoraAdapter> read_gguf_adapter(const std::filesystem::path& path) {
  std::optional<tensor::gguf::File> file;
  try {
    file.emplace(tensor::gguf::File::open(path));
  } catch (const tensor::Error& e) {
    throw LoraError(fmt::format("[lora] {}", e.what()));
  }
  const std::string where = path.string();
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->path = path;
  adapter->name = path.stem().string();
  try {
    const tensor::gguf::Value* type = file->find("general.type");
    if (type == nullptr || type->as_string("general.type") != "adapter") {
      throw LoraError(fmt::format("[lora] {}: general.type is not \"adapter\" (a model, not an adapter?)", where));
    }
    const tensor::gguf::Value* atype = file->find("adapter.type");
    if (atype == nullptr || atype->as_string("adapter.type") != "lora") {
      throw LoraError(fmt::format("[lora] {}: adapter.type is not \"lora\"", where));
    }
    adapter->architecture = file->at("general.architecture").as_string("general.architecture");
    const tensor::gguf::Value* alpha = file->find("adapter.lora.alpha");
    const double a = alpha != nullptr ? alpha->as_float("adapter.lora.alpha") : 0.0;
    if (!(std::fabs(a) <= 1e6)) throw LoraError(fmt::format("[lora] {}: adapter.lora.alpha {} outside [-1e6, 1e6]", where, a));
    adapter->alpha = static_cast<float>(a);
  } catch (const tensor::Error& e) {
    throw LoraError(fmt::format("[lora] {}: {}", where, e.what()));
  }
  Architecture arch = Architecture::llama;
  try {
    arch = architecture_from_name(adapter->architecture);
  } catch (const ModelError&) {
    throw LoraError(fmt::format("[lora] {}: an adapter for architecture '{}', which Orchard does not run", where,
                                adapter->architecture));
  }
  adapter->qk_layout = model_detail::gguf_rope_is_neox(arch) ? pal::RopeLayout::neox : pal::RopeLayout::gptj;

  static const std::regex kName(R"(^(blk\.(\d+)\.([a-z_0-9]+)|output)\.weight\.lora_([ab])$)");
  std::map<PairKey, PendingPair> pending;
  for (const tensor::gguf::TensorInfo& t : file->tensors()) {
    std::smatch m;
    if (!std::regex_match(t.name, m, kName)) {
      throw LoraError(fmt::format("[lora] {}: tensor '{}' is not a LoRA pair of a known projection "
                                  "(attn_q/k/v/output, ffn_gate/up/down, output)",
                                  where, t.name));
    }
    PairKey key{-1, ProjectionSite::output};
    if (m[1] != "output") {
      const std::string module = m[3];
      const SiteName* site = nullptr;
      for (const SiteName& s : kSites) {
        if (module == s.gguf) site = &s;
      }
      if (site == nullptr) {
        throw LoraError(fmt::format("[lora] {}: tensor '{}': unknown target module '{}'", where, t.name, module));
      }
      key = {std::stoi(m[2]), site->site};
    }
    if (t.dims.size() != 2) {
      throw LoraError(fmt::format("[lora] {}: tensor '{}' has {} dims, expected 2", where, t.name, t.dims.size()));
    }
    const std::optional<tensor::DType> dtype = tensor::dtype_from_ggml(t.type);
    if (!dtype || t.n_bytes == 0) {
      throw LoraError(fmt::format("[lora] {}: tensor '{}' has ggml type {} ({}), which Orchard does not read", where,
                                  t.name, t.type, tensor::gguf::ggml_type_name(t.type)));
    }
    const auto cols = static_cast<std::int64_t>(t.dims[0]), rows = static_cast<std::int64_t>(t.dims[1]);
    std::vector<float> values(static_cast<std::size_t>(rows * cols));
    const std::span<const std::uint8_t> bytes = file->tensor_data(t);
    const std::size_t row = tensor::row_bytes(*dtype, cols);
    for (std::int64_t r = 0; r < rows; ++r) {
      kernels::dequantize_row_ref(*dtype, bytes.data() + static_cast<std::size_t>(r) * row,
                                  values.data() + r * cols, cols);
    }
    PendingPair& p = pending[key];
    if (m[4] == "a") {
      p.a = std::move(values);
      p.a_rows = rows;
      p.a_cols = cols;
      p.a_name = t.name;
    } else {
      p.b = std::move(values);
      p.b_rows = rows;
      p.b_cols = cols;
      p.b_name = t.name;
    }
  }
  adapter->pairs = finish_pairs(pending, where);
  set_scales(*adapter);
  return adapter;
}

std::shared_ptr<LoraAdapter> read_lora_adapter(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path) || path.filename() == "adapter_config.json") return read_peft_adapter(path);
  if (!std::filesystem::exists(path)) throw LoraError(fmt::format("[lora] {}: no such file or folder", path.string()));
  return read_gguf_adapter(path);
}

}  // namespace pie
