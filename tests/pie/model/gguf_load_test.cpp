// GGUF loading: files written by gguf-py (llama.cpp's Python writer) load with the right config and
// weights; corrupt or unsupported files are ModelErrors naming the tensor or key and the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model_test_util.h"
#include "pie/error.h"
#include "pie/model.h"
#include "shared_data.h"
#include "tensor/half.h"

namespace {

namespace fs = std::filesystem;
namespace gg = tensor::gguf;
using orchard::testing::shared_data;

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("pie_gguf_load_" + std::to_string(::getpid()) + "_" + name);
}

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

// Runs write_gguf_py.py in the test venv; skips when the venv or its gguf package is absent.
fs::path gguf_py_model(const std::string& arch) {
  const fs::path python = orchard::testing::source_dir() / ".venv/bin/python";
  const fs::path out = temp_path("gguf_py_" + arch + ".gguf");
  if (!fs::exists(python)) return {};
  const std::string cmd = python.string() + " " + (orchard::testing::source_dir() / "tests/pie/model/write_gguf_py.py").string() +
                          " " + out.string() + " " + arch;
  if (std::system(cmd.c_str()) != 0) return {};
  return out;
}

// Element k of the tensor written index-th by write_gguf_py.py.
float formula(std::int64_t k, int index) { return static_cast<float>((k * 7 + index * 13) % 101 - 50) / 64.0f; }

void expect_formula(const pie::Weight& w, int index, const char* what) {
  SCOPED_TRACE(what);
  const std::int64_t n = pie::n_out(w) * pie::n_in(w);
  for (std::int64_t k = 0; k < n; ++k) {
    const float v = w.dtype() == tensor::DType::f16 ? tensor::f16_to_f32(w.data_as<const std::uint16_t>()[k])
                                                  : w.data_as<const float>()[k];
    ASSERT_EQ(v, formula(k, index)) << "element " << k;
  }
}

TEST(GgufPy, LlamaLoadsWithItsConfig) {
  const fs::path path = gguf_py_model("llama");
  if (path.empty()) GTEST_SKIP() << ".venv with gguf-py absent (scripts/requirements-test.txt)";
  const auto m = pie::load_model(path);
  fs::remove(path);
  const pie::ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, pie::Architecture::llama);
  EXPECT_EQ(c.n_vocab, 64);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_ff, 96);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.context_length, 128);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rope.layout, pal::RopeLayout::gptj);  // llama.cpp's "normal" RoPE: adjacent pairs
  EXPECT_EQ(c.rope.scaling, pal::RopeScaling::none);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(m->name, "gguf-py llama");
  EXPECT_EQ(m->chat_template, "{{ messages[0]['content'] }}");
  EXPECT_EQ(m->tokenizer->vocab_size(), 64u);
  EXPECT_EQ(m->describe(), "f32: 20, f16: 1");  // the f16 ffn_norms became f32
  expect_formula(m->weights.token_embd, 0, "token_embd");
  expect_formula(m->weights.output_norm, 1, "output_norm");
  EXPECT_EQ(m->weights.output.dtype(), tensor::DType::f16);
  expect_formula(m->weights.output, 2, "output");
  EXPECT_EQ(pie::n_out(m->weights.layers[1].wk), 16);
  EXPECT_EQ(pie::n_in(m->weights.layers[1].wk), 32);
  expect_formula(m->weights.layers[1].wk, 14, "blk.1.attn_k");
  EXPECT_EQ(m->weights.layers[0].ffn_norm.dtype(), tensor::DType::f32);  // converted from f16
  expect_formula(m->weights.layers[0].ffn_norm, 8, "blk.0.ffn_norm");
  EXPECT_EQ(pie::n_in(m->weights.layers[1].w_down), 96);
  expect_formula(m->weights.layers[1].w_down, 20, "blk.1.ffn_down");
}

