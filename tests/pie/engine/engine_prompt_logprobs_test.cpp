// Prompt logprobs (GenerateRequest::prompt_logprobs) on the embedded random-weight model: the logprob of
// each prompt token equals, bit for bit, the logprob of the same token sampled, however the prompt is
// chunked, whatever the batch, through preemption, and when its pages are in the prefix cache (which the
// request bypasses, still filling it for others).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine_test_util.h"
#include "pie/engine.h"

namespace pie {
namespace {

using testing::RunResult;
using testing::collect;
using testing::run;

std::vector<std::int32_t> prompt_of(const std::string& text) {
  const auto& tok = *random_model()->tokenizer;
  std::vector<std::int32_t> ids{*tok.special_tokens().bos};
  const auto body = tok.encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

EngineOptions options(std::int32_t max_batch_tokens = 512, bool prefix_caching = true) {
  EngineOptions o;
  o.n_threads = 2;
  o.context_length = 512;
  o.max_batch_tokens = max_batch_tokens;
  o.prefix_caching = prefix_caching;
  return o;
}

GenerateRequest greedy(std::vector<std::int32_t> prompt, std::int32_t max_tokens, bool prompt_logprobs) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 3;
  r.max_tokens = max_tokens;
  r.ignore_eos = false;  // ignore_eos masks the end-of-sequence tokens: the sampled logprobs would differ
  r.prompt_logprobs = prompt_logprobs;
  return r;
}

void expect_same(const SampledToken& a, const SampledToken& b, std::size_t where) {
  EXPECT_EQ(a.token, b.token) << "position " << where;
  EXPECT_EQ(a.logprob, b.logprob) << "position " << where;  // bit for bit
  ASSERT_EQ(a.top.size(), b.top.size()) << "position " << where;
  for (std::size_t k = 0; k < a.top.size(); ++k) {
    EXPECT_EQ(a.top[k].token, b.top[k].token) << "position " << where;
    EXPECT_EQ(a.top[k].logprob, b.top[k].logprob) << "position " << where;
  }
}

const char* kText =
    "The little girl named Lily loved to play in the park with her friend Ben. One day they saw a big red ball "
    "under the tree and ran to it";

// Greedy tokens G after prompt P, then P + G as a prompt: the prompt logprobs of G's positions are G's.
TEST(PromptLogprobs, EqualTheLogprobsOfTheSameTokensSampled) {
  const std::vector<std::int32_t> p = prompt_of(kText);
  Engine engine(random_model(), options());
  RunResult generated = run(engine, greedy(p, 40, false));
  const auto& g = generated.samples.at(0);
  ASSERT_EQ(g.tokens.size(), 40u);
  EXPECT_EQ(generated.prompt_logprobs_events, 0);
  std::vector<std::int32_t> longer = p;
  longer.insert(longer.end(), g.tokens.begin(), g.tokens.end());
  // Chunks of 64 (the engine's bound for such prompts) and of 24 (the batch's): the same numbers.
  for (std::int32_t batch : {512, 24}) {
    Engine chunked(random_model(), options(batch));
    RunResult scored = run(chunked, greedy(longer, 1, true));
    EXPECT_EQ(scored.prompt_logprobs_events, 1);
    EXPECT_FALSE(scored.prompt_logprobs_after_tokens);
    ASSERT_EQ(scored.prompt_logprobs.size(), longer.size() - 1);
    for (std::size_t i = 0; i + 1 < longer.size(); ++i) {
      EXPECT_EQ(scored.prompt_logprobs[i].token, longer[i + 1]);
      EXPECT_LE(scored.prompt_logprobs[i].logprob, 0.0f);
      EXPECT_EQ(scored.prompt_logprobs[i].top.size(), 3u);
    }
    for (std::size_t j = 0; j < g.tokens.size(); ++j) {
      expect_same(scored.prompt_logprobs[p.size() - 1 + j], g.logprobs[j], j);
    }
    // The first generated token after P + G is G's continuation.
    EXPECT_EQ(scored.samples.at(0).tokens.size(), 1u);
  }
}

// A prompt whose pages are cached is computed anyway (its logits are needed), refills the cache for the
// next request, and gives the numbers of an engine without a prefix cache.
TEST(PromptLogprobs, BypassThePrefixCache) {
  const std::vector<std::int32_t> p = prompt_of(std::string(kText) + " " + kText);
  ASSERT_GT(p.size(), 48u);
  std::vector<SampledToken> uncached;
  {
    Engine engine(random_model(), options(512, false));
    uncached = run(engine, greedy(p, 4, true)).prompt_logprobs;
  }
  Engine engine(random_model(), options());
  RunResult first = run(engine, greedy(p, 4, false));
  RunResult scored = run(engine, greedy(p, 4, true));
  EXPECT_EQ(scored.usage.cached_prompt_tokens, 0);
  ASSERT_EQ(scored.prompt_logprobs.size(), uncached.size());
  for (std::size_t i = 0; i < uncached.size(); ++i) expect_same(scored.prompt_logprobs[i], uncached[i], i);
  EXPECT_EQ(scored.samples.at(0).tokens, first.samples.at(0).tokens);  // generation unchanged
  RunResult after = run(engine, greedy(p, 4, false));
  EXPECT_GT(after.usage.cached_prompt_tokens, 0);
}

// n samples share one prompt logprobs event; a prompt of one token has none.
TEST(PromptLogprobs, OnceForAllSamplesAndNoneForOneToken) {
  Engine engine(random_model(), options());
  GenerateRequest r = greedy(prompt_of("Two ways"), 6, true);
  r.n = 3;
  r.sampling.temperature = 1;
  r.sampling.seed = 9;
  RunResult three = run(engine, r);
  ASSERT_EQ(three.samples.size(), 3u);
  EXPECT_EQ(three.prompt_logprobs_events, 1);
  EXPECT_EQ(three.prompt_logprobs.size(), r.prompt.size() - 1);
  r.prompt_logprobs = false;
  RunResult plain = run(engine, r);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(three.samples[i].tokens, plain.samples.at(i).tokens);
  RunResult one = run(engine, greedy({*random_model()->tokenizer->special_tokens().bos}, 3, true));
  EXPECT_EQ(one.prompt_logprobs_events, 0);
  EXPECT_EQ(one.samples.at(0).tokens.size(), 3u);
}

// In a crowd, in a KV cache so small that sequences are preempted mid-prompt and recomputed: the same
// numbers, sent once.
TEST(PromptLogprobs, ThroughPreemption) {
  const std::vector<std::int32_t> p = prompt_of(std::string(kText) + " " + kText);
  std::vector<SampledToken> alone;
  {
    Engine engine(random_model(), options());
    alone = run(engine, greedy(p, 2, true)).prompt_logprobs;
  }
  EngineOptions o = options(64);
  o.context_length = 256;
  o.max_running = 8;
  const auto page_bytes = static_cast<std::int64_t>(4 * 2 * 16 * 2 * 64 * 4);  // as engine_test's
  o.kv_cache_bytes = 20 * page_bytes;
  Engine engine(random_model(), o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest other = greedy(prompt_of("Other prompt " + std::to_string(i) + " " + kText), 24, i % 2 == 0);
    other.sampling.logprobs = false;
    streams.push_back(engine.submit(other));
  }
  auto scored = engine.submit(greedy(p, 2, true));
  RunResult got = collect(*scored);
  for (auto& s : streams) EXPECT_TRUE(collect(*s).done);
  EXPECT_GT(engine.stats().preemptions, 0u);
  EXPECT_EQ(got.prompt_logprobs_events, 1);
  ASSERT_EQ(got.prompt_logprobs.size(), alone.size());
  for (std::size_t i = 0; i < alone.size(); ++i) expect_same(got.prompt_logprobs[i], alone[i], i);
}

}  // namespace
}  // namespace pie
