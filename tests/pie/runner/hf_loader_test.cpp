// The Hugging Face loader: config.json of each architecture (transformers 5 rope_parameters and 4.x
// rope_theta / rope_scaling), single and sharded safetensors, F16 / BF16 weights, tokenizer.json and the
// chat template, and every error path (ModelError naming the file and the field or tensor).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "pie/error.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "runner_test_util.h"
#include "shared_data.h"
#include "tensor/half.h"

namespace pie::testing {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

TEST(HfLoaderTest, LlamaConfigAndWeights) {
  const auto m = load_hf_model(test_model_dir("llama"));
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Architecture::llama);
  EXPECT_EQ(c.n_vocab, 256);
  EXPECT_EQ(c.n_embd, 48);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.head_dim, 12);
  EXPECT_EQ(c.n_ff, 96);
  EXPECT_EQ(c.context_length, 128);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.rope.layout, pal::RopeLayout::neox);
  EXPECT_EQ(c.rope.rotary_dim, 12);
  EXPECT_EQ(c.rope.scaling, pal::RopeScaling::llama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.llama3_low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.llama3_high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position, 32);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_NE(m->weights.output.data(), m->weights.token_embd.data());
  EXPECT_EQ(m->weights.layers.size(), 2u);
  EXPECT_EQ(pie::n_out(m->weights.layers[1].wk), 24);
  EXPECT_EQ(m->weights.layers[1].wk.dtype(), tensor::DType::f32);
  EXPECT_FALSE(m->weights.layers[0].bq);
  EXPECT_EQ(m->tokenizer, nullptr);
  EXPECT_TRUE(m->chat_template.empty());
  EXPECT_EQ(m->name, "llama");
}

TEST(HfLoaderTest, MistralQwen2Qwen3Configs) {
  const auto mistral = load_hf_model(test_model_dir("mistral"));
  EXPECT_EQ(mistral->config.arch, Architecture::mistral);
  EXPECT_EQ(mistral->config.sliding_window, 24);
  EXPECT_EQ(mistral->config.n_kv_head, 1);
  EXPECT_DOUBLE_EQ(mistral->config.rope.theta, 1e6);
  EXPECT_EQ(mistral->config.rope.scaling, pal::RopeScaling::none);

  const auto qwen2 = load_hf_model(test_model_dir("qwen2"));
  EXPECT_EQ(qwen2->config.arch, Architecture::qwen2);
  EXPECT_TRUE(qwen2->config.attention_bias);
  EXPECT_TRUE(qwen2->config.tied_embeddings);
  EXPECT_EQ(qwen2->config.sliding_window, 0);
  EXPECT_EQ(qwen2->weights.output.data(), qwen2->weights.token_embd.data());
  EXPECT_TRUE(qwen2->weights.layers[0].bq && qwen2->weights.layers[0].bk && qwen2->weights.layers[0].bv);
  EXPECT_EQ(pie::n_in(qwen2->weights.layers[0].bk), 32);

  const auto qwen3 = load_hf_model(test_model_dir("qwen3"));
  EXPECT_EQ(qwen3->config.arch, Architecture::qwen3);
  EXPECT_TRUE(qwen3->config.qk_norm);
  EXPECT_FALSE(qwen3->config.attention_bias);
  EXPECT_EQ(qwen3->config.head_dim, 64);
  EXPECT_EQ(qwen3->config.n_embd, 48);
  EXPECT_EQ(pie::n_in(qwen3->weights.layers[1].q_norm), 64);
  EXPECT_EQ(pie::n_out(qwen3->weights.layers[0].wq), 128);
}

TEST(HfLoaderTest, LoadModelRecognisesTheFolder) {
  const auto m = load_model(test_model_dir("qwen3"));
  EXPECT_EQ(m->config.arch, Architecture::qwen3);
  EXPECT_EQ(m->weights.layers.size(), 2u);
}

