// llama2.c checkpoints: stories260K loads with its config and weights as views of the file; corrupt
// checkpoints are ModelErrors that say what is wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "pie/error.h"
#include "pie/model.h"
#include "shared_data.h"

namespace {

namespace fs = std::filesystem;
using orchard::testing::shared_data;

const char* kStories = "models/stories260K/stories260K.bin";

std::vector<char> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("pie_model_test_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

template <class F>
std::string model_error(F&& f) {
  try {
    f();
  } catch (const pie::ModelError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ModelError";
  return {};
}

TEST(Llama2c, Stories260KConfig) {
  ORCHARD_REQUIRE_SHARED_DATA(kStories);
  const auto m = pie::load_llama2c_model(shared_data(kStories));
  const pie::ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, pie::Architecture::llama);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_kv_head, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.context_length, 512);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.rope.layout, pal::RopeLayout::gptj);
  EXPECT_EQ(c.rope.rotary_dim, 8);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(m->name, "stories260K");
  ASSERT_TRUE(m->tokenizer);
  EXPECT_EQ(m->tokenizer->vocab_size(), 512u);
  EXPECT_EQ(m->describe(), "f32: 47");
}

TEST(Llama2c, WeightsAreViewsInRunCOrder) {
  ORCHARD_REQUIRE_SHARED_DATA(kStories);
  const auto m = pie::load_llama2c_model(shared_data(kStories));
  const std::vector<char> bytes = read_file(shared_data(kStories));
  // The float at element offset `at` of the weights, read from the file.
  auto value = [&](std::size_t at) {
    float v;
    std::memcpy(&v, bytes.data() + 28 + 4 * at, 4);
    return v;
  };
  auto at = [](const pie::Weight& w, std::int64_t i) { return w.data_as<const float>()[i]; };
  const std::size_t vocab = 512, dim = 64, kv = 32, hidden = 172, L = 5;
  EXPECT_EQ(pie::n_out(m->weights.token_embd), 512);
  EXPECT_EQ(pie::n_in(m->weights.token_embd), 64);
  EXPECT_EQ(at(m->weights.token_embd, 100), value(100));
  std::size_t off = vocab * dim;
  EXPECT_EQ(at(m->weights.layers[0].attn_norm, 3), value(off + 3));
  off += L * dim;  // rms_att
  EXPECT_EQ(at(m->weights.layers[1].wq, 5), value(off + dim * dim + 5));
  off += L * dim * dim;  // wq
  EXPECT_EQ(pie::n_out(m->weights.layers[2].wk), 32);
  EXPECT_EQ(at(m->weights.layers[2].wk, 7), value(off + 2 * kv * dim + 7));
  off += 2 * L * kv * dim + L * dim * dim + L * dim;  // wk, wv, wo, rms_ffn
  EXPECT_EQ(at(m->weights.layers[4].w_gate, 0), value(off + 4 * hidden * dim));
  off += L * hidden * dim;  // w1
  EXPECT_EQ(pie::n_out(m->weights.layers[3].w_down), 64);
  EXPECT_EQ(pie::n_in(m->weights.layers[3].w_down), 172);
  EXPECT_EQ(at(m->weights.layers[3].w_down, 171), value(off + 3 * hidden * dim + 171));
  off += 2 * L * hidden * dim;  // w2, w3
  EXPECT_EQ(at(m->weights.layers[4].w_up, hidden * dim - 1), value(off - 1));
  EXPECT_EQ(at(m->weights.output_norm, 63), value(off + 63));
  EXPECT_EQ(m->weights.output.data(), m->weights.token_embd.data());
}

TEST(Llama2c, LoadModelRecognisesIt) {
  ORCHARD_REQUIRE_SHARED_DATA(kStories);
  const auto m = pie::load_model(shared_data(kStories));
  EXPECT_EQ(m->config.n_layer, 5);
}

