// The forward pass with LoRA adapters against transformers + PEFT (goldens made by
// tools/make_lora_test_adapters.py) on the llama and qwen2 test models: each adapter alone, two stacked
// with different scales, one at scale 2, a batch whose sequences use three different adapters, a stack
// and none, all within 1e-4 of PEFT's logits (relative to their scale); the base bit-identical before and
// after; a llama GGUF base (q/k rows interleaved), GGUF adapters written from the PEFT ones and merged
// models giving the same logits.
#include <gtest/gtest.h>

#include <memory>

#include "lora_test_util.h"
#include "pie/forwarding_backend.h"
#include "pie/lora.h"

namespace pie::testing {
namespace {

constexpr double kTolerance = 1e-4;

class LoraForwardTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model_ = load_hf_model(test_model_dir(GetParam()));
    golden_ = load_lora_golden(GetParam());
    for (const char* name : {"a", "b", "c"}) adapters_[name] = load_lora_adapter(adapter_dir(GetParam(), name), *model_);
  }

  std::vector<ScaledLora> scaled(const LoraCase& c) {
    std::vector<ScaledLora> out;
    for (const auto& [name, scale] : c.adapters) out.push_back({adapters_.at(name), scale});
    return out;
  }

  // One step: sequence i is the golden prompt under adapters per_seq[i]; the logits of the golden's
  // positions, per sequence.
  std::vector<std::vector<std::vector<float>>> run(const std::shared_ptr<const Model>& model,
                                                   const std::vector<std::vector<ScaledLora>>& per_seq) {
    ModelRunner runner(model, nullptr);
    KvCache kv = make_kv(runner, 64);
    const auto n = static_cast<std::int32_t>(golden_.prompt.size());
    std::vector<std::int32_t> tokens, qo{0}, lens, page_indptr{0}, pages, rows;
    std::vector<LoraGroup> groups;
    for (const auto& adapters : per_seq) {
      const SeqId id = kv.create();
      EXPECT_TRUE(kv.reserve(id, n));
      const auto owned = kv.pages(id);
      pages.insert(pages.end(), owned.begin(), owned.end());
      page_indptr.push_back(static_cast<std::int32_t>(pages.size()));
      const auto first = static_cast<std::int32_t>(tokens.size());
      for (const ScaledLora& s : adapters) {
        auto it = std::find_if(groups.begin(), groups.end(),
                               [&](const LoraGroup& g) { return g.adapter == s.adapter.get() && g.scale == s.scale; });
        if (it == groups.end()) it = groups.insert(groups.end(), LoraGroup{s.adapter.get(), s.scale, {}, {}});
        for (std::int32_t i = 0; i < n; ++i) it->rows.push_back(first + i);
      }
      tokens.insert(tokens.end(), golden_.prompt.begin(), golden_.prompt.end());
      for (std::int32_t p : golden_.logit_positions) rows.push_back(first + p);
      qo.push_back(static_cast<std::int32_t>(tokens.size()));
      lens.push_back(n);
    }
    const std::int32_t n_vocab = model->config.n_vocab;
    std::vector<float> logits(rows.size() * static_cast<std::size_t>(n_vocab));
    ForwardBatch b{tokens, qo, lens, page_indptr, pages, rows, groups};
    runner.forward(b, kv, logits);
    std::vector<std::vector<std::vector<float>>> out(per_seq.size());
    std::size_t r = 0;
    for (auto& seq : out) {
      for (std::size_t p = 0; p < golden_.logit_positions.size(); ++p, ++r) {
        seq.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(r * n_vocab),
                         logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * n_vocab));
      }
    }
    return out;
  }

  void expect_matches(const std::vector<std::vector<float>>& got, const LoraCase& want) {
    ASSERT_EQ(got.size(), want.logits.size());
    for (std::size_t p = 0; p < got.size(); ++p) {
      EXPECT_LE(relative_error(got[p], want.logits[p]), kTolerance) << "case " << want.name << " position " << p;
    }
  }

  std::shared_ptr<const Model> model_;
  LoraGolden golden_;
  std::map<std::string, std::shared_ptr<const LoraAdapter>> adapters_;
};

TEST_P(LoraForwardTest, EachCaseAloneMatchesPeft) {
  for (const LoraCase& c : golden_.cases) expect_matches(run(model_, {scaled(c)})[0], c);
}

TEST_P(LoraForwardTest, TheAdaptersChangeTheLogits) {
  // The goldens are not the base's: a LoRA path that did nothing would fail the test above.
  const LoraCase& base = golden_.get("base");
  for (const char* name : {"a", "b", "c", "a0.5+b1.5"}) {
    EXPECT_GT(relative_error(golden_.get(name).logits[0], base.logits[0]), 100 * kTolerance) << name;
  }
}

TEST_P(LoraForwardTest, OneBatchMixesAdaptersStacksAndNone) {
  const std::vector<std::string> order = {"c", "base", "a", "a0.5+b1.5", "b", "base", "c2"};
  std::vector<std::vector<ScaledLora>> per_seq;
  for (const std::string& name : order) per_seq.push_back(scaled(golden_.get(name)));
  const auto got = run(model_, per_seq);
  for (std::size_t i = 0; i < order.size(); ++i) expect_matches(got[i], golden_.get(order[i]));
}

TEST_P(LoraForwardTest, RowsWithoutAdaptersAreBitIdenticalToTheBase) {
  const auto alone = run(model_, {{}});
  const auto mixed = run(model_, {scaled(golden_.get("c")), {}, scaled(golden_.get("a0.5+b1.5"))});
  EXPECT_EQ(alone[0], mixed[1]);
  // And a row's adapter logits do not depend on the rest of the batch.
  const auto c_alone = run(model_, {scaled(golden_.get("c"))});
  EXPECT_EQ(c_alone[0], mixed[0]);
}

