// The engine end to end on the embedded default model: determinism and batch invariance (alone, in a
// crowd, with prefix-cache hits, through preemption), n > 1, stop strings, limits, cancellation, ignore_eos,
// logprobs, and every error path of submit() and of the options.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine_test_util.h"
#include "pie/engine.h"
#include "pie/grammar_vocabulary.h"
#include "pse/gbnf.h"
#include "pse/matcher.h"

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

EngineOptions small_options() {
  EngineOptions o;
  o.n_threads = 2;
  o.context_length = 512;
  return o;
}

GenerateRequest request(const std::string& text, float temperature, std::uint64_t seed, std::int32_t max_tokens) {
  GenerateRequest r;
  r.prompt = prompt_of(text);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;  // fixed lengths make the comparisons stronger
  return r;
}

TEST(DefaultModel, IsDeterministicAndTokenizes) {
  auto m = random_model();
  ASSERT_TRUE(m);
  EXPECT_EQ(m.get(), random_model().get());  // built once
  EXPECT_NE(m->name.find("random"), std::string::npos);
  const auto& tok = *m->tokenizer;
  EXPECT_EQ(m->config.n_vocab, static_cast<std::int32_t>(tok.vocab_size()));
  EXPECT_GT(tok.vocab_size(), 500u);
  ASSERT_TRUE(tok.special_tokens().bos);
  ASSERT_TRUE(tok.special_tokens().eos);
  EXPECT_EQ(tok.token_text(*tok.special_tokens().bos), "<s>");
  EXPECT_EQ(tok.token_text(*tok.special_tokens().eos), "</s>");
  const std::string text = "{\"name\": \"Alice\", \"age\": 30} Once upon a time, the little girl saw a dog.\n";
  const auto ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_LT(ids.size(), text.size() * 3 / 4) << "merges should shorten common English and JSON";
  EXPECT_FALSE(m->chat_template.empty());
  EXPECT_EQ(m->weights.layers.size(), 4u);
  EXPECT_EQ(m->config.n_kv_head * 2, m->config.n_head);  // GQA
}

TEST(Engine, RejectsBadOptions) {
  EngineOptions o = small_options();
  o.max_running = 0;
  EXPECT_THROW(Engine(random_model(), o), Error);
  o = small_options();
  o.max_batch_tokens = 0;
  EXPECT_THROW(Engine(random_model(), o), Error);
  o = small_options();
  o.kv_cache_bytes = 1000;  // less than one context
  EXPECT_THROW(Engine(random_model(), o), Error);
  o = small_options();
  o.grammar_compile_ms = 0;
  EXPECT_THROW(Engine(random_model(), o), Error);
  EXPECT_THROW(Engine(nullptr, small_options()), Error);
}

// kv_dtype: unset takes the device's default (f32 on the CPU), an explicit f16 or f32 is kept, and another
// type is refused by name.
TEST(Engine, KvDtypeDefaultsPerDeviceAndBadTypesAreNamed) {
  EngineOptions o = small_options();
  o.device = DeviceRequest::cpu;
  EXPECT_EQ(Engine(random_model(), o).options().kv_dtype, std::optional<tensor::DType>(tensor::DType::f32));
  o.kv_dtype = tensor::DType::f16;
  const Engine f16(random_model(), o);
  EXPECT_EQ(f16.options().kv_dtype, std::optional<tensor::DType>(tensor::DType::f16));
  o.kv_dtype = tensor::DType::f32;
  const Engine f32(random_model(), o);
  // The same pages at 4 bytes an element: twice the bytes (the pool sizing counts the element size).
  EXPECT_EQ(f32.options().kv_cache_bytes, 2 * f16.options().kv_cache_bytes);
  o.kv_dtype = tensor::DType::q8_0;
  try {
    Engine engine(random_model(), o);
    ADD_FAILURE() << "kv_dtype q8_0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_dtype q8_0"), std::string::npos) << e.what();
  }
}

void expect_request_error(Engine& engine, GenerateRequest r, const std::string& param) {
  try {
    engine.submit(std::move(r));
    ADD_FAILURE() << "no RequestError for " << param;
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param(), param) << e.what();
    EXPECT_NE(std::string(e.what()).find("[request]"), std::string::npos) << e.what();
  }
}

