// QLoRA: a llama checkpoint whose projections bitsandbytes stored in NF4 with double quantization
// (qlora/, tools/make_nf4_test_model.py) loads as it is (nf4 rows) and gives transformers' f32 logits over
// the same NF4 weights within 1e-4, and a PEFT adapter over it gives PEFT's; the same checkpoint through
// transformers' own Linear4bit (its CPU product is not f32 throughout) within 2e-2. Written as an nf4 GGUF,
// its NF4 blocks come back bit for bit. Every malformed piece of a bitsandbytes checkpoint is a
// ModelError naming it.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>

#include "kernels/quant.h"
#include "lora_test_util.h"
#include "pie/lora.h"

namespace pie::testing {
namespace {

constexpr double kTolerance = 1e-4;
constexpr double kLinear4bitTolerance = 2e-2;

std::filesystem::path qlora_dir() { return std::filesystem::path(ORCHARD_LORA_TEST_ADAPTERS) / ".." / "qlora"; }

struct QloraGolden {
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> logit_positions;
  nlohmann::json j;
  std::vector<std::vector<float>> logits(const char* key) const {
    return j.at(key).get<std::vector<std::vector<float>>>();
  }
};

QloraGolden load_golden() {
  QloraGolden g;
  g.j = read_json_file(qlora_dir() / "golden.json");
  g.prompt = g.j.at("prompt").get<std::vector<std::int32_t>>();
  g.logit_positions = g.j.at("logit_positions").get<std::vector<std::int32_t>>();
  return g;
}

// The logits of the golden's positions for its prompt, in one prefill, under `adapter` (none: nullptr).
std::vector<std::vector<float>> run(const std::shared_ptr<const Model>& model, const QloraGolden& g,
                                    const LoraAdapter* adapter) {
  ModelRunner runner(model, nullptr);
  KvCache kv = make_kv(runner, 64);
  const auto n = static_cast<std::int32_t>(g.prompt.size());
  const SeqId id = kv.create();
  EXPECT_TRUE(kv.reserve(id, n));
  const auto owned = kv.pages(id);
  std::vector<std::int32_t> tokens = g.prompt, qo{0, n}, lens{n}, page_indptr{0}, pages(owned.begin(), owned.end());
  page_indptr.push_back(static_cast<std::int32_t>(pages.size()));
  std::vector<std::int32_t> rows = g.logit_positions;
  std::vector<LoraGroup> groups;
  if (adapter != nullptr) {
    groups.push_back(LoraGroup{adapter, 1.0f, {}, {}});
    for (std::int32_t i = 0; i < n; ++i) groups.back().rows.push_back(i);
  }
  const std::int32_t n_vocab = model->config.n_vocab;
  std::vector<float> logits(rows.size() * static_cast<std::size_t>(n_vocab));
  ForwardBatch b{tokens, qo, lens, page_indptr, pages, rows, groups};
  runner.forward(b, kv, logits);
  std::vector<std::vector<float>> out;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    out.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(r * n_vocab),
                     logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * n_vocab));
  }
  return out;
}

void expect_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                  double tolerance, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t p = 0; p < got.size(); ++p) {
    EXPECT_LE(relative_error(got[p], want[p]), tolerance) << what << " position " << p;
  }
}

TEST(Qlora, BitsandbytesNf4CheckpointLoadsAsNf4AndMatchesTransformers) {
  const auto model = load_hf_model(qlora_dir() / "model");
  const QloraGolden g = load_golden();
  for (const LayerWeights& l : model->weights.layers) {
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      EXPECT_EQ(w->dtype(), tensor::DType::nf4);
    }
  }
  EXPECT_EQ(model->weights.output.dtype(), tensor::DType::f32);
  const auto got = run(model, g, nullptr);
  expect_close(got, g.logits("base"), kTolerance, "base");
  if (g.j.contains("linear4bit_base")) expect_close(got, g.logits("linear4bit_base"), kLinear4bitTolerance, "Linear4bit base");
}

TEST(Qlora, PeftAdapterOverTheNf4BaseMatchesPeft) {
  const auto model = load_hf_model(qlora_dir() / "model");
  const QloraGolden g = load_golden();
  const auto adapter = load_lora_adapter(qlora_dir() / "adapter", *model);
  const auto before = run(model, g, nullptr);
  const auto got = run(model, g, adapter.get());
  expect_close(got, g.logits("adapter"), kTolerance, "adapter");
  if (g.j.contains("linear4bit_adapter")) {
    expect_close(got, g.logits("linear4bit_adapter"), kLinear4bitTolerance, "Linear4bit adapter");
  }
  // Not the base's logits: an adapter path that did nothing would fail above.
  EXPECT_GT(relative_error(g.logits("adapter")[0], g.logits("base")[0]), 100 * kTolerance);
  // And without it, the base's logits exactly, as before it was used.
  EXPECT_EQ(run(model, g, nullptr), before);
}