TEST_P(LoraForwardTest, GgufBaseTakesPeftAdapters) {
  // llama's GGUF q/k rows are interleaved for llama.cpp's RoPE: the adapter's B rows follow them.
  TempDir dir("lora-gguf-base");
  const auto model = load_model_with_tokenizer(GetParam(), dir);
  write_gguf_model(*model, dir.path / "base.gguf", {.type = tensor::DType::f32});
  const auto gguf = load_gguf_model(dir.path / "base.gguf");
  EXPECT_EQ(gguf->config.rope.layout == pal::RopeLayout::gptj, std::string(GetParam()) == "llama");
  std::map<std::string, std::shared_ptr<const LoraAdapter>> fitted;
  for (const char* name : {"a", "b", "c"}) fitted[name] = load_lora_adapter(adapter_dir(GetParam(), name), *gguf);
  const LoraCase& c = golden_.get("a0.5+b1.5");
  expect_matches(run(gguf, {{{fitted["a"], 0.5f}, {fitted["b"], 1.5f}}})[0], c);
  expect_matches(run(gguf, {{{fitted["c"], 1.0f}}})[0], golden_.get("c"));
}

TEST_P(LoraForwardTest, GgufAdaptersGiveTheirPeftSourcesLogits) {
  TempDir dir("lora-gguf-adapter");
  const auto model = load_model_with_tokenizer(GetParam(), dir);
  write_gguf_model(*model, dir.path / "base.gguf", {.type = tensor::DType::f32});
  const auto gguf = load_gguf_model(dir.path / "base.gguf");
  for (const char* name : {"a", "b", "c"}) {
    const auto path = dir.path / (std::string(name) + ".gguf");
    write_gguf_adapter(*adapters_.at(name), *model_, path);
    const auto on_hf = load_lora_adapter(path, *model_);
    const auto on_gguf = load_lora_adapter(path, *gguf);
    EXPECT_EQ(on_hf->architecture, GetParam());
    expect_matches(run(model_, {{{on_hf, 1.0f}}})[0], golden_.get(name));
    expect_matches(run(gguf, {{{on_gguf, 1.0f}}})[0], golden_.get(name));
  }
}

TEST_P(LoraForwardTest, MergedModelsGiveTheRuntimeAdaptersLogits) {
  const LoraCase& c = golden_.get("a0.5+b1.5");
  TempDir dir("lora-merge");
  const auto merged = merge_lora_adapters(load_model_with_tokenizer(GetParam(), dir), scaled(c));
  expect_matches(run(merged, {{}})[0], c);
  // Written as GGUF and read back (llama: q/k rows interleaved on the way).
  write_gguf_model(*merged, dir.path / "merged.gguf", {.type = tensor::DType::f32});
  expect_matches(run(load_gguf_model(dir.path / "merged.gguf"), {{}})[0], c);
  // lm_head's pair on a tied model unties the output.
  const auto merged_c = merge_lora_adapters(model_, scaled(golden_.get("c")));
  EXPECT_FALSE(merged_c->config.tied_embeddings);
  expect_matches(run(merged_c, {{}})[0], golden_.get("c"));
  // The base is untouched.
  expect_matches(run(model_, {{}})[0], golden_.get("base"));
}

INSTANTIATE_TEST_SUITE_P(Models, LoraForwardTest, ::testing::Values("llama", "qwen2"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace pie::testing

namespace pie::testing {
namespace {

// The CPU backend minus LoRA: a backend that does not apply adapters.
class NoLoraBackend final : public ForwardingBackend {
 public:
  NoLoraBackend() : ForwardingBackend(make_cpu_backend(nullptr)) {}
  std::string name() const override { return "no-lora"; }
  bool supports_lora() const override { return false; }
};

std::string runner_error(ModelRunner& runner, KvCache& kv, const std::vector<LoraGroup>& groups) {
  const std::vector<std::int32_t> tokens{1, 2, 3}, qo{0, 3}, lens{3}, indptr{0, 1}, rows{2};
  const SeqId id = kv.create();
  EXPECT_TRUE(kv.reserve(id, 3));
  const std::vector<std::int32_t> pages(kv.pages(id).begin(), kv.pages(id).end());
  std::vector<float> logits(static_cast<std::size_t>(runner.model().config.n_vocab));
  try {
    runner.forward({tokens, qo, lens, indptr, pages, rows, groups}, kv, logits);
  } catch (const Error& e) {
    kv.release(id);
    return e.what();
  }
  kv.release(id);
  return "";
}

TEST(LoraRunner, BadGroupsAndBackendsWithoutLoraAreRefused) {
  const auto model = load_hf_model(test_model_dir("llama"));
  const auto a = load_lora_adapter(adapter_dir("llama", "a"), *model);
  ModelRunner plain(model, std::make_unique<NoLoraBackend>());
  KvCache kv = make_kv(plain, 8);
  EXPECT_NE(runner_error(plain, kv, {{a.get(), 1.0f, {0, 1, 2}, {}}}).find("does not apply LoRA"), std::string::npos);
  EXPECT_EQ(runner_error(plain, kv, {}), "");  // without adapters it runs
  ModelRunner cpu(model, nullptr);
  EXPECT_NE(runner_error(cpu, kv, {{nullptr, 1.0f, {0}, {}}}).find("without its adapter"), std::string::npos);
  EXPECT_NE(runner_error(cpu, kv, {{a.get(), 1.0f, {0, 3}, {}}}).find("LoRA row 3 outside"), std::string::npos);
  EXPECT_EQ(runner_error(cpu, kv, {{a.get(), 1.0f, {0, 1, 2}, {}}}), "");
}

}  // namespace
}  // namespace pie::testing
