// LoRA through the engine, on the llama test model with its PEFT adapters: greedy outputs with an adapter
// equal those of the model merged with it; requests of different adapters, a stack and none running at
// once give what each gives alone; detaching refuses new requests at once while a running one finishes
// with its adapter, and the base then gives its own outputs exactly; the prefix cache never serves pages
// computed under another adapter set; adapters evicted under the memory budget are read again; every bad
// request and attach is a typed error.
#include <gtest/gtest.h>

#include <thread>

#include "lora_test_util.h"
#include "pie/engine.h"
#include "pie/lora.h"

namespace pie::testing {
namespace {

struct Output {
  std::vector<std::int32_t> tokens;
  Usage usage;
  std::string error;
};

Output drain(const std::shared_ptr<RequestStream>& stream) {
  Output out;
  while (auto e = stream->next()) {
    out.tokens.insert(out.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->finish == FinishReason::error) out.error = e->error;
    if (e->done) out.usage = e->usage;
  }
  return out;
}

GenerateRequest greedy_request(const std::vector<std::int32_t>& prompt, std::vector<LoraRequest> loras,
                               std::int32_t n = 12) {
  GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  r.loras = std::move(loras);
  return r;
}

class LoraEngineTest : public ::testing::Test {
 protected:
  LoraEngineTest() : dir_("lora-engine") {
    model_ = load_model_with_tokenizer("llama", dir_);
    prompt_ = load_lora_golden("llama").prompt;
  }
  EngineOptions options() const {
    EngineOptions o;
    o.n_threads = 1;
    o.context_length = 128;
    return o;
  }
  Output run(Engine& e, std::vector<LoraRequest> loras, std::int32_t n = 12) {
    return drain(e.submit(greedy_request(prompt_, std::move(loras), n)));
  }