TEST(Qlora, Nf4GgufKeepsTheWeightsBitForBit) {
  TempDir dir("qlora-gguf");
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(qlora_dir() / "model" / f, dir.path / f);
  }
  const auto model = load_with_byte_tokenizer(dir);
  write_gguf_model(*model, dir.path / "nf4.gguf", {.type = tensor::DType::nf4});
  const auto gguf = load_gguf_model(dir.path / "nf4.gguf");
  // Requantizing dequantized NF4 blocks gives the same blocks (a block's absmax element is level +-1): the
  // GGUF holds the checkpoint's weights. (q and k rows are reordered for llama.cpp's RoPE layout.)
  for (std::size_t i = 0; i < model->weights.layers.size(); ++i) {
    const LayerWeights& a = model->weights.layers[i];
    const LayerWeights& b = gguf->weights.layers[i];
    for (auto m : {&LayerWeights::wv, &LayerWeights::wo, &LayerWeights::w_gate, &LayerWeights::w_up, &LayerWeights::w_down}) {
      ASSERT_EQ((b.*m).dtype(), tensor::DType::nf4);
      ASSERT_EQ((a.*m).nbytes(), (b.*m).nbytes());
      EXPECT_EQ(0, std::memcmp((a.*m).data(), (b.*m).data(), (a.*m).nbytes())) << "layer " << i;
    }
  }
  // lm_head (f32 in the checkpoint) is nf4 there too: bitsandbytes' quantization of its rows.
  const Weight& out = model->weights.output;
  ASSERT_EQ(out.dtype(), tensor::DType::f32);
  ASSERT_EQ(gguf->weights.output.dtype(), tensor::DType::nf4);
  const std::int64_t rows = pie::n_out(out), cols = pie::n_in(out);
  std::vector<std::uint8_t> want(tensor::row_bytes(tensor::DType::nf4, cols) * static_cast<std::size_t>(rows));
  kernels::quantize_row_ref(tensor::DType::nf4, out.data_as<const float>(), want.data(), rows * cols);
  ASSERT_EQ(gguf->weights.output.nbytes(), want.size());
  EXPECT_EQ(0, std::memcmp(gguf->weights.output.data(), want.data(), want.size()));
}

// A copy of the checkpoint with `edit` applied to its tensors; loading it must throw a ModelError
// whose message holds `want`.
void expect_load_error(const std::function<void(std::map<std::string, StTensor>&)>& edit, const std::string& want) {
  TempDir dir("qlora-bad");
  std::filesystem::copy_file(qlora_dir() / "model" / "config.json", dir.path / "config.json");
  auto tensors = read_safetensors(qlora_dir() / "model" / "model.safetensors");
  edit(tensors);
  write_safetensors(dir.path / "model.safetensors", tensors);
  try {
    load_hf_model(dir.path);
    ADD_FAILURE() << "no error; wanted one naming " << want;
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

StTensor json_tensor(const nlohmann::json& j) {
  const std::string s = j.dump();
  return {"U8", {static_cast<std::int64_t>(s.size())}, std::vector<std::uint8_t>(s.begin(), s.end())};
}

nlohmann::json state_of(const std::map<std::string, StTensor>& t, const std::string& name) {
  const auto& b = t.at(name + ".quant_state.bitsandbytes__nf4").bytes;
  return nlohmann::json::parse(b.begin(), b.end());
}

TEST(Qlora, MalformedCheckpointsAreModelErrors) {
  const std::string w = "model.layers.0.self_attn.q_proj.weight";
  const std::string state = w + ".quant_state.bitsandbytes__nf4";
  expect_load_error([&](auto& t) { t.erase(w + ".nested_absmax"); }, w + ".nested_absmax");
  expect_load_error([&](auto& t) { t.erase(w); }, w);
  expect_load_error([&](auto& t) { t[w].bytes.resize(t[w].bytes.size() / 2); t[w].shape = {static_cast<std::int64_t>(t[w].bytes.size()), 1}; },
                    "packed bytes");
  expect_load_error([&](auto& t) { t[state] = {"U8", {3}, {'{', 'x', '}'}}; }, "not valid JSON");
  expect_load_error([&](auto& t) { auto j = state_of(t, w); j["quant_type"] = "fp4"; t[state] = json_tensor(j); }, "nf4 only");
  expect_load_error([&](auto& t) { auto j = state_of(t, w); j["blocksize"] = 128; t[state] = json_tensor(j); }, "blocksize 128");
  expect_load_error([&](auto& t) { auto j = state_of(t, w); j["shape"] = {64, 32}; t[state] = json_tensor(j); }, "shape [64, 32]");
  expect_load_error([&](auto& t) { auto j = state_of(t, w); j.erase("nested_blocksize"); t[state] = json_tensor(j); },
                    "nested_blocksize");
  expect_load_error([&](auto& t) { std::memset(t[w + ".quant_map"].bytes.data(), 0, 4); }, "not NF4's level");
  expect_load_error([&](auto& t) {
    auto& m = t[w + ".nested_absmax"].bytes;
    const float inf = std::numeric_limits<float>::infinity();
    std::memcpy(m.data(), &inf, 4);
  }, "absmax of block");
  expect_load_error([&](auto& t) {
    auto j = state_of(t, w);
    t.erase(state);
    t[w + ".quant_state.bitsandbytes__fp4"] = json_tensor(j);
  }, "fp4 weights are not supported");
}

}  // namespace
}  // namespace pie::testing
