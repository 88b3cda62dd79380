// The GGUF writer: stories260K converts and reloads identically; every type round-trips bit-exactly
// against kernels::quantize_row and within the type's error; NeoX llama q/k rows are permuted for
// llama.cpp's adjacent-pair RoPE; architecture features survive; bad requests are errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "kernels/quant.h"
#include "model_test_util.h"
#include "pal/rope.h"
#include "pie/error.h"
#include "pie/model.h"
#include "shared_data.h"

namespace {

namespace fs = std::filesystem;
using orchard::testing::shared_data;
using tensor::DType;

const char* kStories = "models/stories260K/stories260K.bin";
const char* kTok512 = "models/stories260K/tok512.bin";

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("pie_gguf_write_" + std::to_string(::getpid()) + "_" + name);
}

std::shared_ptr<const tokenizers::Tokenizer> tok512() {
  return std::make_shared<const tokenizers::Tokenizer>(tokenizers::Tokenizer::load(shared_data(kTok512)));
}

std::vector<float> dequantize(const pie::Weight& w, std::int64_t row) {
  std::vector<float> out(static_cast<std::size_t>(pie::n_in(w)));
  const std::uint8_t* bytes = w.data_as<const std::uint8_t>() + row * pie::row_bytes(w);
  kernels::dequantize_row(w.dtype(), bytes, out.data(), pie::n_in(w));
  return out;
}

// Calls f(name, a, b) for every pair of corresponding weights of two models.
template <class F>
void for_each_weight(const pie::Model& a, const pie::Model& b, F&& f) {
  f("token_embd", a.weights.token_embd, b.weights.token_embd);
  f("output_norm", a.weights.output_norm, b.weights.output_norm);
  f("output", a.weights.output, b.weights.output);
  ASSERT_EQ(a.weights.layers.size(), b.weights.layers.size());
  for (std::size_t i = 0; i < a.weights.layers.size(); ++i) {
    const pie::LayerWeights &x = a.weights.layers[i], &y = b.weights.layers[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    f(p + "attn_norm", x.attn_norm, y.attn_norm);
    f(p + "wq", x.wq, y.wq);
    f(p + "wk", x.wk, y.wk);
    f(p + "wv", x.wv, y.wv);
    f(p + "wo", x.wo, y.wo);
    f(p + "bq", x.bq, y.bq);
    f(p + "bk", x.bk, y.bk);
    f(p + "bv", x.bv, y.bv);
    f(p + "q_norm", x.q_norm, y.q_norm);
    f(p + "k_norm", x.k_norm, y.k_norm);
    f(p + "ffn_norm", x.ffn_norm, y.ffn_norm);
    f(p + "w_gate", x.w_gate, y.w_gate);
    f(p + "w_up", x.w_up, y.w_up);
    f(p + "w_down", x.w_down, y.w_down);
  }
}

void expect_identical_weights(const pie::Model& a, const pie::Model& b) {
  for_each_weight(a, b, [](const std::string& name, const pie::Weight& x, const pie::Weight& y) {
    SCOPED_TRACE(name);
    ASSERT_EQ(static_cast<bool>(x), static_cast<bool>(y));
    if (!x) return;
    ASSERT_EQ(x.dtype(), y.dtype());
    ASSERT_EQ(pie::n_out(x) * pie::n_in(x), pie::n_out(y) * pie::n_in(y));
    EXPECT_EQ(std::memcmp(x.data(), y.data(), pie::row_bytes(x) * static_cast<std::size_t>(pie::n_out(x))), 0);
  });
}

void expect_same_config(pie::ModelConfig a, pie::ModelConfig b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.n_vocab, b.n_vocab);
  EXPECT_EQ(a.n_embd, b.n_embd);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.n_kv_head, b.n_kv_head);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.n_ff, b.n_ff);
  EXPECT_EQ(a.context_length, b.context_length);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope, b.rope);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.attn_logit_softcap, b.attn_logit_softcap);
  EXPECT_EQ(a.final_logit_softcap, b.final_logit_softcap);
  EXPECT_EQ(a.attention_scale, b.attention_scale);
}