  TempDir dir_;
  std::shared_ptr<const Model> model_;
  std::vector<std::int32_t> prompt_;
};

TEST_F(LoraEngineTest, AdapterOutputsEqualTheMergedModels) {
  Engine engine(model_, options());
  engine.attach_lora("a", adapter_dir("llama", "a"));
  engine.attach_lora("b", adapter_dir("llama", "b"));
  const Output base = run(engine, {});
  const Output with_a = run(engine, {{"a", 1.0f}});
  const Output stacked = run(engine, {{"a", 0.5f}, {"b", 1.5f}});
  EXPECT_NE(with_a.tokens, base.tokens);
  EXPECT_NE(stacked.tokens, with_a.tokens);
  const auto a = load_lora_adapter(adapter_dir("llama", "a"), *model_);
  const auto b = load_lora_adapter(adapter_dir("llama", "b"), *model_);
  Engine merged_a(merge_lora_adapters(model_, {{a, 1.0f}}), options());
  EXPECT_EQ(run(merged_a, {}).tokens, with_a.tokens);
  Engine merged_ab(merge_lora_adapters(model_, {{a, 0.5f}, {b, 1.5f}}), options());
  EXPECT_EQ(run(merged_ab, {}).tokens, stacked.tokens);
}

TEST_F(LoraEngineTest, ConcurrentRequestsOfDifferentAdaptersGiveWhatEachGivesAlone) {
  Engine engine(model_, options());
  for (const char* n : {"a", "b", "c"}) engine.attach_lora(n, adapter_dir("llama", n));
  const std::vector<std::vector<LoraRequest>> sets = {{{"a", 1.0f}}, {}, {{"b", 1.0f}, {"c", 2.0f}}, {{"c", 1.0f}},
                                                      {{"a", 0.25f}}};
  std::vector<Output> alone;
  for (const auto& s : sets) alone.push_back(run(engine, s));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& s : sets) streams.push_back(engine.submit(greedy_request(prompt_, s)));
  for (std::size_t i = 0; i < sets.size(); ++i) EXPECT_EQ(drain(streams[i]).tokens, alone[i].tokens) << i;
  EXPECT_GT(engine.stats().steps, 0u);
}

TEST_F(LoraEngineTest, DetachRefusesNewRequestsAndRunningOnesFinish) {
  Output reference_base;
  {
    Engine fresh(model_, options());
    reference_base = run(fresh, {}, 40);
  }
  Engine engine(model_, options());
  engine.attach_lora("a", adapter_dir("llama", "a"));
  const Output reference_a = run(engine, {{"a", 1.0f}}, 40);
  auto running = engine.submit(greedy_request(prompt_, {{"a", 1.0f}}, 40));
  ASSERT_TRUE(running->next());  // under way
  engine.detach_lora("a");
  EXPECT_THROW(engine.submit(greedy_request(prompt_, {{"a", 1.0f}})), LoraNotFoundError);
  Output rest = drain(running);
  EXPECT_EQ(rest.error, "");
  EXPECT_EQ(rest.usage.completion_tokens, 40);
  // After the detach the base gives exactly its own outputs.
  EXPECT_EQ(run(engine, {}, 40).tokens, reference_base.tokens);
  EXPECT_NE(reference_a.tokens, reference_base.tokens);
  EXPECT_TRUE(engine.loras().empty());
}

TEST_F(LoraEngineTest, PrefixCacheKeepsAdapterSetsApart) {
  Engine engine(model_, options());
  engine.attach_lora("a", adapter_dir("llama", "a"));
  const Output first = run(engine, {{"a", 1.0f}});
  EXPECT_EQ(first.usage.cached_prompt_tokens, 0);
  const Output base = run(engine, {});
  EXPECT_EQ(base.usage.cached_prompt_tokens, 0);  // a's pages never serve the base
  const Output other_scale = run(engine, {{"a", 0.5f}});
  EXPECT_EQ(other_scale.usage.cached_prompt_tokens, 0);
  const Output again = run(engine, {{"a", 1.0f}});
  EXPECT_GT(again.usage.cached_prompt_tokens, 0);  // a's own pages do
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_GT(run(engine, {}).usage.cached_prompt_tokens, 0);
  // Attached again (new content possible): a namespace of its own.
  engine.attach_lora("a", adapter_dir("llama", "a"));
  EXPECT_EQ(run(engine, {{"a", 1.0f}}).usage.cached_prompt_tokens, 0);
}

TEST_F(LoraEngineTest, LeastRecentlyUsedAdaptersAreEvictedAndReadAgain) {
  const auto a = load_lora_adapter(adapter_dir("llama", "a"), *model_);
  const auto b = load_lora_adapter(adapter_dir("llama", "b"), *model_);
  EngineOptions o = options();
  o.lora_memory_bytes = static_cast<std::int64_t>(std::max(a->bytes(), b->bytes()));
  Engine engine(model_, o);
  engine.attach_lora("a", adapter_dir("llama", "a"));
  const Output with_a = run(engine, {{"a", 1.0f}});
  // The loop lets go of a finished request's adapters just after its last event.
  for (int i = 0; i < 500 && engine.loras()[0].in_use > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(engine.loras()[0].in_use, 0);
  engine.attach_lora("b", adapter_dir("llama", "b"));
  auto infos = engine.loras();
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_FALSE(infos[0].resident);  // a, the least recently used
  EXPECT_TRUE(infos[1].resident);
  EXPECT_EQ(run(engine, {{"a", 1.0f}}).tokens, with_a.tokens);  // read again
  infos = engine.loras();
  EXPECT_TRUE(infos[0].resident);
  EXPECT_FALSE(infos[1].resident);
}

TEST_F(LoraEngineTest, BadRequestsAndAttachesAreTypedErrors) {
  Engine engine(model_, options());
  engine.attach_lora("a", adapter_dir("llama", "a"));
  try {
    engine.submit(greedy_request(prompt_, {{"a", 1.0f}, {"nope", 1.0f}}));
    FAIL() << "no error";
  } catch (const LoraNotFoundError& e) {
    EXPECT_EQ(e.name(), "nope");
    EXPECT_EQ(e.code(), "lora_not_found");
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos);
  }
  auto param_of = [&](std::vector<LoraRequest> l) {
    try {
      engine.submit(greedy_request(prompt_, std::move(l)));
    } catch (const RequestError& e) {
      return e.param();
    }
    return std::string("none");
  };
  EXPECT_EQ(param_of({{"a", std::nanf("")}}), "lora");
  EXPECT_EQ(param_of({{"a", 1.0f}, {"a", 2.0f}}), "lora");
  EXPECT_EQ(param_of(std::vector<LoraRequest>(kMaxRequestLoras + 1, {"a", 1.0f})), "lora");
  EXPECT_THROW(engine.detach_lora("nope"), LoraNotFoundError);
  EXPECT_THROW(engine.attach_lora("", adapter_dir("llama", "a")), RequestError);
  EXPECT_THROW(engine.attach_lora("q", adapter_dir("qwen2", "a")), LoraError);  // shapes
  EXPECT_THROW(engine.attach_lora("q", dir_.path / "missing"), LoraError);
  EXPECT_THROW(engine.attach_lora("q", std::shared_ptr<LoraAdapter>()), LoraError);
  EXPECT_THROW(engine.attach_lora(std::string(257, 'n'), adapter_dir("llama", "a")), RequestError);
  EngineOptions negative = options();
  negative.lora_memory_bytes = -1;
  EXPECT_THROW({ Engine e(model_, negative); }, Error);
  // The engine and the adapter attached keep serving.
  EXPECT_EQ(engine.loras().size(), 1u);
  EXPECT_EQ(run(engine, {{"a", 1.0f}}).error, "");
}

}  // namespace
}  // namespace pie::testing
