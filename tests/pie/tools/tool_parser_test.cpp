// parse_tool_calls and ToolCallStreamParser: every format, reasoning, malformed output, and
// streamed reassembly against the one-shot parse for random splits.
#include <gtest/gtest.h>

#include <random>

#include "pie/tool_calls.h"

namespace pie {
namespace {

ParsedOutput parse(std::string_view text, ToolCallFormat f,
                   ReasoningFormat r = ReasoningFormat::none) {
  ParseOptions o;
  o.reasoning = r;
  o.id_seed = 42;
  return parse_tool_calls(text, f, o);
}

TEST(ParseToolCalls, Hermes) {
  const auto p = parse(
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"San "
      "Jose\", "
      "\"days\": [1, 2]}}\n</tool_call>\n<tool_call>\n{\"arguments\": {}, \"name\": "
      "\"now\"}\n</tool_call>",
      ToolCallFormat::hermes);
  EXPECT_EQ(p.content, "Let me look.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"city":"San Jose","days":[1,2]})");
  EXPECT_EQ(p.tool_calls[1].name, "now");
  EXPECT_EQ(p.tool_calls[1].arguments, "{}");
  EXPECT_EQ(p.tool_calls[0].id.size(), 29u);
  EXPECT_EQ(p.tool_calls[0].id.rfind("call_", 0), 0u);
  EXPECT_NE(p.tool_calls[0].id, p.tool_calls[1].id);
  // Same text and seed, same ids; another seed, other ids.
  EXPECT_EQ(parse_tool_calls("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
                             ToolCallFormat::hermes, {.id_seed = 9})
                .tool_calls[0]
                .id,
            parse_tool_calls("<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
                             ToolCallFormat::hermes, {.id_seed = 9})
                .tool_calls[0]
                .id);
  EXPECT_NE(parse_tool_calls("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
                             ToolCallFormat::hermes, {.id_seed = 9})
                .tool_calls[0]
                .id,
            parse_tool_calls("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
                             ToolCallFormat::hermes, {.id_seed = 10})
                .tool_calls[0]
                .id);
}

TEST(ParseToolCalls, ArgumentsKeepTokensAndDropWhitespace) {
  const auto p = parse(
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"a  b\\n\\\" }\", \"x\": 1.50e3,\n"
      "\"u\": \"\\u00e9\"}}</tool_call>",
      ToolCallFormat::hermes);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"s":"a  b\n\" }","x":1.50e3,"u":"\u00e9"})");
  // Arguments given as a string holding the object's JSON.
  const auto q = parse(R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)",
                       ToolCallFormat::hermes);
  ASSERT_EQ(q.tool_calls.size(), 1u);
  EXPECT_EQ(q.tool_calls[0].arguments, R"({"a":1})");
}

TEST(ParseToolCalls, MalformedCallsStayContent) {
  for (const std::string text : {
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>",  // bad JSON
           "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                         // no name
           "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",                           // no arguments
           "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",  // not an object
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}",                 // unclosed
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"x",         // truncated
           "<tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": {}} junk </tool_call>",
       }) {
    const auto p = parse(text, ToolCallFormat::hermes);
    EXPECT_TRUE(p.tool_calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
  // A malformed block does not hide a good one after it.
  const auto p = parse(
      "<tool_call>oops</tool_call>\n<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>",
      ToolCallFormat::hermes);
  EXPECT_EQ(p.content, "<tool_call>oops</tool_call>");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "g");
}

TEST(ParseToolCalls, PlainTextIsContent) {
  for (ToolCallFormat f : {ToolCallFormat::generic, ToolCallFormat::hermes,
                           ToolCallFormat::llama3_json, ToolCallFormat::mistral,
                           ToolCallFormat::functionary_v3_1, ToolCallFormat::firefunction_v2}) {
    const auto p = parse("  Hello, world!\n", f);
    EXPECT_EQ(p.content, "  Hello, world!\n") << tool_call_format_name(f);
    EXPECT_TRUE(p.tool_calls.empty());
    EXPECT_EQ(parse("", f).content, "");
  }
}