TEST(Engine, SubmitValidates) {
  Engine engine(random_model(), small_options());
  const GenerateRequest ok = request("Hello", 1.0f, 1, 4);
  GenerateRequest r = ok;
  r.prompt.clear();
  expect_request_error(engine, r, "prompt");
  r = ok;
  r.prompt.push_back(engine.model().config.n_vocab);
  expect_request_error(engine, r, "prompt");
  r = ok;
  r.prompt.push_back(-1);
  expect_request_error(engine, r, "prompt");
  r = ok;
  r.prompt.assign(512, 65);  // no room for one generated token
  expect_request_error(engine, r, "prompt");
  r = ok;
  r.sampling.temperature = -1;
  expect_request_error(engine, r, "temperature");
  r = ok;
  r.sampling.top_p = 0;
  expect_request_error(engine, r, "top_p");
  r = ok;
  r.n = 0;
  expect_request_error(engine, r, "n");
  r = ok;
  r.max_tokens = 0;
  expect_request_error(engine, r, "max_tokens");
  r = ok;
  r.stop = {""};
  expect_request_error(engine, r, "stop");
  r = ok;
  {
    // A grammar the front-end accepts but the compiler rejects: a reference to an undefined rule, and an
    // empty language.
    pse::Grammar g;
    const pse::RuleId root = g.declare_rule("root");
    const pse::RuleId missing = g.declare_rule("missing");
    g.define_rule(root, g.add_sequence({g.add_bytes("a"), g.add_rule_ref(missing)}));
    g.set_root(root);
    r = ok;
    r.grammar = g;
    expect_request_error(engine, r, "grammar");
  }
  r = ok;
  r.grammar = pse::parse_gbnf("root ::= \"a\" root");  // no finite sentence: empty language
  expect_request_error(engine, r, "grammar");
  r = ok;
  r.grammar = pse::parse_gbnf("root ::= \"a\"");
  r.grammar_special_tokens = {"<not-a-token>"};
  expect_request_error(engine, r, "grammar_special_tokens");
  // A valid one still runs after all those.
  RunResult res = run(engine, ok);
  ASSERT_EQ(res.samples.size(), 1u);
  EXPECT_EQ(res.samples[0].finish, FinishReason::length);
  EXPECT_EQ(res.usage.completion_tokens, 4);
  EXPECT_EQ(res.usage.prompt_tokens, static_cast<std::int32_t>(ok.prompt.size()));
}

