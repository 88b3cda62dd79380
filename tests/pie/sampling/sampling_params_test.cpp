// SamplingParams::validate: every field's range, non-finite values, and the field named in the error.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "pie/error.h"
#include "pie/sampling.h"

namespace {

using pie::SamplingParams;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Expects validate to throw RequestError naming `param`.
void expect_rejected(const std::function<void(SamplingParams&)>& set, const std::string& param) {
  SamplingParams p;
  set(p);
  try {
    p.validate(1000);
    ADD_FAILURE() << "accepted, expected an error on " << param;
  } catch (const pie::RequestError& e) {
    EXPECT_EQ(e.param(), param);
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
  }
}

void expect_accepted(const std::function<void(SamplingParams&)>& set) {
  SamplingParams p;
  set(p);
  EXPECT_NO_THROW(p.validate(1000));
}

TEST(SamplingParamsTest, DefaultsAreValid) { EXPECT_NO_THROW(SamplingParams{}.validate(1)); }

TEST(SamplingParamsTest, Temperature) {
  expect_accepted([](SamplingParams& p) { p.temperature = 0; });
  expect_accepted([](SamplingParams& p) { p.temperature = 100; });
  for (float v : {-0.001f, 100.5f, kNan, kInf, -kInf}) {
    expect_rejected([v](SamplingParams& p) { p.temperature = v; }, "temperature");
  }
}

TEST(SamplingParamsTest, TopK) {
  expect_accepted([](SamplingParams& p) { p.top_k = 0; });
  expect_accepted([](SamplingParams& p) { p.top_k = 5000; });  // more than the vocabulary: no truncation
  expect_rejected([](SamplingParams& p) { p.top_k = -1; }, "top_k");
}

TEST(SamplingParamsTest, TopP) {
  expect_accepted([](SamplingParams& p) { p.top_p = 1; });
  expect_accepted([](SamplingParams& p) { p.top_p = 1e-6f; });
  for (float v : {0.0f, -0.5f, 1.01f, kNan, kInf}) {
    expect_rejected([v](SamplingParams& p) { p.top_p = v; }, "top_p");
  }
}

TEST(SamplingParamsTest, MinP) {
  expect_accepted([](SamplingParams& p) { p.min_p = 0; });
  expect_accepted([](SamplingParams& p) { p.min_p = 1; });
  for (float v : {-0.1f, 1.5f, kNan}) {
    expect_rejected([v](SamplingParams& p) { p.min_p = v; }, "min_p");
  }
}

TEST(SamplingParamsTest, RepetitionPenalty) {
  expect_accepted([](SamplingParams& p) { p.repetition_penalty = 0.5f; });
  expect_accepted([](SamplingParams& p) { p.repetition_penalty = 3.0f; });
  for (float v : {0.0f, -1.0f, kNan, kInf}) {
    expect_rejected([v](SamplingParams& p) { p.repetition_penalty = v; }, "repetition_penalty");
  }
}

TEST(SamplingParamsTest, FrequencyAndPresencePenalties) {
  expect_accepted([](SamplingParams& p) { p.frequency_penalty = -2; p.presence_penalty = 2; });
  for (float v : {-2.01f, 2.5f, kNan, -kInf}) {
    expect_rejected([v](SamplingParams& p) { p.frequency_penalty = v; }, "frequency_penalty");
    expect_rejected([v](SamplingParams& p) { p.presence_penalty = v; }, "presence_penalty");
  }
}

TEST(SamplingParamsTest, LogitBias) {
  expect_accepted([](SamplingParams& p) { p.logit_bias = {{0, -100.0f}, {999, 100.0f}}; });
  expect_rejected([](SamplingParams& p) { p.logit_bias = {{5, 1.0f}, {1000, 1.0f}}; }, "logit_bias[1000]");
  expect_rejected([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias[-1]");
  expect_rejected([](SamplingParams& p) { p.logit_bias = {{123, 100.5f}}; }, "logit_bias[123]");
  expect_rejected([](SamplingParams& p) { p.logit_bias = {{123, kNan}}; }, "logit_bias[123]");
  expect_rejected([](SamplingParams& p) { p.logit_bias = {{7, -kInf}}; }, "logit_bias[7]");
}

TEST(SamplingParamsTest, TopLogprobs) {
  expect_accepted([](SamplingParams& p) { p.logprobs = true; p.top_logprobs = 20; });
  expect_rejected([](SamplingParams& p) { p.top_logprobs = 21; }, "top_logprobs");
  expect_rejected([](SamplingParams& p) { p.top_logprobs = -1; }, "top_logprobs");
}

TEST(SamplingParamsTest, MessageCarriesTheValue) {
  SamplingParams p;
  p.temperature = -1;
  try {
    p.validate(10);
    FAIL();
  } catch (const pie::RequestError& e) {
    EXPECT_STREQ(e.what(), "[request] temperature must be in [0, 100], got -1");
  }
}

TEST(SamplingParamsTest, BadVocabularySizeThrows) {
  EXPECT_THROW(SamplingParams{}.validate(0), pie::Error);
  EXPECT_THROW(SamplingParams{}.validate(-5), pie::Error);
}

}  // namespace
