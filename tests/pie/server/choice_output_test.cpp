// One choice's output: plain text, the reasoning split (however the text is cut into events), tool calls,
// and the finish reason.
#include <gtest/gtest.h>

#include "server/choice_output.h"

namespace pie::server {
namespace {

Event text_event(std::string text, FinishReason finish = FinishReason::none) {
  Event e;
  e.tokens = {1};
  e.text = std::move(text);
  e.finish = finish;
  return e;
}

// Feeds `pieces` and returns the concatenated content and reasoning deltas.
std::pair<std::string, std::string> run(ChoiceOutput& c, const std::vector<std::string>& pieces) {
  std::string content, reasoning;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    StreamDelta d = c.push(text_event(pieces[i], i + 1 == pieces.size() ? FinishReason::stop : FinishReason::none));
    content += d.content;
    reasoning += d.reasoning_content;
  }
  StreamDelta d = c.finish();
  content += d.content;
  reasoning += d.reasoning_content;
  return {content, reasoning};
}

TEST(ChoiceOutput, PlainTextPassesThrough) {
  PreparedRequest p;
  ChoiceOutput c(0, p);
  auto [content, reasoning] = run(c, {"Hel", "lo <think>"});
  EXPECT_EQ(content, "Hello <think>");
  EXPECT_EQ(reasoning, "");
  EXPECT_EQ(c.finish_reason_name(), "stop");
  EXPECT_EQ(c.text(), "Hello <think>");
  EXPECT_EQ(c.tokens().size(), 2u);
}

TEST(ChoiceOutput, ReasoningSplitAtEveryCut) {
  const std::string text = "<think>step one</think>\n\nThe answer.";
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    PreparedRequest p;
    p.parse.reasoning = ReasoningFormat::think;
    ChoiceOutput c(0, p);
    auto [content, reasoning] = run(c, {text.substr(0, cut), text.substr(cut)});
    EXPECT_EQ(reasoning, "step one") << "cut " << cut;
    EXPECT_EQ(content, "The answer.") << "cut " << cut;
    EXPECT_EQ(c.parsed().content, "The answer.");
    EXPECT_EQ(c.parsed().reasoning_content, "step one");
  }
}

TEST(ChoiceOutput, ThinkFormatWithoutReasoningIsAllContent) {
  PreparedRequest p;
  p.parse.reasoning = ReasoningFormat::think;
  ChoiceOutput c(0, p);
  auto [content, reasoning] = run(c, {"<thi", "nk? no"});
  EXPECT_EQ(content, "<think? no");
  EXPECT_EQ(reasoning, "");
}

TEST(ChoiceOutput, ThinkOpenStartsInsideReasoning) {
  PreparedRequest p;
  p.parse.reasoning = ReasoningFormat::think_open;
  ChoiceOutput c(0, p);
  auto [content, reasoning] = run(c, {"hmm</thi", "nk>ok"});
  EXPECT_EQ(reasoning, "hmm");
  EXPECT_EQ(content, "ok");
  // Output cut off inside the reasoning: all of it is reasoning.
  ChoiceOutput cut(0, p);
  auto [c2, r2] = run(cut, {"still thinking</th"});
  EXPECT_EQ(r2, "still thinking</th");
  EXPECT_EQ(c2, "");
}

TEST(ChoiceOutput, HermesToolCallsAreParsedAndFinishAsToolCalls) {
  PreparedRequest p;
  p.parse_tool_calls = true;
  p.tool_format = ToolCallFormat::hermes;
  p.parse.id_seed = 5;
  ChoiceOutput c(0, p);
  std::string name, arguments;
  for (const char* piece : {"<tool_call>\n{\"name\": \"get_w", "eather\", \"arguments\": {\"city\": ", "\"Paris\"}}\n</tool_call>"}) {
    StreamDelta d = c.push(text_event(piece));
    for (const ToolCallDelta& t : d.tool_calls) {
      name += t.name;
      arguments += t.arguments;
    }
  }
  c.push(text_event("", FinishReason::stop));
  for (const ToolCallDelta& t : c.finish().tool_calls) {
    name += t.name;
    arguments += t.arguments;
  }
  ASSERT_EQ(c.parsed().tool_calls.size(), 1u);
  EXPECT_EQ(c.parsed().tool_calls[0].name, "get_weather");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, c.parsed().tool_calls[0].arguments);
  EXPECT_TRUE(c.parsed().tool_calls[0].id.starts_with("call_"));
  EXPECT_EQ(c.finish_reason_name(), "tool_calls");
}

// max_tokens cuts the output inside its second call: the first is returned, the finish is "length";
// the generic format's calls stream before the object closes.
TEST(ChoiceOutput, CutInsideACallKeepsTheWholeCalls) {
  PreparedRequest p;
  p.parse_tool_calls = true;
  p.tool_format = ToolCallFormat::generic;
  ChoiceOutput c(0, p);
  StreamDelta d = c.push(text_event(R"({"tool_calls":[{"name":"add","arguments":{"a":1}},{"name":"add",)"));
  ASSERT_FALSE(d.tool_calls.empty());
  EXPECT_EQ(d.tool_calls[0].name, "add");
  c.push(text_event(R"("arguments":{"a")", FinishReason::length));
  c.finish();
  ASSERT_EQ(c.parsed().tool_calls.size(), 1u);
  EXPECT_EQ(c.parsed().tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(c.parsed().content, "");
  EXPECT_EQ(c.finish_reason_name(), "length");
}

// Call ids come from the request's id seed (fresh per request in the server), distinct per choice.
TEST(ChoiceOutput, CallIdsDifferAcrossChoicesAndSeeds) {
  auto first_id = [](std::uint64_t seed, std::int32_t index) {
    PreparedRequest p;
    p.parse_tool_calls = true;
    p.tool_format = ToolCallFormat::generic;
    p.parse.id_seed = seed;
    ChoiceOutput c(index, p);
    c.push(text_event(R"({"tool_calls":[{"name":"add","arguments":{}}]})", FinishReason::stop));
    c.finish();
    EXPECT_EQ(c.finish_reason_name(), "tool_calls");
    return c.parsed().tool_calls.at(0).id;
  };
  EXPECT_EQ(first_id(1, 0), first_id(1, 0));
  EXPECT_NE(first_id(1, 0), first_id(1, 1));
  EXPECT_NE(first_id(1, 0), first_id(2, 0));
}

TEST(ChoiceOutput, LengthAndErrorFinishes) {
  PreparedRequest p;
  ChoiceOutput c(0, p);
  c.push(text_event("x", FinishReason::length));
  EXPECT_EQ(c.finish_reason_name(), "length");
  ChoiceOutput e(1, p);
  Event failed = text_event("", FinishReason::error);
  failed.error = "mask allows no token";
  e.push(failed);
  EXPECT_EQ(e.finish_reason(), FinishReason::error);
  EXPECT_EQ(e.error(), "mask allows no token");
}

}  // namespace
}  // namespace pie::server
