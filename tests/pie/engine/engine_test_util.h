// Helpers for the engine tests: run a request to its end and collect what each sample produced.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "pie/engine.h"
#include "pse/json_schema.h"

namespace pie::testing {

struct SampleResult {
  std::vector<std::int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::none;
  std::string error;
  std::vector<SampledToken> logprobs;
};

struct RunResult {
  std::vector<SampleResult> samples;
  Usage usage;
  bool done = false;
  std::vector<SampledToken> prompt_logprobs;  // from the events that carried them
  int prompt_logprobs_events = 0;
  bool prompt_logprobs_after_tokens = false;  // such an event came after a token
};

// Reads a stream to its done event (failing the test after `timeout`).
inline RunResult collect(RequestStream& stream, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  RunResult out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto e = stream.next_for(std::chrono::milliseconds(500));
    if (!e) {
      if (stream.timed_out()) continue;
      break;
    }
    if (e->done) {
      out.usage = e->usage;
      out.done = true;
      break;
    }
    if (!e->prompt_logprobs.empty()) {
      ++out.prompt_logprobs_events;
      out.prompt_logprobs_after_tokens |= std::any_of(out.samples.begin(), out.samples.end(),
                                                      [](const SampleResult& s) { return !s.tokens.empty(); });
      out.prompt_logprobs.insert(out.prompt_logprobs.end(), e->prompt_logprobs.begin(), e->prompt_logprobs.end());
    }
    if (out.samples.size() <= static_cast<std::size_t>(e->index)) out.samples.resize(e->index + 1);
    SampleResult& s = out.samples[static_cast<std::size_t>(e->index)];
    EXPECT_EQ(s.finish, FinishReason::none) << "event after the sample's finish";
    s.tokens.insert(s.tokens.end(), e->tokens.begin(), e->tokens.end());
    s.text += e->text;
    s.logprobs.insert(s.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
    if (e->finish != FinishReason::none) {
      s.finish = e->finish;
      s.error = e->error;
    }
  }
  EXPECT_TRUE(out.done) << "no done event within the timeout";
  return out;
}

// Requests that draft (prompt lookup on prompts that repeat themselves, the random model), one of each
// kind of row: greedy with fixed and adaptive draft lengths, logprobs, penalties, seeded sampling, and
// constrained (forced text drafted, a mask per position) greedy and sampled.
inline std::vector<GenerateRequest> drafting_requests(const Model& model) {
  const auto& tok = *model.tokenizer;
  std::vector<GenerateRequest> reqs;
  for (const char* p : {"a b c a b c a b c a b", "1 2 3 1 2 3 1 2", "Once upon a time, once upon a time, once"}) {
    GenerateRequest r;
    r.prompt = {*tok.special_tokens().bos};
    const auto body = tok.encode(p, {});
    r.prompt.insert(r.prompt.end(), body.begin(), body.end());
    r.max_tokens = 40;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.speculative = SpeculativeOptions{DraftMode::ngram, 4};
    reqs.push_back(r);
  }
  reqs[1].sampling.logprobs = true;
  reqs[1].sampling.top_logprobs = 3;
  reqs[1].speculative->k = 0;  // adaptive
  GenerateRequest penalised = reqs[0];
  penalised.sampling.repetition_penalty = 1.1f;
  penalised.sampling.frequency_penalty = 0.2f;
  penalised.sampling.presence_penalty = -0.2f;
  reqs.push_back(penalised);
  for (const float temperature : {0.7f, 1.0f}) {
    GenerateRequest seeded = reqs[2];
    seeded.sampling.temperature = temperature;
    seeded.sampling.top_k = 40;
    seeded.sampling.top_p = 0.95f;
    seeded.sampling.seed = 42;
    seeded.sampling.logprobs = true;
    reqs.push_back(seeded);
  }
  GenerateRequest constrained = reqs[0];
  constrained.ignore_eos = false;
  constrained.max_tokens = 80;
  constrained.grammar = pse::json_schema_to_grammar(
      std::string_view(R"({"type":"object","properties":{"a":{"type":"string","maxLength":6},)"
                       R"("b":{"type":"string","maxLength":6}},"required":["a","b"],"additionalProperties":false})"),
      pse::JsonSchemaOptions{.layout = pse::JsonLayout::kCompact});
  constrained.prompt = {*tok.special_tokens().bos};
  const auto json = tok.encode(R"({"a":"cat","b":"dog"} {"a":"cat","b":"dog"} {"a":"cat)", {});
  constrained.prompt.insert(constrained.prompt.end(), json.begin(), json.end());
  reqs.push_back(constrained);
  constrained.sampling.temperature = 0.8f;
  constrained.sampling.seed = 3;
  reqs.push_back(constrained);
  return reqs;
}

inline RunResult run(Engine& engine, GenerateRequest request) {
  auto stream = engine.submit(std::move(request));
  return collect(*stream);
}

}  // namespace pie::testing