TEST(ParseToolCalls, Llama3Json) {
  auto p = parse(R"({"name": "get_weather", "parameters": {"city": "Rome"}})",
                 ToolCallFormat::llama3_json);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(p.content, "");
  p = parse(
      R"(<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": {"x": 1}})",
      ToolCallFormat::llama3_json);
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[1].name, "b");
  p = parse(R"({"name": "a", "parameters": {}} and then some text)", ToolCallFormat::llama3_json);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, R"({"name": "a", "parameters": {}} and then some text)");
  p = parse(R"({"key": "value"})", ToolCallFormat::llama3_json);
  EXPECT_TRUE(p.tool_calls.empty());
}

TEST(ParseToolCalls, MistralFunctionaryFirefunctionGeneric) {
  auto p = parse(
      R"([TOOL_CALLS][{"name": "a", "arguments": {"q": "x"}, "id": "abcDEF123"}, {"name": "b", "arguments": {}}])",
      ToolCallFormat::mistral);
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"q":"x"})");
  EXPECT_EQ(p.tool_calls[0].id.size(), 9u);
  EXPECT_EQ(p.content, "");
  p = parse(R"([TOOL_CALLS][{"name": "a", "arguments": {}}, oops])", ToolCallFormat::mistral);
  EXPECT_TRUE(p.tool_calls.empty());
  p = parse(R"(<function=get_weather>{"city": "Oslo"}</function><function=now>{}</function>)",
            ToolCallFormat::functionary_v3_1);
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[1].arguments, "{}");
  p = parse("<function=f> \n{\"a\": 1}\n </function>", ToolCallFormat::functionary_v3_1);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"a":1})");
  p = parse(R"(Sure. functools[{"name": "a", "arguments": {"n": 1}}])",
            ToolCallFormat::firefunction_v2);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.content, "Sure.");
  p = parse(R"({"tool_calls": [{"name": "a", "arguments": {"n": 1}}]})", ToolCallFormat::generic);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"n":1})");
  p = parse(R"( {"content": "It is \"sunny\"."} )", ToolCallFormat::generic);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, "It is \"sunny\".");
  p = parse(R"({"tool_calls": [{"name": "a"}]})", ToolCallFormat::generic);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, R"({"tool_calls": [{"name": "a"}]})");
}

TEST(ParseToolCalls, Reasoning) {
  auto p = parse(
      "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": "
      "{}}\n"
      "</tool_call>",
      ToolCallFormat::hermes, ReasoningFormat::think);
  EXPECT_EQ(p.reasoning_content, "The user wants weather.");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  p = parse("No thinking here.", ToolCallFormat::hermes, ReasoningFormat::think);
  EXPECT_EQ(p.reasoning_content, "");
  EXPECT_EQ(p.content, "No thinking here.");
  p = parse("Hmm, so 2+2.\n</think>\n\nIt is 4.", ToolCallFormat::hermes,
            ReasoningFormat::think_open);
  EXPECT_EQ(p.reasoning_content, "Hmm, so 2+2.");
  EXPECT_EQ(p.content, "It is 4.");
  p = parse("Still thinking <tool_call>", ToolCallFormat::hermes, ReasoningFormat::think_open);
  EXPECT_EQ(p.reasoning_content, "Still thinking <tool_call>");
  EXPECT_TRUE(p.tool_calls.empty());
}

// Concatenates a stream's deltas into a ParsedOutput.
ParsedOutput reassemble(const std::vector<StreamDelta>& deltas) {
  ParsedOutput out;
  for (const StreamDelta& d : deltas) {
    out.content += d.content;
    out.reasoning_content += d.reasoning_content;
    for (const ToolCallDelta& c : d.tool_calls) {
      if (c.index == static_cast<std::int32_t>(out.tool_calls.size())) {
        EXPECT_FALSE(c.id.empty());
        EXPECT_FALSE(c.name.empty());
        EXPECT_TRUE(c.arguments.empty());
        out.tool_calls.push_back({c.id, c.name, ""});
      } else {
        EXPECT_LT(c.index, static_cast<std::int32_t>(out.tool_calls.size()));
        EXPECT_TRUE(c.id.empty());
        EXPECT_TRUE(c.name.empty());
        out.tool_calls.at(static_cast<std::size_t>(c.index)).arguments += c.arguments;
      }
    }
  }
  return out;
}

struct StreamCase {
  ToolCallFormat format;
  ReasoningFormat reasoning;
  std::string text;
};