TEST(Llama2c, TruncatedIsAnError) {
  ORCHARD_REQUIRE_SHARED_DATA(kStories);
  TempDir dir;
  std::vector<char> bytes = read_file(shared_data(kStories));
  bytes.resize(bytes.size() - 4);
  write_file(dir.path() / "m.bin", bytes);
  fs::copy_file(shared_data("models/stories260K/tok512.bin"), dir.path() / "tok512.bin");
  const std::string msg = model_error([&] { pie::load_llama2c_model(dir.path() / "m.bin"); });
  EXPECT_NE(msg.find("1056536 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs exactly 1056540 (truncated)"), std::string::npos) << msg;
  // Too long is as wrong as too short.
  bytes.resize(bytes.size() + 8);
  write_file(dir.path() / "m.bin", bytes);
  EXPECT_NE(model_error([&] { pie::load_llama2c_model(dir.path() / "m.bin"); }).find("needs exactly"), std::string::npos);
  // Shorter than the header.
  write_file(dir.path() / "m.bin", std::vector<char>(10, 1));
  EXPECT_NE(model_error([&] { pie::load_model(dir.path() / "m.bin"); }).find("too short"), std::string::npos);
}

TEST(Llama2c, BadHeaderIsAnError) {
  ORCHARD_REQUIRE_SHARED_DATA(kStories);
  TempDir dir;
  std::vector<char> bytes = read_file(shared_data(kStories));
  fs::copy_file(shared_data("models/stories260K/tok512.bin"), dir.path() / "tok512.bin");
  auto with_field = [&](int field, std::int32_t v) {
    std::vector<char> b = bytes;
    std::memcpy(b.data() + 4 * field, &v, 4);
    write_file(dir.path() / "m.bin", b);
    return model_error([&] { pie::load_llama2c_model(dir.path() / "m.bin"); });
  };
  EXPECT_NE(with_field(3, 0).find("n_heads = 0"), std::string::npos);
  EXPECT_NE(with_field(3, 7).find("dim 64 is not a multiple of n_heads 7"), std::string::npos);
  EXPECT_NE(with_field(4, 3).find("n_kv_heads 3 does not divide n_heads 8"), std::string::npos);
  EXPECT_NE(with_field(0, -5).find("dim = -5"), std::string::npos);
  // A negative vocab_size means a separate classifier: 512 * 64 more floats than the file has.
  EXPECT_NE(with_field(5, -512).find("(truncated)"), std::string::npos);
  // A tokenizer larger than the model's vocabulary.
  std::vector<char> b = bytes;
  const std::int32_t small_vocab = 256;
  std::memcpy(b.data() + 20, &small_vocab, 4);
  b.resize(b.size() - 256 * 64 * 4);
  write_file(dir.path() / "m.bin", b);
  EXPECT_NE(model_error([&] { pie::load_llama2c_model(dir.path() / "m.bin"); }).find("more than the model's vocab_size 256"),
            std::string::npos);
}

TEST(Llama2c, TokenizerIsFoundOrNamed) {
  ORCHARD_REQUIRE_SHARED_DATA(kStories);
  TempDir dir;
  fs::copy_file(shared_data(kStories), dir.path() / "m.bin");
  EXPECT_NE(model_error([&] { pie::load_llama2c_model(dir.path() / "m.bin"); }).find("no tokenizer"), std::string::npos);
  pie::LoadOptions options;
  options.tokenizer_path = shared_data("models/stories260K/tok512.bin");
  EXPECT_EQ(pie::load_llama2c_model(dir.path() / "m.bin", options)->tokenizer->vocab_size(), 512u);
  options.tokenizer_path = dir.path() / "missing.bin";
  EXPECT_NE(model_error([&] { pie::load_llama2c_model(dir.path() / "m.bin", options); }).find("missing.bin"),
            std::string::npos);
  EXPECT_NE(model_error([&] { pie::load_model(dir.path() / "absent.bin"); }).find("no such file"), std::string::npos);
}

}  // namespace