TEST(Engine, CapacityErrors) {
  EngineOptions o = small_options();
  o.max_queued = 2;
  o.max_running = 1;
  Engine engine(random_model(), o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  int refused = 0;
  for (int i = 0; i < 8; ++i) {
    try {
      streams.push_back(engine.submit(request("Queue " + std::to_string(i), 1.0f, i, 400)));
    } catch (const CapacityError&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  for (auto& s : streams) s->cancel();
  for (auto& s : streams) collect(*s);
  engine.shutdown(false);
  EXPECT_THROW(engine.submit(request("late", 1.0f, 1, 4)), CapacityError);
}

TEST(Engine, GreedyAndSeededAreDeterministic) {
  Engine engine(random_model(), small_options());
  for (float temperature : {0.0f, 1.0f}) {
    RunResult a = run(engine, request("Once upon a time", temperature, 42, 40));
    RunResult b = run(engine, request("Once upon a time", temperature, 42, 40));
    ASSERT_EQ(a.samples.size(), 1u);
    EXPECT_EQ(a.samples[0].tokens.size(), 40u);
    EXPECT_EQ(a.samples[0].tokens, b.samples[0].tokens);
    EXPECT_EQ(a.samples[0].text, b.samples[0].text);
    EXPECT_EQ(a.samples[0].finish, FinishReason::length);
  }
  RunResult c = run(engine, request("Once upon a time", 1.0f, 43, 40));
  RunResult d = run(engine, request("Once upon a time", 1.0f, 42, 40));
  EXPECT_NE(c.samples[0].tokens, d.samples[0].tokens);
}

// The same request alone, in a batch of 16 others, after a prefix-cache hit, and through preemption in
// a tiny KV cache gives the same tokens.
TEST(Engine, BatchInvariance) {
  const std::string shared_prefix =
      "The little girl named Lily loved to play in the park with her friend Ben. One day they saw a big red "
      "ball under the tree and ";
  const GenerateRequest greedy = request(shared_prefix + "she", 0.0f, 7, 48);
  const GenerateRequest seeded = request(shared_prefix + "he", 0.9f, 7, 48);
  std::vector<std::int32_t> alone_greedy, alone_seeded;
  {
    EngineOptions o = small_options();
    o.prefix_caching = false;
    Engine engine(random_model(), o);
    alone_greedy = run(engine, greedy).samples.at(0).tokens;
    alone_seeded = run(engine, seeded).samples.at(0).tokens;
    ASSERT_EQ(alone_greedy.size(), 48u);
  }
  auto crowd = [&](Engine& engine, int n_others, int max_tokens) {
    std::vector<std::shared_ptr<RequestStream>> others;
    for (int i = 0; i < n_others; ++i) {
      others.push_back(engine.submit(
          request(i % 2 ? shared_prefix + "the dog" : "Other prompt " + std::to_string(i), 1.0f, 100 + i,
                  max_tokens + i)));
    }
    auto s1 = engine.submit(greedy);
    auto s2 = engine.submit(seeded);
    EXPECT_EQ(collect(*s1).samples.at(0).tokens, alone_greedy);
    EXPECT_EQ(collect(*s2).samples.at(0).tokens, alone_seeded);
    for (auto& o : others) EXPECT_TRUE(collect(*o).done);
  };
  {
    // In a batch of 16 others, small prefill chunks (prompts split over steps), prefix cache on: the
    // second round hits the cache.
    EngineOptions o = small_options();
    o.max_running = 18;
    o.max_batch_tokens = 40;
    Engine engine(random_model(), o);
    crowd(engine, 16, 30);
    const auto hits_before = engine.stats().prefix_hit_tokens;
    RunResult again = run(engine, greedy);
    EXPECT_EQ(again.samples.at(0).tokens, alone_greedy);
    EXPECT_GT(again.usage.cached_prompt_tokens, 0);
    EXPECT_GT(engine.stats().prefix_hit_tokens, hits_before);
  }
  {
    // A KV cache of 24 pages for up to 10 sequences of ~80 tokens (4-6 pages each): preemptions.
    EngineOptions o = small_options();
    o.context_length = 256;
    o.max_running = 10;
    o.max_batch_tokens = 64;
    auto page_bytes = static_cast<std::int64_t>(4 * 2 * 16 * 2 * 64 * 4);  // layers * K,V * 16 * kv heads * dim * f32
    o.kv_cache_bytes = 24 * page_bytes;
    Engine engine(random_model(), o);
    crowd(engine, 8, 40);
    EXPECT_GT(engine.stats().preemptions, 0u);
  }
}

TEST(Engine, SamplesOfOneRequest) {
  Engine engine(random_model(), small_options());
  GenerateRequest r = request("Two ways", 1.0f, 1000, 24);
  r.n = 3;
  RunResult both = run(engine, r);
  ASSERT_EQ(both.samples.size(), 3u);
  EXPECT_EQ(both.usage.completion_tokens, 72);
  EXPECT_EQ(both.usage.prompt_tokens, static_cast<std::int32_t>(r.prompt.size()));
  // Sample i uses seed + i: the same as a single request with that seed.
  for (int i = 0; i < 3; ++i) {
    RunResult one = run(engine, request("Two ways", 1.0f, 1000 + i, 24));
    EXPECT_EQ(both.samples[i].tokens, one.samples.at(0).tokens) << "sample " << i;
    EXPECT_EQ(both.samples[i].finish, FinishReason::length);
  }
  EXPECT_NE(both.samples[0].tokens, both.samples[1].tokens);
}

TEST(Engine, StopStringsAndMaxTokens) {
  Engine engine(random_model(), small_options());
  RunResult full = run(engine, request("Say something", 0.0f, 1, 60));
  const std::string text = full.samples.at(0).text;
  ASSERT_GT(text.size(), 20u);
  // A stop string taken from the middle of the output: everything before it, nothing of it.
  const std::string stop = text.substr(text.size() / 2, 3);
  GenerateRequest r = request("Say something", 0.0f, 1, 60);
  r.stop = {stop, "never-appears-xyz"};
  RunResult cut = run(engine, r);
  EXPECT_EQ(cut.samples.at(0).finish, FinishReason::stop);
  EXPECT_EQ(cut.samples[0].text, text.substr(0, text.find(stop)));
  EXPECT_LT(cut.usage.completion_tokens, 60);
  RunResult five = run(engine, request("Say something", 0.0f, 1, 5));
  EXPECT_EQ(five.samples.at(0).finish, FinishReason::length);
  EXPECT_EQ(five.samples[0].tokens.size(), 5u);
  EXPECT_EQ(std::vector<std::int32_t>(full.samples[0].tokens.begin(), full.samples[0].tokens.begin() + 5),
            five.samples[0].tokens);
  // The context end is a length finish too.
  GenerateRequest near_end = request("x", 0.0f, 1, 1000);
  near_end.prompt.resize(500, 65);
  RunResult end = run(engine, near_end);
  EXPECT_EQ(end.samples.at(0).finish, FinishReason::length);
  EXPECT_EQ(end.usage.completion_tokens, 12);
}

TEST(Engine, EndOfSequenceAndLogprobs) {
  Engine engine(random_model(), small_options());
  const std::int32_t eos = *random_model()->tokenizer->special_tokens().eos;
  // Bias toward </s>: stops at once unless ignore_eos, which never emits it.
  GenerateRequest r = request("End", 1.0f, 5, 20);
  r.ignore_eos = false;
  r.sampling.logit_bias = {{eos, 100.0f}};
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 2;
  RunResult stopped = run(engine, r);
  EXPECT_EQ(stopped.samples.at(0).finish, FinishReason::stop);
  EXPECT_TRUE(stopped.samples[0].tokens.empty());
  EXPECT_EQ(stopped.usage.completion_tokens, 0);
  r.ignore_eos = true;
  RunResult ignored = run(engine, r);
  EXPECT_EQ(ignored.samples.at(0).finish, FinishReason::length);
  ASSERT_EQ(ignored.samples[0].tokens.size(), 20u);
  EXPECT_EQ(std::count(ignored.samples[0].tokens.begin(), ignored.samples[0].tokens.end(), eos), 0);
  ASSERT_EQ(ignored.samples[0].logprobs.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(ignored.samples[0].logprobs[i].token, ignored.samples[0].tokens[i]);
    EXPECT_LE(ignored.samples[0].logprobs[i].logprob, 0.0f);
    EXPECT_EQ(ignored.samples[0].logprobs[i].top.size(), 2u);
  }
}

TEST(Engine, Cancellation) {
  Engine engine(random_model(), small_options());
  // Running: cancelled after a few events.
  auto stream = engine.submit(request("Go on", 1.0f, 3, 400));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(stream->next());
  stream->cancel();
  RunResult r = collect(*stream);
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].finish, FinishReason::cancelled);
  EXPECT_LT(r.usage.completion_tokens, 400);
  EXPECT_FALSE(stream->next());  // nothing after done
  // Queued: max_running 1 keeps the second waiting; cancelling it never runs it.
  {
    EngineOptions o = small_options();
    o.max_running = 1;
    Engine one(random_model(), o);
    auto first = one.submit(request("First", 1.0f, 1, 200));
    auto second = one.submit(request("Second", 1.0f, 2, 200));
    second->cancel();
    RunResult s = collect(*second);
    EXPECT_EQ(s.samples.at(0).finish, FinishReason::cancelled);
    first->cancel();
    collect(*first);
  }
  // Dropping the stream cancels; the engine goes idle and frees every page.
  { auto dropped = engine.submit(request("Dropped", 1.0f, 4, 400)); }
  for (int i = 0; i < 200 && engine.stats().requests_running + engine.stats().requests_queued > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  engine.shutdown(false);
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.requests_running, 0u);
  EXPECT_EQ(st.kv_pages_used, 0);
  EXPECT_GT(st.steps, 0u);
  EXPECT_GT(st.forward_seconds, 0.0);
}


// The bits of a mask among the model's rows.
std::int32_t allowed_in(const std::vector<std::uint32_t>& mask, std::int32_t n_vocab) {
  std::int32_t n = 0;
  for (std::int32_t id = 0; id < n_vocab; ++id) n += (mask[static_cast<std::size_t>(id) / 32] >> (id % 32)) & 1u;
  return n;
}

// Each token event says which token was sampled (the first) and which were forced (the rest), and how
// many tokens the mask allowed at that step, as a fresh matcher replaying the tokens finds; a sample that
// ends by sampling end-of-sequence names that token and its step's count. Unconstrained: no counts.
TEST(Engine, EventsTellSampledForcedAndAllowedTokens) {
  Engine engine(random_model(), small_options());
  const Model& model = engine.model();
  const std::int32_t n_vocab = model.config.n_vocab;
  const std::int32_t eos = model.tokenizer->special_tokens().end_of_generation.empty()
                               ? *model.tokenizer->special_tokens().eos
                               : model.tokenizer->special_tokens().end_of_generation.front();
  const pse::Grammar g = pse::parse_gbnf(R"(root ::= "The answer is " [0-9] [0-9]? "!"?)");
  pse::Matcher replay(pse::compile_grammar(g, grammar_vocabulary(*model.tokenizer, static_cast<std::size_t>(n_vocab))));
  GenerateRequest r = request("Question", 1.0f, 11, 64);
  r.ignore_eos = false;
  r.grammar = g;
  r.sampling.logit_bias = {{eos, 100.0f}};  // end as soon as the grammar may stop
  auto stream = engine.submit(r);
  int n_sampled = 0, n_forced = 0;
  bool ended = false;
  std::vector<std::uint32_t> mask(replay.mask_words());
  while (auto e = stream->next()) {
    if (e->done) break;
    if (!e->tokens.empty()) {
      ++n_sampled;
      replay.fill_next_token_bitmask(mask);
      EXPECT_EQ(e->n_allowed, allowed_in(mask, n_vocab));
      EXPECT_GT(e->n_allowed, 0);
      ASSERT_TRUE(replay.accept_token(e->tokens[0]));
      for (std::size_t i = 1; i < e->tokens.size(); ++i) {
        // A forced token spells the start of the only text the grammar allows.
        const std::string& bytes = model.tokenizer->token_bytes(e->tokens[i]);
        EXPECT_TRUE(replay.forced_continuation().starts_with(bytes)) << bytes;
        ASSERT_TRUE(replay.accept_token(e->tokens[i]));
        ++n_forced;
      }
      EXPECT_EQ(e->end_token, -1);
    }
    if (e->finish != FinishReason::none) {
      EXPECT_EQ(e->finish, FinishReason::stop) << e->error;
      if (e->end_token >= 0) {
        ended = true;
        EXPECT_EQ(e->end_token, eos);
        replay.fill_next_token_bitmask(mask);
        EXPECT_TRUE(replay.can_stop());
        EXPECT_EQ(e->n_allowed, allowed_in(mask, n_vocab));  // end-of-sequence among them
      }
    }
  }
  EXPECT_GE(n_sampled, 2);  // the first token of "The answer", then a digit
  EXPECT_GT(n_forced, 0);   // the rest of "The answer is "
  EXPECT_TRUE(ended);       // the biased end-of-sequence token, once the grammar allowed it

  // Unconstrained: no mask, no count; the sampled end-of-sequence token is still named.
  GenerateRequest free = request("Question", 1.0f, 11, 8);
  free.ignore_eos = false;
  free.sampling.logit_bias = {{eos, 100.0f}};
  auto free_stream = engine.submit(free);
  bool free_ended = false;
  while (auto e = free_stream->next()) {
    if (e->done) break;
    EXPECT_EQ(e->n_allowed, -1);
    if (e->finish != FinishReason::none) free_ended = e->end_token == eos;
  }
  EXPECT_TRUE(free_ended);
}

}  // namespace
}  // namespace pie