TEST(GgufWrite, Stories260KRoundTripsExactly) {
  ORCHARD_REQUIRE_SHARED_DATA(kStories);
  const auto original = pie::load_model(shared_data(kStories));
  const fs::path out = temp_path("stories.gguf");
  pie::ConvertOptions o;
  o.type = DType::f32;
  std::uint64_t last_done = 0, last_total = 0;
  o.progress = [&](std::uint64_t done, std::uint64_t total) {
    EXPECT_EQ(done, last_done + 1);
    last_done = done;
    last_total = total;
  };
  pie::write_gguf_model(*original, out, o);
  EXPECT_EQ(last_done, last_total);
  EXPECT_EQ(last_total, 47u);
  pie::LoadOptions load;
  std::uint64_t loaded = 0, load_total = 0;
  load.progress = [&](std::uint64_t done, std::uint64_t total) {
    EXPECT_GE(done, loaded);
    EXPECT_LE(done, total);
    loaded = done;
    load_total = total;
  };
  const auto back = pie::load_model(out, load);
  fs::remove(out);
  EXPECT_EQ(loaded, load_total);
  EXPECT_GT(load_total, 1000000u);  // the weights' bytes
  expect_same_config(original->config, back->config);
  expect_identical_weights(*original, *back);
  EXPECT_EQ(back->name, "stories260K");
  // The tokenizer survives: same ids for a text, same special tokens.
  const std::string text = "Once upon a time, there was a little girl named Lily.\n";
  EXPECT_EQ(original->tokenizer->encode(text, {.add_bos = true}), back->tokenizer->encode(text, {.add_bos = true}));
  EXPECT_EQ(back->tokenizer->special_tokens().bos, 1);
  EXPECT_EQ(back->tokenizer->special_tokens().eos, 2);
  EXPECT_TRUE(back->tokenizer->add_bos_by_default());
}

// Type of each matrix, the rows of each reloaded matrix against quantize_row of the original rows, and
// the relative RMS error of the dequantized values.
class EveryType : public ::testing::TestWithParam<DType> {};

double tolerance(DType t) {
  switch (t) {
    case DType::f32: return 0;
    case DType::f16: return 1e-3;
    case DType::bf16: return 5e-3;
    case DType::q8_0: return 0.01;
    case DType::q6_K: return 0.02;
    case DType::q5_0: case DType::q5_1: case DType::q5_K: return 0.06;
    case DType::q4_0: case DType::q4_1: case DType::q4_K: return 0.12;
    case DType::q3_K: return 0.25;
    default: return 0.5;  // q2_K
  }
}

TEST_P(EveryType, RoundTripsWithinItsError) {
  ORCHARD_REQUIRE_SHARED_DATA(kTok512);
  const DType type = GetParam();
  pie::ModelConfig c = model_test::llama_config(512, 256, 512, 4, 2, 1);
  c.rope.layout = pal::RopeLayout::gptj;  // no q/k permutation here
  const auto original = model_test::make_model(c, tok512());
  const fs::path out = temp_path(std::string(tensor::dtype_name(type)) + ".gguf");
  pie::ConvertOptions o;
  o.type = type;
  std::vector<std::string> notices;
  o.notice = [&](const std::string& s) { notices.push_back(s); };
  pie::write_gguf_model(*original, out, o);
  const auto back = pie::load_gguf_model(out);
  fs::remove(out);
  EXPECT_TRUE(notices.empty()) << notices.front();
  expect_same_config(original->config, back->config);
  const bool k_quant = type == DType::q2_K || type == DType::q3_K || type == DType::q4_K || type == DType::q5_K ||
                       type == DType::q6_K;
  for_each_weight(*original, *back, [&](const std::string& name, const pie::Weight& x, const pie::Weight& y) {
    SCOPED_TRACE(name);
    if (!x) return;
    ASSERT_TRUE(y);
    const bool vector = pie::n_out(x) == 1;
    const DType want = vector ? DType::f32 : (name == "output" && k_quant) ? DType::q6_K : type;
    ASSERT_EQ(y.dtype(), want);
    ASSERT_EQ(pie::n_out(y), pie::n_out(x));
    ASSERT_EQ(pie::n_in(y), pie::n_in(x));
    std::vector<std::uint8_t> expected(pie::row_bytes(y));
    double err = 0, sum = 0;
    for (std::int64_t r = 0; r < pie::n_out(x); ++r) {
      const float* row = x.data_as<const float>() + r * pie::n_in(x);
      kernels::quantize_row(want, row, expected.data(), pie::n_in(x));
      const std::uint8_t* got = y.data_as<const std::uint8_t>() + r * pie::row_bytes(y);
      ASSERT_EQ(std::memcmp(expected.data(), got, expected.size()), 0)
          << "row " << r;
      const std::vector<float> d = dequantize(y, r);
      for (std::int64_t i = 0; i < pie::n_in(x); ++i) {
        err += (d[i] - row[i]) * (d[i] - row[i]);
        sum += row[i] * row[i];
      }
    }
    EXPECT_LE(std::sqrt(err / sum), tolerance(want));
  });
}

INSTANTIATE_TEST_SUITE_P(Types, EveryType,
                         ::testing::Values(DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1,
                                           DType::q5_0, DType::q5_1, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K,
                                           DType::q6_K),
                         [](const auto& info) { return std::string(tensor::dtype_name(info.param)); });

