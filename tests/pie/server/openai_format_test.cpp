// Response formatting: messages with tool calls, stream deltas, chunks, usage, SSE framing.
#include <gtest/gtest.h>

#include "pie/engine.h"
#include "server/openai_format.h"

namespace pie::server {
namespace {

TEST(OpenAIFormat, MessageWithToolCallsHasNullContent) {
  ParsedOutput parsed;
  parsed.tool_calls.push_back({"call_abc", "get_weather", R"({"city":"Paris"})"});
  Json m = chat_message_json(parsed);
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_abc");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_FALSE(m.contains("reasoning_content"));
  ParsedOutput text;
  text.content = "hi";
  text.reasoning_content = "hmm";
  Json t = chat_message_json(text);
  EXPECT_EQ(t["content"], "hi");
  EXPECT_EQ(t["reasoning_content"], "hmm");
  EXPECT_FALSE(t.contains("tool_calls"));
}

// The echoed prompt's legacy logprobs: every prompt token, the first one's logprob and alternatives null,
// offsets in the prompt's text; then the output's after them.
TEST(OpenAIFormat, PromptLogprobsOfAnEcho) {
  const tokenizers::Tokenizer& tok = *random_model()->tokenizer;
  const std::vector<std::int32_t> prompt = tok.encode("Hi there");
  ASSERT_GE(prompt.size(), 2u);
  std::vector<SampledToken> logprobs;
  for (std::size_t i = 1; i < prompt.size(); ++i) {
    logprobs.push_back({prompt[i], -0.5f * static_cast<float>(i), {{prompt[i], -0.5f * static_cast<float>(i)}}});
  }
  Json p = prompt_logprobs_json(prompt, logprobs, tok);
  ASSERT_EQ(p["tokens"].size(), prompt.size());
  std::string spelled;
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    EXPECT_EQ(p["text_offset"][i], spelled.size());
    spelled += p["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(spelled, "Hi there");
  EXPECT_TRUE(p["token_logprobs"][0].is_null());
  EXPECT_TRUE(p["top_logprobs"][0].is_null());
  EXPECT_EQ(p["token_logprobs"][1], -0.5);
  EXPECT_EQ(p["top_logprobs"][1].size(), 1u);
  const Json output = completion_logprobs_json({{prompt[0], -1.0f, {}}}, tok, spelled.size());
  const Json both = concat_completion_logprobs(p, output);
  ASSERT_EQ(both["tokens"].size(), prompt.size() + 1);
  EXPECT_EQ(both["token_logprobs"].back(), -1.0);
  EXPECT_EQ(both["text_offset"].back(), spelled.size());
}

TEST(OpenAIFormat, StreamedToolCallDeltas) {
  StreamDelta first;
  first.tool_calls.push_back({0, "call_x", "f", ""});
  Json d = chat_delta_json(first);
  EXPECT_EQ(d["tool_calls"][0]["index"], 0);
  EXPECT_EQ(d["tool_calls"][0]["id"], "call_x");
  EXPECT_EQ(d["tool_calls"][0]["type"], "function");
  EXPECT_EQ(d["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(d["tool_calls"][0]["function"]["arguments"], "");
  StreamDelta later;
  later.tool_calls.push_back({0, "", "", R"({"a":)"});
  Json l = chat_delta_json(later);
  EXPECT_FALSE(l["tool_calls"][0].contains("id"));
  EXPECT_FALSE(l["tool_calls"][0]["function"].contains("name"));
  EXPECT_EQ(l["tool_calls"][0]["function"]["arguments"], R"({"a":)");
  StreamDelta both;  // the first piece and an argument fragment of one call: one entry
  both.tool_calls.push_back({1, "call_y", "g", ""});
  both.tool_calls.push_back({1, "", "", "{}"});
  Json merged = chat_delta_json(both);
  ASSERT_EQ(merged["tool_calls"].size(), 1u);
  EXPECT_EQ(merged["tool_calls"][0]["id"], "call_y");
  EXPECT_EQ(merged["tool_calls"][0]["function"]["arguments"], "{}");
  StreamDelta content;
  content.content = "x";
  EXPECT_EQ(chat_delta_json(content), (Json{{"content", "x"}}));
}

TEST(OpenAIFormat, ChunksUsageAndFraming) {
  ResponseHeader h{"chatcmpl-1", 123, "m", "fp"};
  Json chunk = chat_chunk_json(h, 1, Json{{"content", "a"}}, std::nullopt, nullptr, true);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["index"], 1);
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunk.contains("usage"));
  EXPECT_TRUE(chunk["usage"].is_null());
  Json last = chat_chunk_json(h, 0, Json::object(), std::string("stop"), nullptr, false);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(last.contains("usage"));

  Usage u{10, 4, 6};
  Json usage = usage_chunk_json(h, "chat.completion.chunk", u);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 16);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_FALSE(usage["usage"].contains("completion_tokens_details"));  // no speculation: nothing to say
  // Speculative decoding, as OpenAI's predicted-output counts.
  Usage spec{10, 0, 6, 9, 7};
  const Json details = usage_json(spec)["completion_tokens_details"];
  EXPECT_EQ(details["accepted_prediction_tokens"], 7);
  EXPECT_EQ(details["rejected_prediction_tokens"], 2);

  EXPECT_EQ(sse_event(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
  // Invalid UTF-8 (a token holding half a character) is replaced, never thrown on.
  EXPECT_NO_THROW(dump_json(Json{{"t", std::string("\xE2\x82")}}));
  Json completion = completion_chunk_json(h, 0, "t", std::nullopt, nullptr, false);
  EXPECT_EQ(completion["object"], "text_completion");
  EXPECT_EQ(completion["choices"][0]["text"], "t");
}

}  // namespace
}  // namespace pie::server