// The llama test model copied to a temp folder with its config edited.
struct EditedModel {
  TempDir dir{"hf"};
  json config;
  EditedModel() {
    dir.copy_model("llama");
    config = read_json_file(dir.path / "config.json");
  }
  void save() const { dir.write("config.json", config.dump(2)); }
  std::shared_ptr<const Model> load() const {
    save();
    return load_hf_model(dir.path);
  }
  void expect_error(const std::string& needle) const {
    save();
    try {
      load_hf_model(dir.path);
      ADD_FAILURE() << "no error, expected one containing '" << needle << "'";
    } catch (const ModelError& e) {
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  }
};

TEST(HfLoaderTest, Transformers4RopeFields) {
  struct Case {
    json scaling;
    pal::RopeScaling want;
  };
  const std::vector<Case> cases = {
      {json{{"type", "linear"}, {"factor", 2.0}}, pal::RopeScaling::linear},
      {json{{"rope_type", "dynamic"}, {"factor", 4.0}}, pal::RopeScaling::dynamic_ntk},
      {json{{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}, {"beta_fast", 16.0}},
       pal::RopeScaling::yarn},
      {json{{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 2.0}, {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 64}},
       pal::RopeScaling::llama3},
      {json(nullptr), pal::RopeScaling::none},
  };
  for (const Case& c : cases) {
    EditedModel m;
    m.config.erase("rope_parameters");
    m.config["rope_theta"] = 500000.0;
    m.config["rope_scaling"] = c.scaling;
    const auto model = m.load();
    EXPECT_EQ(model->config.rope.scaling, c.want) << c.scaling.dump();
    EXPECT_DOUBLE_EQ(model->config.rope.theta, 500000.0);
    if (c.want == pal::RopeScaling::yarn) {
      EXPECT_EQ(model->config.rope.original_max_position, 64);
      EXPECT_DOUBLE_EQ(model->config.rope.yarn_beta_fast, 16.0);
    }
    if (c.want == pal::RopeScaling::dynamic_ntk) {
      EXPECT_EQ(model->config.rope.original_max_position, 128);
    }
    if (c.want == pal::RopeScaling::llama3) {
      EXPECT_DOUBLE_EQ(model->config.rope.llama3_low_freq_factor, 2.0);
    }
  }
}

std::vector<float> prompt_logits(const std::shared_ptr<const Model>& model, const std::vector<std::int32_t>& prompt) {
  ModelRunner runner(model, nullptr);
  KvCache kv = make_kv(runner, 8);
  Seq s;
  s.id = kv.create();
  s.tokens = prompt;
  auto logits = run_step(runner, kv, {{&s, static_cast<std::int32_t>(prompt.size())}});
  return logits[0].back();
}

TEST(HfLoaderTest, ShardedCheckpointGivesTheSameLogits) {
  const Golden g = load_golden("llama");
  TempDir dir("sharded");
  dir.copy_model("llama");
  std::filesystem::remove(dir.path / "model.safetensors");
  const auto tensors = read_safetensors(test_model_dir("llama") / "model.safetensors");
  std::map<std::string, StTensor> shard[2];
  json weight_map = json::object();
  int i = 0;
  for (const auto& [name, t] : tensors) {
    const int which = i++ % 2;
    shard[which].emplace(name, t);
    weight_map[name] = which == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir.path / "model-00001-of-00002.safetensors", shard[0]);
  write_safetensors(dir.path / "model-00002-of-00002.safetensors", shard[1], 2);  // misaligned f32 data
  dir.write("model.safetensors.index.json", json{{"metadata", json::object()}, {"weight_map", weight_map}}.dump());
  const std::vector<float> want = prompt_logits(load_hf_model(test_model_dir("llama")), g.prompt);
  const std::vector<float> got = prompt_logits(load_hf_model(dir.path), g.prompt);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));

  // An index naming a shard that lacks the tensor, and one escaping the folder.
  weight_map["lm_head.weight"] = "model-00001-of-00002.safetensors";
  if (shard[0].count("lm_head.weight") == 0) {
    dir.write("model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
    try {
      load_hf_model(dir.path);
      ADD_FAILURE() << "no error";
    } catch (const ModelError& e) {
      EXPECT_THAT(e.what(), HasSubstr("weight_map places tensor 'lm_head.weight' in model-00001-of-00002.safetensors, "
                                      "which does not hold it"));
    }
  }
  weight_map["lm_head.weight"] = "../model.safetensors";
  dir.write("model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
  try {
    load_hf_model(dir.path);
    ADD_FAILURE() << "no error";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("names '../model.safetensors', not a file in the folder"));
  }
}