TEST(GgufPy, Qwen2HasBiasesAndNeoxRope) {
  const fs::path path = gguf_py_model("qwen2");
  if (path.empty()) GTEST_SKIP() << ".venv with gguf-py absent (scripts/requirements-test.txt)";
  const auto m = pie::load_gguf_model(path);
  fs::remove(path);
  EXPECT_EQ(m->config.arch, pie::Architecture::qwen2);
  EXPECT_EQ(m->config.rope.layout, pal::RopeLayout::neox);
  EXPECT_TRUE(m->config.attention_bias);
  // token_embd, output_norm, output, then attn_norm, q, k, v, q bias (7), k bias, v bias, ...
  expect_formula(m->weights.layers[0].bq, 7, "blk.0.attn_q.bias");
  expect_formula(m->weights.layers[0].bv, 9, "blk.0.attn_v.bias");
}

// A GGUF written by our writer from stories260K (f32), the base of the corrupt-file cases.
class CorruptGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(shared_data("models/stories260K/stories260K.bin"))) GTEST_SKIP() << "shared data absent";
    base_ = temp_path("base.gguf");
    bad_ = temp_path("bad.gguf");
    pie::ConvertOptions o;
    o.type = tensor::DType::f32;
    pie::write_gguf_model(*pie::load_model(shared_data("models/stories260K/stories260K.bin")), base_, o);
  }
  void TearDown() override {
    fs::remove(base_);
    fs::remove(bad_);
  }
  std::string load_bad() {
    return model_error([&] { pie::load_gguf_model(bad_); });
  }
  fs::path base_, bad_;
};

// general.alignment 1 with an odd-length key: tensor data at unaligned offsets is copied, not viewed.
TEST_F(CorruptGguf, UnalignedDataIsCopied) {
  const gg::File f = gg::File::open(base_.string());
  gg::Writer w(1);
  w.set("general.alignment", gg::make_uint32(1));
  for (const auto& [k, v] : f.metadata()) {
    if (k != "general.alignment") w.set(k, v);
  }
  w.set("x", gg::make_string("abc"));
  std::size_t misaligned = 0;
  for (const gg::TensorInfo& t : f.tensors()) {
    const auto bytes = f.tensor_data(t);
    w.add_tensor(t.name, t.dims, t.type, std::vector<std::uint8_t>(bytes.begin(), bytes.end()));
  }
  w.write(bad_);
  const gg::File written = gg::File::open(bad_.string());
  for (const gg::TensorInfo& t : written.tensors()) {
    if ((written.data_offset() + t.offset) % 4 != 0) ++misaligned;
  }
  ASSERT_GT(misaligned, 0u) << "the test file happens to be aligned";
  const auto a = pie::load_gguf_model(base_);
  const auto b = pie::load_gguf_model(bad_);
  ASSERT_EQ(a->weights.layers.size(), b->weights.layers.size());
  for (std::size_t i = 0; i < a->weights.layers.size(); ++i) {
    for (auto field : {&pie::LayerWeights::attn_norm, &pie::LayerWeights::wq, &pie::LayerWeights::w_down}) {
      const pie::Weight &x = a->weights.layers[i].*field, &y = b->weights.layers[i].*field;
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(y.data()) % 4, 0u);
      EXPECT_EQ(std::memcmp(x.data(), y.data(), pie::row_bytes(x) * static_cast<std::size_t>(pie::n_out(x))), 0);
    }
  }
}

