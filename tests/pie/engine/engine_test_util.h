// Helpers for the engine tests: run a request to its end and collect what each sample produced.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "pie/engine.h"

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

inline RunResult run(Engine& engine, GenerateRequest request) {
  auto stream = engine.submit(std::move(request));
  return collect(*stream);
}

}  // namespace pie::testing