// Every tensor rewritten as F16 or BF16: matrices stay in that type, norms become f32, and the logits stay
// close to transformers' f32 ones (half-precision weights: 3e-2 relative).
TEST(HfLoaderTest, HalfPrecisionWeights) {
  const Golden g = load_golden("llama");
  for (const char* dtype : {"F16", "BF16"}) {
    TempDir dir("half");
    dir.copy_model("llama");
    auto tensors = read_safetensors(test_model_dir("llama") / "model.safetensors");
    for (auto& [name, t] : tensors) {
      std::vector<float> f(t.bytes.size() / 4);
      std::memcpy(f.data(), t.bytes.data(), t.bytes.size());
      t.dtype = dtype;
      t.bytes.resize(f.size() * 2);
      for (std::size_t i = 0; i < f.size(); ++i) {
        const std::uint16_t h = std::string(dtype) == "F16" ? tensor::f32_to_f16(f[i]) : tensor::f32_to_bf16(f[i]);
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
      }
    }
    write_safetensors(dir.path / "model.safetensors", tensors);
    const auto m = load_hf_model(dir.path);
    EXPECT_EQ(m->weights.layers[0].wq.dtype(), std::string(dtype) == "F16" ? tensor::DType::f16 : tensor::DType::bf16);
    EXPECT_EQ(m->weights.layers[0].attn_norm.dtype(), tensor::DType::f32);
    const std::vector<float> got = prompt_logits(m, g.prompt);
    EXPECT_LE(relative_error(got, g.logits.back()), 3e-2) << dtype;
  }
}

TEST(HfLoaderTest, TokenizerAndChatTemplate) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/hf/llama2.tokenizer.json");
  EditedModel m;
  std::filesystem::copy_file(orchard::testing::shared_data("tokenizers/hf/llama2.tokenizer.json"),
                             m.dir.path / "tokenizer.json");
  m.dir.write("tokenizer_config.json", json{{"chat_template", "{{ messages }}"}}.dump());
  auto model = m.load();
  ASSERT_NE(model->tokenizer, nullptr);
  EXPECT_EQ(model->tokenizer->vocab_size(), 32000u);
  EXPECT_FALSE(model->tokenizer->encode("Hello world").empty());
  EXPECT_EQ(model->chat_template, "{{ messages }}");
  // A list of named templates: the default one.
  m.dir.write("tokenizer_config.json",
              json{{"chat_template", json::array({json{{"name", "tool_use"}, {"template", "T"}},
                                                  json{{"name", "default"}, {"template", "D"}}})}}
                  .dump());
  EXPECT_EQ(m.load()->chat_template, "D");
  // chat_template.jinja (transformers 5) wins.
  m.dir.write("chat_template.jinja", "J");
  EXPECT_EQ(m.load()->chat_template, "J");
  std::filesystem::remove(m.dir.path / "chat_template.jinja");
  m.dir.write("tokenizer_config.json", json{{"chat_template", 3}}.dump());
  m.expect_error("\"chat_template\" is neither a string nor a list");
  m.dir.write("tokenizer_config.json", "{}");
  m.dir.write("tokenizer.json", "{\"model\": 5}");
  m.expect_error("tokenizer.json");
}

