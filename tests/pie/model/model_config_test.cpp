// Architecture names, ModelConfig::validate, Model::describe.
#include <gtest/gtest.h>

#include "model_test_util.h"
#include "pie/error.h"
#include "pie/model.h"

namespace {

TEST(Architecture, NamesRoundTrip) {
  for (auto a : {pie::Architecture::llama, pie::Architecture::mistral, pie::Architecture::qwen2, pie::Architecture::qwen3}) {
    EXPECT_EQ(pie::architecture_from_name(pie::architecture_name(a)), a);
  }
  EXPECT_STREQ(pie::architecture_name(pie::Architecture::qwen2), "qwen2");
  // Architectures without a forward pass are refused by name, saying which are supported.
  for (const char* name : {"gptj", "gemma2", "phi3"}) {
    try {
      pie::architecture_from_name(name);
      FAIL() << "no error for " << name;
    } catch (const pie::ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("architecture '") + name + "' is not supported"),
                std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("llama, mistral, qwen2, qwen3"), std::string::npos) << e.what();
    }
  }
}

std::string validate_error(const pie::ModelConfig& c) {
  try {
    c.validate();
  } catch (const pie::ModelError& e) {
    return e.what();
  }
  return "valid";
}

TEST(ModelConfig, Validate) {
  const pie::ModelConfig good = model_test::llama_config(512, 256, 512, 4, 2, 1);
  EXPECT_EQ(validate_error(good), "valid");
  pie::ModelConfig c = good;
  c.n_kv_head = 3;
  EXPECT_NE(validate_error(c).find("n_kv_head: 3 does not divide n_head 4"), std::string::npos);
  c = good;
  c.n_vocab = 0;
  EXPECT_NE(validate_error(c).find("n_vocab: must be positive, got 0"), std::string::npos);
  c = good;
  c.rope.head_dim = 32;
  EXPECT_NE(validate_error(c).find("rope.head_dim: 32 differs from head_dim 64"), std::string::npos);
  c = good;
  c.rope.rotary_dim = 65;
  EXPECT_NE(validate_error(c).find("[model config] rope:"), std::string::npos);
  c = good;
  c.norm_eps = 0;
  EXPECT_NE(validate_error(c).find("norm_eps"), std::string::npos);
  c = good;
  c.final_logit_softcap = -1;
  EXPECT_NE(validate_error(c).find("final_logit_softcap"), std::string::npos);
  c = good;
  c.sliding_window = -4;
  EXPECT_NE(validate_error(c).find("sliding_window"), std::string::npos);
}

TEST(Model, DescribeCountsTypes) {
  pie::ModelConfig c = model_test::llama_config(16, 32, 64, 4, 4, 2);
  c.tied_embeddings = true;
  auto m = model_test::make_model(c, nullptr);
  // Only the label matters here: the same bytes viewed as another type.
  auto retype = [](const pie::Weight& w, tensor::DType t) {
    return pie::weight_view(w.data(), w.nbytes(), t, pie::n_out(w), pie::n_in(w));
  };
  m->weights.layers[0].wq = retype(m->weights.layers[0].wq, tensor::DType::q8_0);
  m->weights.layers[1].wq = retype(m->weights.layers[1].wq, tensor::DType::q8_0);
  m->weights.layers[1].wk = retype(m->weights.layers[1].wk, tensor::DType::f16);
  // token_embd + output_norm + 2 * 9 per layer; the tied output is not counted twice.
  EXPECT_EQ(m->describe(), "f32: 17, q8_0: 2, f16: 1");
}

}  // namespace
