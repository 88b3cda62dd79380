// write_gguf_embedding_model (pie/embedding_convert.h): all-MiniLM-L6-v2 (skipped when absent) written as
// llama.cpp's bert GGUF reads back as the same encoder (config, pooling, name) and embeds bit for bit as the
// folder does in f32, within cosine 0.9999 in f16; what cannot be written is refused by name: a decoder used
// as an embedder, a matrix type other than f16 and f32.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "embedding_model.h"
#include "pie/embedding.h"
#include "pie/embedding_convert.h"
#include "pie/engine.h"
#include "pie/error.h"
#include "tensor/gguf.h"

namespace {

namespace fs = std::filesystem;

fs::path temp_gguf(const char* what) {
  return fs::temp_directory_path() / (std::string("orchard_encoder_") + what + "_" + std::to_string(::getpid()) + ".gguf");
}

void expect_model_error(const std::function<void()>& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one saying '" << words << "')";
  } catch (const pie::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(EncoderGguf, MiniLmReadsBackAndEmbedsAsTheFolder) {
  ORCHARD_REQUIRE_EMBEDDING_MODEL();
  const auto folder = pie::load_embedding_model(orchard::testing::embedding_model_path());
  const fs::path path = temp_gguf("minilm");
  pie::ConvertOptions f32;
  f32.type = tensor::DType::f32;
  pie::write_gguf_embedding_model(*folder, path, f32);
  ASSERT_TRUE(pie::is_embedding_model_path(path));
  const tensor::gguf::File file = tensor::gguf::File::open(path);
  EXPECT_EQ(file.at("tokenizer.ggml.model").as_string("m"), "bert");
  EXPECT_EQ(file.at("bert.pooling_type").as_int("p"), 1);  // mean, from 1_Pooling/config.json
  EXPECT_EQ(file.at("general.file_type").as_int("t"), 0);   // f32
  const auto gguf = pie::load_embedding_model(path);
  EXPECT_EQ(gguf->name, folder->name);
  EXPECT_EQ(gguf->pooling, pie::Pooling::mean);
  EXPECT_EQ(gguf->encoder->n_layer, folder->encoder->n_layer);
  EXPECT_EQ(gguf->encoder->n_vocab, folder->encoder->n_vocab);
  EXPECT_EQ(gguf->encoder->n_token_types, folder->encoder->n_token_types);
  EXPECT_FLOAT_EQ(gguf->encoder->norm_eps, folder->encoder->norm_eps);
  pie::Embedder a(folder, 2), b(gguf, 2);
  const std::vector<std::string> texts = {"A man is eating food.", "Müller's café, 東京, and 3.75%!",
                                          "unaffable tokenization"};
  const auto want = a.embed(texts).embeddings;
  EXPECT_EQ(b.embed(texts).embeddings, want);
  // f16 (the default): half the size, the same vectors within cosine 0.9999.
  const fs::path half = temp_gguf("minilm_f16");
  pie::write_gguf_embedding_model(*folder, half, {});
  EXPECT_EQ(tensor::gguf::File::open(half).at("general.file_type").as_int("t"), 1);
  EXPECT_LT(fs::file_size(half), fs::file_size(path) * 6 / 10);
  pie::Embedder c(pie::load_embedding_model(half), 2);
  const auto got = c.embed(texts).embeddings;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    double dot = 0;
    for (std::size_t k = 0; k < got[i].size(); ++k) dot += static_cast<double>(got[i][k]) * want[i][k];
    EXPECT_GE(dot, 0.9999) << texts[i];  // both normalized
    EXPECT_NE(got[i], want[i]) << "f16 changed nothing: " << texts[i];
  }
  fs::remove(half);
  // Only f16 or f32 matrices: another type is refused by name, nothing written.
  const fs::path other = temp_gguf("q8");
  pie::ConvertOptions q8;
  q8.type = tensor::DType::q8_0;
  expect_model_error([&] { pie::write_gguf_embedding_model(*folder, other, q8); }, "written as f16 or f32");
  EXPECT_FALSE(fs::exists(other));
  fs::remove(path);
}

TEST(EncoderGguf, ADecoderEmbedderIsRefused) {
  const auto decoder = pie::embedding_model_from_decoder(pie::random_model());
  const fs::path path = temp_gguf("decoder");
  expect_model_error([&] { pie::write_gguf_embedding_model(*decoder, path, {}); }, "only encoders");
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