TEST(HfLoaderTest, ConfigErrors) {
  auto expect = [](const std::function<void(json&)>& edit, const std::string& needle) {
    EditedModel m;
    edit(m.config);
    m.expect_error(needle);
  };
  expect([](json& c) { c["model_type"] = "gpt2"; }, "\"model_type\" is \"gpt2\"; supported: llama, mistral, qwen2, qwen3");
  expect([](json& c) { c.erase("model_type"); }, "\"model_type\" is missing");
  expect([](json& c) { c.erase("hidden_size"); }, "\"hidden_size\" is missing");
  expect([](json& c) { c["hidden_size"] = "48"; }, "\"hidden_size\" must be an integer, got \"48\"");
  expect([](json& c) { c["num_hidden_layers"] = -1; }, "\"num_hidden_layers\" is -1, outside [0, ");
  expect([](json& c) { c["rms_norm_eps"] = "small"; }, "\"rms_norm_eps\" must be a number");
  expect([](json& c) { c["tie_word_embeddings"] = 1; }, "\"tie_word_embeddings\" must be true or false");
  expect([](json& c) { c["hidden_act"] = "gelu"; }, "\"hidden_act\" is \"gelu\"; only silu");
  expect([](json& c) { c["mlp_bias"] = true; }, "\"mlp_bias\" is true");
  expect([](json& c) { c["rope_parameters"]["rope_type"] = "longrope"; },
         "\"rope_parameters.rope_type\" is \"longrope\"; supported");
  expect([](json& c) { c["rope_parameters"].erase("factor"); }, "\"rope_parameters.factor\" is missing");
  expect([](json& c) { c["rope_parameters"]["factor"] = -2.0; }, "rope_parameters\" gives an invalid RoPE configuration");
  expect([](json& c) { c["layer_types"] = {"sliding_attention", "full_attention"}; },
         "\"layer_types\" slides on 1 of 2 layers");
  expect([](json& c) { c["num_key_value_heads"] = 3; }, "config.json");  // ModelConfig::validate, with the file
  expect([](json& c) { c["vocab_size"] = 300; }, "tensor 'model.embed_tokens.weight' has shape [256, 48], expected [300, 48]");

  TempDir dir("cfg");
  try {
    load_hf_model(dir.path / "absent");
    ADD_FAILURE() << "no error";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a folder"));
  }
  try {
    load_hf_model(dir.path);
    ADD_FAILURE() << "no error";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("config.json is missing"));
  }
  dir.write("config.json", "{not json");
  try {
    load_hf_model(dir.path);
    ADD_FAILURE() << "no error";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("config.json: not valid JSON"));
  }
  dir.write("config.json", "[1, 2]");
  try {
    load_hf_model(dir.path);
    ADD_FAILURE() << "no error";
  } catch (const ModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a JSON object"));
  }
}

// Broken safetensors files: each must be a ModelError naming the file and what is wrong.
TEST(HfLoaderTest, SafetensorsErrors) {
  const auto good = read_safetensors(test_model_dir("llama") / "model.safetensors");
  auto expect_bytes = [](const std::string& bytes, const std::string& needle) {
    EditedModel m;
    m.dir.write("model.safetensors", bytes);
    m.expect_error(needle);
  };
  expect_bytes("abcd", "4 bytes is too short for the 8-byte header length");
  expect_bytes(std::string("\xff\x00\x00\x00\x00\x00\x00\x00", 8) + "{}", "header length 255 runs past the file's end");
  expect_bytes(std::string("\x02\x00\x00\x00\x00\x00\x00\x00", 8) + "{x", "header is not valid JSON");
  expect_bytes(std::string("\x02\x00\x00\x00\x00\x00\x00\x00", 8) + "[]", "header is not a JSON object");

  auto expect_tensors = [](const std::function<void(std::map<std::string, StTensor>&)>& edit, const std::string& needle) {
    EditedModel m;
    auto t = read_safetensors(test_model_dir("llama") / "model.safetensors");
    edit(t);
    write_safetensors(m.dir.path / "model.safetensors", t);
    m.expect_error(needle);
  };
  expect_tensors([](auto& t) { t.erase("lm_head.weight"); }, "tensor 'lm_head.weight' is missing");
  expect_tensors([](auto& t) { t["model.norm.weight"].shape = {6, 8}; },
                 "tensor 'model.norm.weight' has shape [6, 8], expected [48]");
  expect_tensors([](auto& t) { t["model.norm.weight"].dtype = "I32"; }, "tensor 'model.norm.weight': dtype I32 is not supported");
  expect_tensors([](auto& t) { t["model.norm.weight"].shape = {47}; },
                 "tensor 'model.norm.weight': shape [47] of f32 needs 188 bytes, data_offsets give 192");

  // data_offsets past the end of the file.
  {
    EditedModel m;
    json header = {{"x", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}}};
    std::string text = header.dump();
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(text.size());
    bytes += text + std::string(8, '\0');
    m.dir.write("model.safetensors", bytes);
    m.expect_error("tensor 'x': data_offsets [0, 16) lie outside the 8 data bytes");
  }
  {
    EditedModel m;
    std::filesystem::remove(m.dir.path / "model.safetensors");
    m.expect_error("neither model.safetensors nor model.safetensors.index.json is there");
  }
  EXPECT_FALSE(good.empty());
}

}  // namespace
}  // namespace pie::testing