TEST_F(CorruptGguf, Truncated) {
  fs::copy_file(base_, bad_);
  fs::resize_file(bad_, fs::file_size(base_) - 100);
  const std::string msg = load_bad();
  EXPECT_NE(msg.find("bad.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("past the end"), std::string::npos) << msg;
  fs::resize_file(bad_, 12);  // inside the header
  EXPECT_NE(load_bad().find("bad.gguf"), std::string::npos);
}

TEST_F(CorruptGguf, WrongMagic) {
  fs::copy_file(base_, bad_);
  std::fstream f(bad_, std::ios::in | std::ios::out | std::ios::binary);
  f.write("GGUX", 4);
  f.close();
  EXPECT_NE(load_bad().find("magic"), std::string::npos) << load_bad();
}

TEST_F(CorruptGguf, UnknownArchitecture) {
  model_test::rewrite_gguf(base_, bad_, {}, [](gg::Writer& w) { w.set("general.architecture", gg::make_string("gptj")); });
  const std::string msg = load_bad();
  EXPECT_NE(msg.find("architecture 'gptj' is not supported"), std::string::npos) << msg;
}

TEST_F(CorruptGguf, MissingTensor) {
  model_test::rewrite_gguf(base_, bad_, [](model_test::TensorCopy& t) { return t.name != "blk.1.ffn_up.weight"; });
  const std::string msg = load_bad();
  EXPECT_NE(msg.find("tensor 'blk.1.ffn_up.weight' is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad.gguf"), std::string::npos) << msg;
}

TEST_F(CorruptGguf, MissingKeyOrMoreLayersThanTensors) {
  model_test::rewrite_gguf(base_, bad_, {}, [](gg::Writer& w) { w.set("llama.block_count", gg::make_uint32(6)); });
  EXPECT_NE(load_bad().find("tensor 'blk.5.attn_norm.weight' is missing"), std::string::npos) << load_bad();
  model_test::rewrite_gguf(base_, bad_, {}, [](gg::Writer& w) { w.set("llama.block_count", gg::make_string("five")); });
  EXPECT_NE(load_bad().find("llama.block_count"), std::string::npos) << load_bad();
}

TEST_F(CorruptGguf, WrongShape) {
  model_test::rewrite_gguf(base_, bad_, [](model_test::TensorCopy& t) {
    if (t.name == "blk.0.attn_k.weight") {
      t.dims = {64, 64};
      t.data.resize(t.data.size() * 2);
    }
    return true;
  });
  const std::string msg = load_bad();
  EXPECT_NE(msg.find("tensor 'blk.0.attn_k.weight' has shape [64, 64], expected [64, 32]"), std::string::npos) << msg;
}

TEST_F(CorruptGguf, UnsupportedTensorType) {
  // ggml type 16 is iq2_xxs (66 bytes per 256 elements), which Orchard's kernels do not handle.
  model_test::rewrite_gguf(base_, bad_, [](model_test::TensorCopy& t) {
    if (t.name == "blk.2.attn_q.weight") {
      t.dims = {256, 16};
      t.type = 16;
      t.data.assign(16 * 66, 0);
    }
    return true;
  });
  std::string msg = load_bad();
  EXPECT_NE(msg.find("tensor 'blk.2.attn_q.weight': type iq2_xxs (ggml type 16) is not supported"), std::string::npos) << msg;
  // q8_K exists as a type (the activations of K-quant dot products) but is not a storage type.
  model_test::rewrite_gguf(base_, bad_, [](model_test::TensorCopy& t) {
    if (t.name == "blk.2.attn_q.weight") {
      t.dims = {256, 16};
      t.type = 15;
      t.data.assign(16 * 292, 0);
    }
    return true;
  });
  msg = load_bad();
  EXPECT_NE(msg.find("type q8_K (ggml type 15) is not supported"), std::string::npos) << msg;
  // A quantized norm vector.
  model_test::rewrite_gguf(base_, bad_, [](model_test::TensorCopy& t) {
    if (t.name == "output_norm.weight") {
      t.type = 8;  // q8_0: 34 bytes per 32
      t.data.assign(2 * 34, 0);
    }
    return true;
  });
  msg = load_bad();
  EXPECT_NE(msg.find("tensor 'output_norm.weight': type q8_0 is not supported for a vector"), std::string::npos) << msg;
}

TEST_F(CorruptGguf, UnsupportedRopeScaling) {
  model_test::rewrite_gguf(base_, bad_, {}, [](gg::Writer& w) {
    w.set("llama.rope.scaling.type", gg::make_string("longrope"));
  });
  EXPECT_NE(load_bad().find("llama.rope.scaling.type 'longrope' is not supported"), std::string::npos) << load_bad();
  // rope_freqs.weight that no llama3 scaling gives.
  model_test::rewrite_gguf(base_, bad_, [](model_test::TensorCopy& t) {
    if (t.name == "output_norm.weight") {
      t.name = "rope_freqs.weight";
      t.dims = {4};
      const float f[4] = {1.0f, 7.0f, 2.0f, 8.0f};
      t.data.assign(reinterpret_cast<const std::uint8_t*>(f), reinterpret_cast<const std::uint8_t*>(f) + 16);
    }
    return true;
  });
  EXPECT_NE(load_bad().find("rope_freqs.weight"), std::string::npos) << load_bad();
}

}  // namespace