TEST(GgufWrite, RowsTheTypeCannotHoldFallBackAsLlamaCpp) {
  ORCHARD_REQUIRE_SHARED_DATA(kStories);
  const auto m = pie::load_model(shared_data(kStories));
  const fs::path out = temp_path("fallback.gguf");
  pie::ConvertOptions o;
  o.type = DType::q4_K;
  std::vector<std::string> notices;
  o.notice = [&](const std::string& s) { notices.push_back(s); };
  pie::write_gguf_model(*m, out, o);
  const auto back = pie::load_gguf_model(out);
  fs::remove(out);
  EXPECT_EQ(back->weights.layers[0].wq.dtype(), DType::q5_0);      // 64 per row: q4_K -> q5_0
  EXPECT_EQ(back->weights.layers[0].w_down.dtype(), DType::f16);   // 172 per row: not even q5_0 blocks
  EXPECT_EQ(back->weights.token_embd.dtype(), DType::q8_0);        // tied output: q6_K -> q8_0
  ASSERT_EQ(notices.size(), 3u);
  EXPECT_EQ(notices[0], "q4_K cannot hold rows of 64 elements: 30 tensors written as q5_0 (blk.0.attn_q.weight, ...)");
}

// A Hugging Face (NeoX) llama is written with q/k rows reordered so that llama.cpp's adjacent-pair RoPE
// gives the same rotated queries and keys, up to the same reordering (which q.k products do not see).
TEST(GgufWrite, NeoxLlamaIsPermutedForAdjacentPairRope) {
  ORCHARD_REQUIRE_SHARED_DATA(kTok512);
  pie::ModelConfig c = model_test::llama_config(512, 64, 128, 4, 2, 1);  // head_dim 16
  c.attention_bias = true;
  const auto hf = model_test::make_model(c, tok512());
  const fs::path out = temp_path("neox.gguf");
  pie::ConvertOptions o;
  o.type = DType::f32;
  pie::write_gguf_model(*hf, out, o);
  const auto gguf = pie::load_gguf_model(out);
  fs::remove(out);
  EXPECT_EQ(gguf->config.rope.layout, pal::RopeLayout::gptj);
  const std::int32_t hd = c.head_dim;
  std::vector<float> x(static_cast<std::size_t>(c.n_embd));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f);
  auto project = [&](const pie::Weight& w, const pie::Weight& b) {
    std::vector<float> y(static_cast<std::size_t>(pie::n_out(w)));
    for (std::int64_t r = 0; r < pie::n_out(w); ++r) {
      double s = b.data_as<const float>()[r];
      for (std::int64_t i = 0; i < pie::n_in(w); ++i) {
        s += w.data_as<const float>()[r * pie::n_in(w) + i] * x[static_cast<std::size_t>(i)];
      }
      y[static_cast<std::size_t>(r)] = static_cast<float>(s);
    }
    return y;
  };
  const std::int32_t pos = 5;
  for (int which = 0; which < 2; ++which) {
    const pie::LayerWeights &a = hf->weights.layers[0], &b = gguf->weights.layers[0];
    std::vector<float> qa = which == 0 ? project(a.wq, a.bq) : project(a.wk, a.bk);
    std::vector<float> qb = which == 0 ? project(b.wq, b.bq) : project(b.wk, b.bk);
    const std::int32_t n_heads = which == 0 ? c.n_head : c.n_kv_head;
    pal::rope_ref(c.rope, &pos, qa.data(), 1, n_heads);
    pal::rope_ref(gguf->config.rope, &pos, qb.data(), 1, n_heads);
    for (std::int32_t h = 0; h < n_heads; ++h) {
      for (std::int32_t i = 0; i < hd / 2; ++i) {
        for (std::int32_t j = 0; j < 2; ++j) {
          EXPECT_NEAR(qb[static_cast<std::size_t>(h * hd + 2 * i + j)], qa[static_cast<std::size_t>(h * hd + j * hd / 2 + i)], 1e-4)
              << (which == 0 ? "q" : "k") << " head " << h << " pair " << i;
        }
      }
    }
  }
}

// Architecture features survive a round trip: biases (Qwen2), q/k norms and head_dim != n_embd/n_head
// (Qwen3), soft-capping and an attention scale (on Qwen3 here: they are generic), llama3 RoPE scaling (as
// rope_freqs.weight).
class Architectures : public ::testing::TestWithParam<pie::Architecture> {};