TEST(ToolCallStreamParser, RandomSplitsReassembleToTheOneShotParse) {
  const std::vector<StreamCase> cases = {
      {ToolCallFormat::hermes, ReasoningFormat::none,
       "Checking <tool the weather.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
       "{\"city\": \"a b\\\"c\", "
       "\"n\": [1, 2.5, true, null]}}\n</tool_call>\n<tool_call>{\"name\": \"t\", \"arguments\": "
       "{}}</tool_call>\n"},
      {ToolCallFormat::hermes, ReasoningFormat::think,
       "<think>\nI should call it.\n\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
       "{\"x\": 10}}\n</tool_call>"},
      {ToolCallFormat::hermes, ReasoningFormat::think_open,
       "Just answer.\n</think>\n\nThe answer is 4.  \n"},
      {ToolCallFormat::hermes, ReasoningFormat::none, "<tool_call>broken</tool_call> then text"},
      {ToolCallFormat::llama3_json, ReasoningFormat::none,
       "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"q\": \"x y\"}}; {\"name\": \"b\", "
       "\"parameters\": {}}"},
      {ToolCallFormat::llama3_json, ReasoningFormat::none, "Plain answer with {braces} inside."},
      {ToolCallFormat::mistral, ReasoningFormat::none,
       "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"k\": [1, {\"z\": \"}\"}]}, \"id\": "
       "\"abcdefghi\"}, "
       "{\"name\": \"b\", \"arguments\": {}}]"},
      {ToolCallFormat::functionary_v3_1, ReasoningFormat::none,
       "Text first <fun.<function=a>{\"v\": "
       "\"</function>\"}</function>\n<function=b>{}</function>"},
      {ToolCallFormat::firefunction_v2, ReasoningFormat::none,
       " functools[{\"name\": \"a\", \"arguments\": {\"n\": -0.5e-3}}]"},
      {ToolCallFormat::generic, ReasoningFormat::none,
       "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"n\": 1}}, {\"name\": \"b\", "
       "\"arguments\": {}}]}"},
      {ToolCallFormat::generic, ReasoningFormat::none, "{\"content\": \"hi there\"}"},
      // A long string argument (the stream's fast path inside strings), with escapes and braces in
      // it.
      {ToolCallFormat::hermes, ReasoningFormat::none,
       "<tool_call>{\"name\": \"write\", \"arguments\": {\"path\": \"a.py\", \"text\": \"def "
       "f(x):\\n    "
       "return {'a': [x, \\\"}\\\"]}\\n# </tool_call> is text here, and so are { and ] and \\\\ "
       "\\u00e9 "
       "and a long tail of plain words that goes on and on and on\"}}</tool_call>"},
  };
  std::mt19937 rng(1234);
  for (const StreamCase& c : cases) {
    ParseOptions o;
    o.reasoning = c.reasoning;
    o.id_seed = 77;
    const ParsedOutput whole = parse_tool_calls(c.text, c.format, o);
    for (int trial = 0; trial < 60; ++trial) {
      ToolCallStreamParser stream(c.format, o);
      std::vector<StreamDelta> deltas;
      for (std::size_t i = 0; i < c.text.size();) {
        const std::size_t n = trial == 0 ? 1 : 1 + rng() % 12;
        deltas.push_back(stream.push(std::string_view(c.text).substr(i, n)));
        i += n;
      }
      deltas.push_back(stream.finish());
      const ParsedOutput got = reassemble(deltas);
      ASSERT_EQ(got.content, whole.content) << c.text;
      ASSERT_EQ(got.reasoning_content, whole.reasoning_content) << c.text;
      ASSERT_EQ(got.tool_calls, whole.tool_calls) << c.text;
      EXPECT_TRUE(stream.finish().empty());
    }
  }
}

TEST(ToolCallStreamParser, StreamsArgumentsAndHoldsBackMarkers) {
  ToolCallStreamParser s(ToolCallFormat::hermes);
  StreamDelta d = s.push("Hi <tool_");
  EXPECT_EQ(d.content, "Hi");
  d = s.push("call>\n{\"name\": \"f\", \"arguments\": {\"a\": ");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 2u);  // the header, then the arguments so far
  EXPECT_EQ(d.tool_calls[0].name, "f");
  EXPECT_EQ(d.tool_calls[1].arguments, "{\"a\":");
  EXPECT_FALSE(d.tool_calls[0].id.empty());
  d = s.push("\"long value");
  ASSERT_FALSE(d.tool_calls.empty());
  EXPECT_EQ(d.tool_calls.back().arguments.find("long value") != std::string::npos, true);
  s.push("\"}}\n</tool_call>");
  s.finish();
  ASSERT_EQ(s.parsed().tool_calls.size(), 1u);
  EXPECT_EQ(s.parsed().tool_calls[0].arguments, R"({"a":"long value"})");
  EXPECT_EQ(s.parsed().content, "Hi");
}

