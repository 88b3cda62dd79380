// Reading and fitting adapters: PEFT folders and GGUF adapters read as their files say (ranks, alpha,
// rsLoRA scales, pairs by site and layer), and a typed LoraError naming the file and what is wrong for
// every bad input: shapes that do not fit the base, an unknown target module, another architecture,
// NaN / Inf weights, a rank over 256, a pair without its partner, missing or malformed files, options
// Orchard does not apply (DoRA, biases).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "lora_test_util.h"
#include "pie/lora.h"
#include "tensor/gguf.h"

namespace pie::testing {
namespace {

std::vector<std::uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A copy of a committed adapter whose files a test rewrites.
struct AdapterCopy {
  TempDir dir;
  explicit AdapterCopy(const std::string& model, const std::string& adapter) : dir("lora-" + adapter) {
    for (const char* f : {"adapter_config.json", "adapter_model.safetensors"}) {
      std::filesystem::copy_file(adapter_dir(model, adapter) / f, dir.path / f);
    }
  }
  nlohmann::json config() const { return read_json_file(dir.path / "adapter_config.json"); }
  void set_config(const nlohmann::json& j) const { dir.write("adapter_config.json", j.dump()); }
  std::map<std::string, StTensor> tensors() const { return read_safetensors(dir.path / "adapter_model.safetensors"); }
  void set_tensors(const std::map<std::string, StTensor>& t) const {
    write_safetensors(dir.path / "adapter_model.safetensors", t);
  }
};

// The message of the LoraError `fn` throws ("" when it throws none).
template <typename Fn>
std::string lora_error(Fn&& fn) {
  try {
    fn();
  } catch (const LoraError& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kQA = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
constexpr const char* kQB = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";

TEST(LoraFormat, PeftFolderReadAsWritten) {
  const auto a = read_lora_adapter(adapter_dir("llama", "a"));
  EXPECT_EQ(a->name, "a");
  EXPECT_EQ(a->alpha, 8.0f);
  EXPECT_FALSE(a->rslora);
  EXPECT_EQ(a->pairs.size(), 2u * 4u);  // 2 layers x q, k, v, o
  for (const LoraPair& p : a->pairs) {
    EXPECT_EQ(p.rank, 4);
    EXPECT_FLOAT_EQ(p.scale, 2.0f);  // alpha / r
    EXPECT_EQ(p.a.size(), static_cast<std::size_t>(p.rank * p.n_in));
    EXPECT_EQ(p.b.size(), static_cast<std::size_t>(p.n_out * p.rank));
  }
  const auto b = read_lora_adapter(adapter_dir("llama", "b") / "adapter_config.json");
  EXPECT_TRUE(b->rslora);
  EXPECT_FLOAT_EQ(b->pairs[0].scale, 16.0f / std::sqrt(7.0f));  // alpha / sqrt(r)
  const auto c = read_lora_adapter(adapter_dir("llama", "c"));
  EXPECT_EQ(c->pairs.size(), 2u * 7u + 1u);  // and lm_head
  EXPECT_EQ(c->max_rank(), 2);
}

TEST(LoraFormat, FittedLookupFindsEachPair) {
  const auto model = load_hf_model(test_model_dir("llama"));
  const auto c = load_lora_adapter(adapter_dir("llama", "c"), *model);
  ASSERT_NE(c->pair(ProjectionSite::output, -1), nullptr);
  EXPECT_EQ(c->pair(ProjectionSite::output, -1)->n_out, model->config.n_vocab);
  ASSERT_NE(c->pair(ProjectionSite::down, 1), nullptr);
  EXPECT_EQ(c->pair(ProjectionSite::down, 1)->n_in, model->config.n_ff);
  const auto a = load_lora_adapter(adapter_dir("llama", "a"), *model);
  EXPECT_EQ(a->pair(ProjectionSite::gate, 0), nullptr);
  EXPECT_EQ(a->pair(ProjectionSite::output, -1), nullptr);
}

TEST(LoraFormat, ShapesThatDoNotFitTheBase) {
  const auto qwen2 = load_hf_model(test_model_dir("qwen2"));
  const std::string e = lora_error([&] { load_lora_adapter(adapter_dir("llama", "a"), *qwen2); });
  EXPECT_NE(e.find("the base weight is"), std::string::npos) << e;
  EXPECT_NE(e.find("layer 0 q"), std::string::npos) << e;
}

TEST(LoraFormat, LayerTheBaseLacks) {
  AdapterCopy copy("llama", "a");
  auto t = copy.tensors();
  t["base_model.model.model.layers.9.self_attn.q_proj.lora_A.weight"] = t.at(kQA);
  t["base_model.model.model.layers.9.self_attn.q_proj.lora_B.weight"] = t.at(kQB);
  copy.set_tensors(t);
  const auto model = load_hf_model(test_model_dir("llama"));
  const std::string e = lora_error([&] { load_lora_adapter(copy.dir.path, *model); });
  EXPECT_NE(e.find("layer 9"), std::string::npos) << e;
}

TEST(LoraFormat, UnknownTargetModule) {
  AdapterCopy copy("llama", "a");
  nlohmann::json j = copy.config();
  j["target_modules"] = {"q_proj", "fc1"};
  copy.set_config(j);
  std::string e = lora_error([&] { read_lora_adapter(copy.dir.path); });
  EXPECT_NE(e.find("unknown target module \"fc1\""), std::string::npos) << e;

  AdapterCopy tensors("llama", "a");
  auto t = tensors.tensors();
  t["base_model.model.model.layers.0.mlp.fc1.lora_A.weight"] = t.at(kQA);
  tensors.set_tensors(t);
  e = lora_error([&] { read_lora_adapter(tensors.dir.path); });
  EXPECT_NE(e.find("mlp.fc1"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown target module"), std::string::npos) << e;
}

TEST(LoraFormat, AdapterForAnotherArchitecture) {
  const auto llama = load_hf_model(test_model_dir("llama"));
  const auto qwen2 = load_hf_model(test_model_dir("qwen2"));
  TempDir dir("lora-arch");
  write_gguf_adapter(*load_lora_adapter(adapter_dir("qwen2", "a"), *qwen2), *qwen2, dir.path / "a.gguf");
  const std::string e = lora_error([&] { load_lora_adapter(dir.path / "a.gguf", *llama); });
  EXPECT_NE(e.find("an adapter for qwen2"), std::string::npos) << e;
  EXPECT_NE(e.find("is llama"), std::string::npos) << e;
}

TEST(LoraFormat, NanOrInfWeights) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    AdapterCopy copy("llama", "a");
    auto t = copy.tensors();
    std::memcpy(t.at(kQB).bytes.data() + 4 * 5, &bad, 4);
    copy.set_tensors(t);
    const std::string e = lora_error([&] { read_lora_adapter(copy.dir.path); });
    EXPECT_NE(e.find("element 5 is"), std::string::npos) << e;
    EXPECT_NE(e.find("q_proj.lora_B"), std::string::npos) << e;
  }
}

TEST(LoraFormat, RankOver256) {
  AdapterCopy copy("llama", "a");
  auto t = copy.tensors();
  t[kQA] = {"F32", {257, 48}, f32_bytes(std::vector<float>(257 * 48, 0.01f))};
  t[kQB] = {"F32", {48, 257}, f32_bytes(std::vector<float>(48 * 257, 0.01f))};
  copy.set_tensors(t);
  const std::string e = lora_error([&] { read_lora_adapter(copy.dir.path); });
  EXPECT_NE(e.find("rank 257 outside [1, 256]"), std::string::npos) << e;
}

TEST(LoraFormat, PairsMustBeWholeAndAgreeOnRank) {
  AdapterCopy lone("llama", "a");
  auto t = lone.tensors();
  t.erase(kQB);
  lone.set_tensors(t);
  std::string e = lora_error([&] { read_lora_adapter(lone.dir.path); });
  EXPECT_NE(e.find("has no lora_B"), std::string::npos) << e;

  AdapterCopy ranks("llama", "a");
  t = ranks.tensors();
  t[kQB] = {"F32", {48, 3}, f32_bytes(std::vector<float>(48 * 3, 0.01f))};
  ranks.set_tensors(t);
  e = lora_error([&] { read_lora_adapter(ranks.dir.path); });
  EXPECT_NE(e.find("has rank 4"), std::string::npos) << e;
  EXPECT_NE(e.find("has rank 3"), std::string::npos) << e;
}

TEST(LoraFormat, MissingAndMalformedFiles) {
  TempDir dir("lora-files");
  EXPECT_NE(lora_error([&] { read_lora_adapter(dir.path / "nothing"); }).find("no such file"), std::string::npos);
  EXPECT_NE(lora_error([&] { read_lora_adapter(dir.path); }).find("adapter_config.json is missing"), std::string::npos);
  dir.write("adapter_config.json", "{not json");
  EXPECT_NE(lora_error([&] { read_lora_adapter(dir.path); }).find("not valid JSON"), std::string::npos);
  dir.write("adapter_config.json", R"({"r": 4, "lora_alpha": 8})");
  EXPECT_NE(lora_error([&] { read_lora_adapter(dir.path); }).find("adapter_model.safetensors is missing"),
            std::string::npos);
  dir.write("adapter_config.json", R"({"r": 4, "lora_alpha": 1e300})");
  EXPECT_NE(lora_error([&] { read_lora_adapter(dir.path); }).find("outside [-1e6, 1e6]"), std::string::npos);
  dir.write("adapter_config.json", R"({"r": 4, "lora_alpha": "eight"})");
  EXPECT_NE(lora_error([&] { read_lora_adapter(dir.path); }).find("\"lora_alpha\" must be a number"),
            std::string::npos);
  dir.write("adapter_model.safetensors", "short");
  dir.write("adapter_config.json", R"({"r": 4, "lora_alpha": 8})");
  EXPECT_NE(lora_error([&] { read_lora_adapter(dir.path); }), "");
  dir.write("x.gguf", "GGUF but not really");
  EXPECT_NE(lora_error([&] { read_lora_adapter(dir.path / "x.gguf"); }), "");
}

TEST(LoraFormat, OptionsOrchardDoesNotApply) {
  for (const char* key : {"use_dora", "lora_bias", "fan_in_fan_out"}) {
    AdapterCopy copy("llama", "a");
    nlohmann::json j = copy.config();
    j[key] = true;
    copy.set_config(j);
    EXPECT_NE(lora_error([&] { read_lora_adapter(copy.dir.path); }).find(key), std::string::npos) << key;
  }
  AdapterCopy ia3("llama", "a");
  nlohmann::json j = ia3.config();
  j["peft_type"] = "IA3";
  ia3.set_config(j);
  EXPECT_NE(lora_error([&] { read_lora_adapter(ia3.dir.path); }).find("only LORA"), std::string::npos);
}

TEST(LoraFormat, GgufModelIsNotAnAdapter) {
  TempDir dir("lora-gguf-model");
  const auto llama = load_model_with_tokenizer("llama", dir);
  write_gguf_model(*llama, dir.path / "model.gguf", {.type = tensor::DType::f32});
  const std::string e = lora_error([&] { read_lora_adapter(dir.path / "model.gguf"); });
  EXPECT_NE(e.find("general.type is not \"adapter\""), std::string::npos) << e;
}

TEST(LoraFormat, GgufAdapterReadAsWritten) {
  const auto llama = load_hf_model(test_model_dir("llama"));
  const auto b = load_lora_adapter(adapter_dir("llama", "b"), *llama);
  TempDir dir("lora-gguf-read");
  write_gguf_adapter(*b, *llama, dir.path / "b.gguf");
  const auto file = tensor::gguf::File::open(dir.path / "b.gguf");
  EXPECT_EQ(file.at("general.type").as_string("general.type"), "adapter");
  EXPECT_EQ(file.at("adapter.type").as_string("adapter.type"), "lora");
  // rsLoRA folded into alpha: alpha' / r = alpha / sqrt(r).
  EXPECT_NEAR(file.at("adapter.lora.alpha").as_float("alpha"), 16.0 * std::sqrt(7.0), 1e-4);
  const auto* a0 = file.find_tensor("blk.0.ffn_down.weight.lora_a");
  ASSERT_NE(a0, nullptr);
  EXPECT_EQ(a0->dims, (std::vector<std::uint64_t>{96, 7}));  // GGUF order: [n_in, rank]
  const auto back = read_lora_adapter(dir.path / "b.gguf");
  EXPECT_EQ(back->pairs.size(), b->pairs.size());
  EXPECT_NEAR(back->pairs[0].scale, b->pairs[0].scale, 1e-6);
  // A GGUF adapter with an unknown tensor.
  tensor::gguf::Writer w;
  w.set("general.architecture", tensor::gguf::make_string("llama"));
  w.set("general.type", tensor::gguf::make_string("adapter"));
  w.set("adapter.type", tensor::gguf::make_string("lora"));
  w.add_tensor("blk.0.attn_qkv.weight.lora_a", {48, 4}, 0, f32_bytes(std::vector<float>(48 * 4, 0.1f)));
  w.write(dir.path / "odd.gguf");
  const std::string e = lora_error([&] { read_lora_adapter(dir.path / "odd.gguf"); });
  EXPECT_NE(e.find("unknown target module 'attn_qkv'"), std::string::npos) << e;
}

}  // namespace
}  // namespace pie::testing