TEST_P(Architectures, RoundTrip) {
  ORCHARD_REQUIRE_SHARED_DATA(kTok512);
  pie::ModelConfig c = model_test::llama_config(512, 64, 96, 4, 2, 2);
  c.arch = GetParam();
  switch (c.arch) {
    case pie::Architecture::llama:
      c.rope.layout = pal::RopeLayout::gptj;
      c.rope.scaling = pal::RopeScaling::llama3;
      c.rope.factor = 8;
      c.rope.original_max_position = 64;
      c.rope.llama3_low_freq_factor = 1;
      c.rope.llama3_high_freq_factor = 4;
      c.rope.theta = 10000;
      break;
    case pie::Architecture::qwen2:
      c.attention_bias = true;
      c.tied_embeddings = true;
      break;
    case pie::Architecture::qwen3:
      c.qk_norm = true;
      c.head_dim = c.rope.head_dim = c.rope.rotary_dim = 32;
      c.attn_logit_softcap = 50;
      c.final_logit_softcap = 30;
      c.attention_scale = 0.125f;
      break;
    default:
      break;
  }
  const auto original = model_test::make_model(c, tok512());
  const fs::path out = temp_path(std::string(pie::architecture_name(c.arch)) + ".gguf");
  pie::ConvertOptions o;
  o.type = DType::f32;
  pie::write_gguf_model(*original, out, o);
  const auto back = pie::load_gguf_model(out);
  fs::remove(out);
  if (c.arch == pie::Architecture::llama) {
    // Fitted back from the factors: the same up to rounding.
    EXPECT_NEAR(back->config.rope.llama3_low_freq_factor, 1.0, 1e-3);
    EXPECT_NEAR(back->config.rope.llama3_high_freq_factor, 4.0, 1e-3);
    c.rope.llama3_low_freq_factor = back->config.rope.llama3_low_freq_factor;
    c.rope.llama3_high_freq_factor = back->config.rope.llama3_high_freq_factor;
  }
  expect_same_config(c, back->config);
  expect_identical_weights(*original, *back);
}

INSTANTIATE_TEST_SUITE_P(All, Architectures,
                         ::testing::Values(pie::Architecture::llama, pie::Architecture::qwen2, pie::Architecture::qwen3),
                         [](const auto& info) { return std::string(pie::architecture_name(info.param)); });

TEST(GgufWrite, MistralIsWrittenAsLlama) {
  ORCHARD_REQUIRE_SHARED_DATA(kTok512);
  pie::ModelConfig c = model_test::llama_config(512, 64, 96, 4, 2, 1);
  c.arch = pie::Architecture::mistral;
  c.sliding_window = 4096;
  const fs::path out = temp_path("mistral.gguf");
  pie::ConvertOptions o;
  o.type = DType::f16;
  std::vector<std::string> notices;
  o.notice = [&](const std::string& s) { notices.push_back(s); };
  pie::write_gguf_model(*model_test::make_model(c, tok512()), out, o);
  const auto back = pie::load_gguf_model(out);
  fs::remove(out);
  EXPECT_EQ(back->config.arch, pie::Architecture::llama);  // llama.cpp has no "mistral" text architecture
  EXPECT_EQ(back->config.sliding_window, 4096);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("without the sliding window (4096 tokens)"), std::string::npos) << notices[0];
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(GgufWrite, Errors) {
  ORCHARD_REQUIRE_SHARED_DATA(kTok512);
  pie::ModelConfig c = model_test::llama_config(512, 64, 96, 4, 2, 1);
  auto m = model_test::make_model(c, tok512());
  const fs::path out = temp_path("err.gguf");
  pie::ConvertOptions o;
  o.type = DType::q8_K;
  EXPECT_NE(error_of<pie::ModelError>([&] { pie::write_gguf_model(*m, out, o); }).find("q8_K is not a storage type"),
            std::string::npos);
  o.type = DType::f16;
  EXPECT_NE(error_of<pie::Error>([&] { pie::write_gguf_model(*m, "/nonexistent-dir/x.gguf", o); }).find("nonexistent-dir"),
            std::string::npos);
  m->config.arch = pie::Architecture::qwen2;
  m->config.rope.layout = pal::RopeLayout::gptj;
  EXPECT_NE(error_of<pie::ModelError>([&] { pie::write_gguf_model(*m, out, o); }).find("GPT-J RoPE"), std::string::npos);
  m->config = c;
  const pie::Weight wk = m->weights.layers[0].wk;
  m->weights.layers[0].wk = wk.slice(0, 0, 16);  // too few rows
  EXPECT_NE(error_of<pie::ModelError>([&] { pie::write_gguf_model(*m, out, o); }).find("blk.0.attn_k.weight"),
            std::string::npos);
  m->tokenizer = nullptr;
  EXPECT_NE(error_of<pie::ModelError>([&] { pie::write_gguf_model(*m, out, o); }).find("no tokenizer"), std::string::npos);
  m->config.n_vocab = 100;  // fewer rows than the tokenizer: validated before anything is written
  m->tokenizer = tok512();
  m->weights.layers[0].wk = wk;
  EXPECT_NE(error_of<pie::ModelError>([&] { pie::write_gguf_model(*m, out, o); }).find("more than the model's 100 rows"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