TEST(ToolCallStreamParser, TruncatedCallNeverThrows) {
  // A call cut off mid-arguments (finish "length"): what was streamed stays, nothing is repeated.
  ToolCallStreamParser s(ToolCallFormat::hermes);
  s.push("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1");
  const StreamDelta d = s.finish();
  EXPECT_EQ(s.parsed().tool_calls.size(), 1u);
  EXPECT_TRUE(d.tool_calls.empty());
  ToolCallStreamParser t(ToolCallFormat::hermes);
  t.push("<tool_call>{\"name\": \"f\", \"arguments\": {}} oops");
  t.push(" more text");
  t.finish();
  EXPECT_NE(t.parsed().content.find("more text"), std::string::npos);
}

// An output cut short (max_tokens) inside a call: the calls with whole arguments are returned, the
// cut one and the rest of its block dropped; the same text read as whole leaves the block as text.
TEST(ParseToolCalls, CutOutputKeepsTheWholeCalls) {
  struct Case {
    ToolCallFormat format;
    std::string text;          // one whole call (f, {"a":1}) then a second one cut inside
    std::string content;       // the content of the cut parse
  };
  const std::vector<Case> cases = {
      {ToolCallFormat::generic, R"({"tool_calls":[{"name":"f","arguments":{"a":1}},{"name":"g","argu)", ""},
      {ToolCallFormat::hermes,
       "Sure.\n<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1}}\n</tool_call>\n"
       "<tool_call>\n{\"name\":\"g\"",
       "Sure."},
      {ToolCallFormat::mistral, R"([TOOL_CALLS][{"name":"f","arguments":{"a":1}},{"name":"g","arguments":{"b)", ""},
      {ToolCallFormat::llama3_json, R"({"name":"f","parameters":{"a":1}};{"name":"g","parameters":{)", ""},
      {ToolCallFormat::functionary_v3_1, R"(<function=f>{"a":1}</function><function=g>{"b":)", ""},
      {ToolCallFormat::firefunction_v2, R"(functools[{"name":"f","arguments":{"a":1}},{"na)", ""},
  };
  for (const Case& c : cases) {
    const ParsedOutput cut = parse_tool_calls(c.text, c.format, {}, /*cut=*/true);
    ASSERT_EQ(cut.tool_calls.size(), 1u) << c.text;
    EXPECT_EQ(cut.tool_calls[0].name, "f");
    EXPECT_EQ(cut.tool_calls[0].arguments, R"({"a":1})");
    EXPECT_EQ(cut.content, c.content) << c.text;
    EXPECT_NE(parse_tool_calls(c.text, c.format).content, c.content) << c.text;  // whole: the rest is text
    // Cut inside the first call: nothing whole, and no wrapper text either.
    const std::string first_cut = c.text.substr(0, c.text.find("a\"") + 1);
    const ParsedOutput none = parse_tool_calls(first_cut, c.format, {}, true);
    EXPECT_TRUE(none.tool_calls.empty()) << first_cut;
    EXPECT_EQ(none.content, c.content) << first_cut;
  }
  // Cut inside the generic format's content: the content so far.
  auto cut_content = [](std::string_view text) {
    return parse_tool_calls(text, ToolCallFormat::generic, {}, /*cut=*/true).content;
  };
  EXPECT_EQ(cut_content(R"({"content":"It is sun)"), "It is sun");
  EXPECT_EQ(cut_content(R"({"content":"a\u00e9b\)"), "a\xC3\xA9" "b");
  EXPECT_EQ(cut_content(R"({"content":"x","tool_)"), "");  // another shape: read only whole
  // A cut output without calls is content, cut or not.
  EXPECT_EQ(parse_tool_calls("It is sun", ToolCallFormat::hermes, {}, true).content, "It is sun");
}

// The generic format streams its calls and its content as they come, not once the object closes.
TEST(ToolCallStreamParser, GenericStreamsCallsAndContent) {
  ToolCallStreamParser calls(ToolCallFormat::generic);
  StreamDelta d = calls.push(R"({"tool_calls":[{"name":"f","arguments":{"a":)");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  EXPECT_EQ(d.tool_calls[1].arguments, R"({"a":)");
  d = calls.push(R"("x y z"}},{"name":"g","arguments":{}}]})");
  ASSERT_FALSE(d.tool_calls.empty());
  EXPECT_EQ(d.tool_calls.back().index, 1);
  calls.finish();
  ASSERT_EQ(calls.parsed().tool_calls.size(), 2u);
  EXPECT_EQ(calls.parsed().tool_calls[0].arguments, R"({"a":"x y z"})");

  ToolCallStreamParser content(ToolCallFormat::generic);
  EXPECT_EQ(content.push(R"({"content":"Hel)").content, "Hel");
  EXPECT_EQ(content.push(R"(lo \)").content, "lo ");            // an escape cut in two
  EXPECT_EQ(content.push(R"("you\ud83d)").content, "\"you");     // a surrogate pair cut in two
  EXPECT_EQ(content.push(R"(\ude00"})").content, "\xF0\x9F\x98\x80");
  EXPECT_TRUE(content.finish().empty());
  EXPECT_EQ(content.parsed().content, "Hello \"you\xF0\x9F\x98\x80");
}

// A stream cut inside its second call: the call's deltas went out, but the parsed output (the
// non-streamed answer) holds the first call only.
TEST(ToolCallStreamParser, CutStreamParsesTheWholeCalls) {
  ToolCallStreamParser s(ToolCallFormat::generic);
  s.push(R"({"tool_calls":[{"name":"f","arguments":{"a":1}},{"name":"g","arguments":{"b":)");
  s.finish(/*cut=*/true);
  ASSERT_EQ(s.parsed().tool_calls.size(), 1u);
  EXPECT_EQ(s.parsed().tool_calls[0].name, "f");
  EXPECT_EQ(s.parsed().content, "");
}

}  // namespace
}  // namespace pie

namespace pie {
namespace {

// Random well-formed outputs (text with near-marker fragments, calls with random JSON arguments
// whose strings hold markers and escapes, reasoning) stream back to the one-shot parse; random
// mutations of them never throw, in either parser.
std::string random_json(std::mt19937& rng, int depth) {
  static const char* kStrings[] = {"\"plain\"",        "\"with \\\"quote\\\" and \\\\\"",
                                   "\"<tool_call>\"",  "\"</tool_call>}\"",
                                   "\"[TOOL_CALLS]\"", "\"\\u00e9\\n\"",
                                   "\"</function>\"",  "\"\""};
  switch (depth > 2 ? rng() % 4 : rng() % 6) {
    case 0:
      return kStrings[rng() % 8];
    case 1:
      return std::to_string(static_cast<int>(rng() % 2000) - 1000) + (rng() % 2 ? ".25" : "");
    case 2:
      return rng() % 2 ? "true" : "null";
    case 3:
      return "false";
    case 4: {
      std::string s = "[";
      for (int i = 0, n = static_cast<int>(rng() % 3); i < n; ++i)
        s += (i ? ", " : " ") + random_json(rng, depth + 1);
      return s + "]";
    }
    default: {
      std::string s = "{";
      for (int i = 0, n = static_cast<int>(rng() % 3); i < n; ++i) {
        s += (i ? ",\n  " : "") + std::string("\"k") + std::to_string(i) +
             "\": " + random_json(rng, depth + 1);
      }
      return s + "}";
    }
  }
}

std::string random_arguments(std::mt19937& rng) {
  std::string s = "{";
  for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) {
    s += (i ? ", " : "") + std::string("\"a") + std::to_string(i) + "\": " + random_json(rng, 1);
  }
  return s + "}";
}

std::string random_text(std::mt19937& rng) {
  static const char* kPieces[] = {"Hello",       " ",         "\n",      "<tool", "_call",
                                  "[TOOL",       "<function", "functoo", "{",     "}",
                                  "the weather", "<|python",  "</think", "<thi"};
  std::string s;
  for (int i = 0, n = static_cast<int>(rng() % 6); i < n; ++i) s += kPieces[rng() % 14];
  return s;
}

std::string random_output(std::mt19937& rng, ToolCallFormat f, ReasoningFormat r) {
  std::string s;
  if (r == ReasoningFormat::think && rng() % 2)
    s += "<think>\n" + random_text(rng) + "\n</think>\n\n";
  if (r == ReasoningFormat::think_open) s += random_text(rng) + "</think>\n\n";
  const int n_calls = static_cast<int>(rng() % 3);
  auto name = [&] { return std::string(rng() % 2 ? "get_weather" : "f.g-h_1"); };
  switch (f) {
    case ToolCallFormat::hermes:
      s += random_text(rng);
      for (int i = 0; i < n_calls; ++i) {
        s += "<tool_call>\n{\"name\": \"" + name() + "\", \"arguments\": " + random_arguments(rng) +
             "}\n</tool_call>\n";
      }
      break;
    case ToolCallFormat::mistral:
    case ToolCallFormat::firefunction_v2:
      s += random_text(rng);
      if (n_calls > 0) {
        s += f == ToolCallFormat::mistral ? "[TOOL_CALLS][" : "functools[";
        for (int i = 0; i < n_calls; ++i) {
          s += (i ? ", " : "") + std::string("{\"name\": \"") + name() +
               "\", \"arguments\": " + random_arguments(rng) + "}";
        }
        s += "]";
      }
      break;
    case ToolCallFormat::functionary_v3_1:
      s += random_text(rng);
      for (int i = 0; i < n_calls; ++i)
        s += "<function=" + name() + ">" + random_arguments(rng) + "</function>";
      break;
    case ToolCallFormat::llama3_json:
      if (n_calls == 0) return s + "Text " + random_text(rng);
      for (int i = 0; i < n_calls; ++i) {
        s += (i ? "; " : "") + std::string("{\"name\": \"") + name() +
             "\", \"parameters\": " + random_arguments(rng) + "}";
      }
      break;
    case ToolCallFormat::generic:
      if (n_calls == 0) return s + "{\"content\": \"hi <tool_call>\"}";
      s += "{\"tool_calls\": [";
      for (int i = 0; i < n_calls; ++i) {
        s += (i ? ", " : "") + std::string("{\"name\": \"") + name() +
             "\", \"arguments\": " + random_arguments(rng) + "}";
      }
      s += "]}";
      break;
  }
  return s;
}

TEST(ToolCallStreamParser, RandomOutputsAndMutations) {
  std::mt19937 rng(99);
  const ToolCallFormat formats[] = {
      ToolCallFormat::generic, ToolCallFormat::hermes,           ToolCallFormat::llama3_json,
      ToolCallFormat::mistral, ToolCallFormat::functionary_v3_1, ToolCallFormat::firefunction_v2};
  const ReasoningFormat reasonings[] = {ReasoningFormat::none, ReasoningFormat::think,
                                        ReasoningFormat::think_open};
  std::size_t n_calls = 0, n_reasoning = 0;
  for (int n = 0; n < 600; ++n) {
    const ToolCallFormat f = formats[n % 6];
    const ReasoningFormat r = reasonings[(n / 6) % 3];
    ParseOptions o;
    o.reasoning = r;
    std::string text = random_output(rng, f, r);
    const bool mutate = n % 2 == 1;
    if (mutate) {
      for (int k = 0, m = 1 + static_cast<int>(rng() % 3); k < m && !text.empty(); ++k) {
        const std::size_t at = rng() % text.size();
        if (rng() % 2) {
          text.erase(at, 1 + rng() % 3);
        } else {
          text.insert(at, 1, "{}[]\",:<>/ a"[rng() % 12]);
        }
      }
    }
    ParsedOutput whole;
    ASSERT_NO_THROW(whole = parse_tool_calls(text, f, o)) << text;
    ToolCallStreamParser stream(f, o);
    std::vector<StreamDelta> deltas;
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t step = 1 + rng() % 7;
      ASSERT_NO_THROW(deltas.push_back(stream.push(std::string_view(text).substr(i, step))))
          << text;
      i += step;
    }
    ASSERT_NO_THROW(deltas.push_back(stream.finish())) << text;
    if (mutate) continue;
    const ParsedOutput got = reassemble(deltas);
    ASSERT_EQ(got.content, whole.content) << text;
    ASSERT_EQ(got.reasoning_content, whole.reasoning_content) << text;
    ASSERT_EQ(got.tool_calls, whole.tool_calls) << text;
    n_calls += whole.tool_calls.size();
    n_reasoning += whole.reasoning_content.empty() ? 0 : 1;
  }
  // The generator exercises what it claims to: many calls and reasoning sections parsed.
  EXPECT_GT(n_calls, 200u);
  EXPECT_GT(n_reasoning, 30u);
}

}  // namespace
}  // namespace pie
