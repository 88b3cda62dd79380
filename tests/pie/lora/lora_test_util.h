// Helpers of the LoRA tests: the committed adapters and their transformers + PEFT goldens.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runner_test_util.h"

namespace pie::testing {

inline std::filesystem::path adapter_dir(const std::string& model, const std::string& adapter) {
  return std::filesystem::path(ORCHARD_LORA_TEST_ADAPTERS) / model / adapter;
}

struct LoraCase {
  std::string name;
  std::vector<std::pair<std::string, float>> adapters;  // (adapter, scale)
  std::vector<std::vector<float>> logits;               // [positions][n_vocab]
};

struct LoraGolden {
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> logit_positions;
  std::vector<LoraCase> cases;
  const LoraCase& get(const std::string& name) const {
    for (const LoraCase& c : cases) {
      if (c.name == name) return c;
    }
    throw std::runtime_error("no golden case " + name);
  }
};

// The model in `dir` with a byte-level tokenizer of its 256 tokens (written there), so that it can be
// written as GGUF (which carries a tokenizer).
inline std::shared_ptr<const Model> load_with_byte_tokenizer(const TempDir& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  std::int32_t extra = 0;
  for (std::int32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const std::uint32_t cp = printable ? static_cast<std::uint32_t>(b) : 256u + static_cast<std::uint32_t>(extra++);
    std::string utf8;
    if (cp < 0x80) {
      utf8.push_back(static_cast<char>(cp));
    } else {
      utf8.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      utf8.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab[utf8] = b;
  }
  const nlohmann::json tok = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  dir.write("tokenizer.json", tok.dump());
  return load_hf_model(dir.path);
}
inline std::shared_ptr<const Model> load_model_with_tokenizer(const std::string& name, const TempDir& dir) {
  dir.copy_model(name);
  return load_with_byte_tokenizer(dir);
}

inline LoraGolden load_lora_golden(const std::string& model) {
  const nlohmann::json j = read_json_file(std::filesystem::path(ORCHARD_LORA_TEST_ADAPTERS) / model / "golden.json");
  LoraGolden g;
  g.prompt = j.at("prompt").get<std::vector<std::int32_t>>();
  g.logit_positions = j.at("logit_positions").get<std::vector<std::int32_t>>();
  for (const auto& c : j.at("cases")) {
    LoraCase lc;
    lc.name = c.at("name").get<std::string>();
    for (const auto& a : c.at("adapters")) lc.adapters.emplace_back(a.at("name").get<std::string>(), a.at("scale").get<float>());
    lc.logits = c.at("logits").get<std::vector<std::vector<float>>>();
    g.cases.push_back(std::move(lc));
  }
  return g;
}

}  // namespace pie::testing
