// build_tool_grammar, normalize_tool_parameters, format detection and the reasoning wrapper:
// grammars are checked by what they accept and reject through pse::Matcher.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "pie/error.h"
#include "pie/reasoning.h"
#include "pie/tool_calls.h"
#include "shared_data.h"
#include "tools_test_util.h"

namespace pie {
namespace {

using Json = nlohmann::ordered_json;
using testing::accepts;
using testing::compile;

Json weather_tools() {
  return Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                     "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
      "properties": {"zone": {"type": "integer"}}, "required": ["zone"], "additionalProperties": false}}}
  ])");
}

pse::CompiledGrammar tool_grammar(ToolChoice choice, bool parallel, ToolCallFormat format,
                                  const Json& tools = weather_tools()) {
  ToolGrammar tg = build_tool_grammar(tools, choice, parallel, format);
  EXPECT_TRUE(tg.grammar.has_value());
  return compile(*tg.grammar);
}

ToolChoice required() { return {ToolChoice::Mode::required, ""}; }
ToolChoice automatic() { return {ToolChoice::Mode::automatic, ""}; }

const std::string kWeather = R"({"name":"get_weather","arguments":{"city":"Paris"}})";
const std::string kTime = R"({"name":"get_time","arguments":{"zone":2}})";

std::string hermes(const std::string& call) { return "<tool_call>\n" + call + "\n</tool_call>"; }

TEST(ToolGrammar, HermesRequiredAcceptsOneValidCall) {
  auto g = tool_grammar(required(), false, ToolCallFormat::hermes);
  EXPECT_TRUE(accepts(g, hermes(kWeather)));
  EXPECT_TRUE(accepts(
      g, hermes(R"({"name":"get_weather","arguments":{"city":"Paris","unit":"f"}})")));
  EXPECT_TRUE(accepts(g, hermes(kTime)));
}

// Compact in every format: the wrapper and the arguments take no whitespace between JSON tokens (the
// format's own newlines around hermes blocks are fixed text), so a model cannot spend its tokens on
// blanks.
TEST(ToolGrammar, CompactInEveryFormat) {
  auto hermes_g = tool_grammar(required(), true, ToolCallFormat::hermes);
  EXPECT_FALSE(accepts(hermes_g, "<tool_call>" + kTime + "</tool_call>"));
  EXPECT_FALSE(accepts(hermes_g, "<tool_call>\n" + kTime + "\n\n</tool_call>"));
  EXPECT_FALSE(accepts(hermes_g, hermes(R"({"name": "get_time","arguments":{"zone":2}})")));
  EXPECT_FALSE(accepts(hermes_g, hermes(R"({"name":"get_time","arguments":{"zone": 2}})")));
  EXPECT_FALSE(accepts(hermes_g, hermes(kTime) + "\n\n" + hermes(kTime)));
  auto generic = tool_grammar(automatic(), true, ToolCallFormat::generic);
  EXPECT_FALSE(accepts(generic, R"({ "tool_calls":[)" + kTime + "]}"));
  EXPECT_FALSE(accepts(generic, R"({"tool_calls":[)" + kTime + ", " + kTime + "]}"));
  EXPECT_FALSE(accepts(generic, R"({"tool_calls":[)" + kTime + "]}\n"));
  EXPECT_FALSE(accepts(generic, R"({"content": "hi"})"));
  EXPECT_FALSE(accepts(generic, R"( {"content":"hi"})"));
  auto mistral = tool_grammar(required(), true, ToolCallFormat::mistral);
  EXPECT_FALSE(accepts(mistral, "[TOOL_CALLS][ " + kTime + "]"));
  const std::string llama_call = R"({"name":"get_time","parameters":{"zone":2}})";
  auto llama = tool_grammar(required(), true, ToolCallFormat::llama3_json);
  EXPECT_TRUE(accepts(llama, llama_call + ";" + llama_call));
  EXPECT_FALSE(accepts(llama, llama_call + "; " + llama_call));
  const std::string function_call = R"(<function=get_time>{"zone":2}</function>)";
  auto functionary = tool_grammar(required(), true, ToolCallFormat::functionary_v3_1);
  EXPECT_TRUE(accepts(functionary, function_call + function_call));
  EXPECT_FALSE(accepts(functionary, function_call + " " + function_call));
}

// format_tool_calls writes calls as the grammar lays them out, in every format: what a prompt shows
// the model is what it may write.
TEST(ToolGrammar, FormattedCallsFitTheGrammar) {
  const std::vector<ToolCall> calls = {{"", "get_weather", R"({"city":"Paris","unit":"c"})"},
                                       {"", "get_time", R"({"zone":2})"}};
  const std::vector<ToolCall> bad = {{"", "get_weather", R"({"city":3})"}};
  for (ToolCallFormat format : {ToolCallFormat::generic, ToolCallFormat::hermes, ToolCallFormat::llama3_json,
                                ToolCallFormat::mistral, ToolCallFormat::functionary_v3_1,
                                ToolCallFormat::firefunction_v2}) {
    auto g = tool_grammar(required(), true, format);
    EXPECT_TRUE(accepts(g, format_tool_calls(format, calls))) << format_tool_calls(format, calls);
    EXPECT_TRUE(accepts(g, format_tool_calls(format, {calls[1]}))) << tool_call_format_name(format);
    EXPECT_FALSE(accepts(g, format_tool_calls(format, bad))) << tool_call_format_name(format);
    const ParsedOutput back = parse_tool_calls(format_tool_calls(format, calls), format);
    ASSERT_EQ(back.tool_calls.size(), 2u) << tool_call_format_name(format);
    EXPECT_EQ(back.tool_calls[0].arguments, calls[0].arguments);
    EXPECT_EQ(back.tool_calls[1].name, "get_time");
    EXPECT_EQ(back.content, "");
  }
}

// A flexible layout brings bounded whitespace back, in the wrapper and in the arguments.
TEST(ToolGrammar, FlexibleLayoutAllowsBoundedWhitespace) {
  ToolGrammarOptions options;
  options.schema.layout = pse::JsonLayout::kFlexible;
  options.schema.max_whitespace_run = 2;
  auto g = compile(
      *build_tool_grammar(weather_tools(), required(), true, ToolCallFormat::generic, options).grammar);
  EXPECT_TRUE(accepts(g, R"({"tool_calls": [{"name": "get_time", "arguments": {"zone": 2}}]})"));
  EXPECT_TRUE(accepts(g, R"({"tool_calls":[)" + kTime + "]}"));
  EXPECT_FALSE(accepts(g, R"({"tool_calls":   [)" + kTime + "]}"));  // a run of 3
}

TEST(ToolGrammar, HermesRequiredRejectsInvalidCalls) {
  auto g = tool_grammar(required(), false, ToolCallFormat::hermes);
  EXPECT_FALSE(accepts(
      g, hermes(R"({"name":"get_wether","arguments":{"city":"Paris"}})")));  // wrong name
  EXPECT_FALSE(accepts(
      g, hermes(R"({"name":"get_weather","arguments":{"unit":"c"}})")));  // missing city
  EXPECT_FALSE(
      accepts(g, hermes(R"({"name":"get_weather","arguments":{"city":3}})")));  // wrong type
  EXPECT_FALSE(
      accepts(g, hermes(R"({"name":"get_time","arguments":{"zone":2,"x":1}})")));  // closed
  EXPECT_FALSE(accepts(g, hermes(kWeather) + "\nDone."));             // text after the call
  EXPECT_FALSE(accepts(g, "Sure. " + hermes(kWeather)));              // text before it
  EXPECT_FALSE(accepts(g, hermes(kWeather) + "\n" + hermes(kTime)));  // two calls, parallel off
  EXPECT_FALSE(accepts(g, ""));
}

TEST(ToolGrammar, HermesParallelAcceptsSeveralCalls) {
  auto g = tool_grammar(required(), true, ToolCallFormat::hermes);
  EXPECT_TRUE(accepts(g, hermes(kWeather)));
  EXPECT_TRUE(accepts(g, hermes(kWeather) + "\n" + hermes(kTime) + "\n" + hermes(kWeather)));
  EXPECT_FALSE(accepts(g, hermes(kWeather) + "\nand\n" + hermes(kTime)));
}

TEST(ToolGrammar, ParallelCallsAreBounded) {
  ToolGrammarOptions options;
  options.max_parallel_calls = 2;
  auto tg = build_tool_grammar(weather_tools(), required(), true, ToolCallFormat::hermes, options);
  auto g = compile(*tg.grammar);
  EXPECT_TRUE(accepts(g, hermes(kWeather) + "\n" + hermes(kTime)));
  EXPECT_FALSE(accepts(g, hermes(kWeather) + "\n" + hermes(kTime) + "\n" + hermes(kTime)));
  options.max_parallel_calls = 0;
  EXPECT_THROW(
      build_tool_grammar(weather_tools(), required(), true, ToolCallFormat::hermes, options),
      RequestError);
}

TEST(ToolGrammar, NamedForcesThatFunction) {
  auto g = tool_grammar({ToolChoice::Mode::named, "get_time"}, false, ToolCallFormat::hermes);
  EXPECT_TRUE(accepts(g, hermes(kTime)));
  EXPECT_FALSE(accepts(g, hermes(kWeather)));
}

TEST(ToolGrammar, AutoAllowsTextThenConstrainedCalls) {
  auto g = tool_grammar(automatic(), false, ToolCallFormat::hermes);
  EXPECT_TRUE(accepts(g, "The weather is fine <tool and </tool_call> are just text."));
  EXPECT_TRUE(accepts(g, ""));
  EXPECT_TRUE(accepts(g, "Let me check.\n" + hermes(kWeather)));
  EXPECT_TRUE(accepts(g, hermes(kWeather)));
  EXPECT_FALSE(accepts(g, "Let me check.\n<tool_call>\n{\"name\": \"nope\"}</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>just text</tool_call>"));
  EXPECT_FALSE(accepts(g, hermes(kWeather) + "\n" + hermes(kTime)));  // parallel off
}

TEST(ToolGrammar, NoneHasNoGrammarButValidatesTools) {
  ToolGrammar tg = build_tool_grammar(weather_tools(), {ToolChoice::Mode::none, ""}, true,
                                      ToolCallFormat::hermes);
  EXPECT_FALSE(tg.grammar.has_value());
  EXPECT_THROW(build_tool_grammar(Json::object(), {ToolChoice::Mode::none, ""}, true,
                                  ToolCallFormat::hermes),
               RequestError);
}

TEST(ToolGrammar, MistralFormat) {
  auto g = tool_grammar(required(), true, ToolCallFormat::mistral);
  EXPECT_TRUE(accepts(g, "[TOOL_CALLS][" + kWeather + "]"));
  EXPECT_TRUE(accepts(g, "[TOOL_CALLS][" + kWeather + "," + kTime + "]"));
  EXPECT_TRUE(accepts(
      g, R"([TOOL_CALLS][{"name":"get_time","arguments":{"zone":1},"id":"a1B2c3D4e"}])"));
  EXPECT_FALSE(
      accepts(g, R"([TOOL_CALLS][{"name":"get_time","arguments":{"zone":1},"id":"short"}])"));
  EXPECT_FALSE(accepts(g, "[TOOL_CALLS][]"));
  auto single = tool_grammar(required(), false, ToolCallFormat::mistral);
  EXPECT_FALSE(accepts(single, "[TOOL_CALLS][" + kWeather + "," + kTime + "]"));
  auto autog = tool_grammar(automatic(), true, ToolCallFormat::mistral);
  EXPECT_TRUE(accepts(autog, "Hello [TOOL_ there"));
  EXPECT_TRUE(accepts(autog, "Sure.[TOOL_CALLS][" + kTime + "]"));
  EXPECT_FALSE(accepts(autog, "Sure.[TOOL_CALLS] free text"));
}

TEST(ToolGrammar, Llama3JsonFormat) {
  const std::string call = R"({"name":"get_weather","parameters":{"city":"Rome"}})";
  auto g = tool_grammar(required(), true, ToolCallFormat::llama3_json);
  EXPECT_TRUE(accepts(g, call));
  EXPECT_TRUE(accepts(g, "<|python_tag|>" + call));
  EXPECT_TRUE(accepts(g, call + ";" + call));
  EXPECT_FALSE(accepts(g, kWeather));  // "arguments" is not Llama's key
  auto autog = tool_grammar(automatic(), false, ToolCallFormat::llama3_json);
  EXPECT_TRUE(accepts(autog, "It is sunny in Rome."));
  EXPECT_TRUE(accepts(autog, "<b>bold</b> claims"));
  EXPECT_TRUE(accepts(autog, call));
  EXPECT_FALSE(accepts(autog, "{\"name\":\"get_weather\"}"));  // starts like a call: must be one
  EXPECT_FALSE(accepts(autog, "<|python_tag|>print(1)"));
  EXPECT_FALSE(accepts(autog, call + ";" + call));  // parallel off
}

TEST(ToolGrammar, FunctionaryAndFirefunctionFormats) {
  auto f = tool_grammar(required(), true, ToolCallFormat::functionary_v3_1);
  EXPECT_TRUE(accepts(f, R"(<function=get_weather>{"city":"Oslo"}</function>)"));
  EXPECT_TRUE(accepts(
      f,
      R"(<function=get_weather>{"city":"Oslo"}</function><function=get_time>{"zone":0}</function>)"));
  EXPECT_FALSE(accepts(f, R"(<function=get_weather>{"zone":0}</function>)"));
  auto ff = tool_grammar(required(), false, ToolCallFormat::firefunction_v2);
  EXPECT_TRUE(accepts(ff, "functools[" + kWeather + "]"));
  EXPECT_FALSE(accepts(ff, "functools[" + kWeather + "," + kTime + "]"));
}

TEST(ToolGrammar, GenericFormat) {
  auto g = tool_grammar(automatic(), true, ToolCallFormat::generic);
  EXPECT_TRUE(accepts(g, R"({"tool_calls":[)" + kWeather + "," + kTime + "]}"));
  EXPECT_TRUE(accepts(g, R"({"content":"It is \"sunny\"."})"));
  EXPECT_FALSE(accepts(g, "plain text"));
  auto req = tool_grammar(required(), false, ToolCallFormat::generic);
  EXPECT_FALSE(accepts(req, R"({"content":"hi"})"));
  EXPECT_TRUE(accepts(req, R"({"tool_calls":[)" + kTime + "]}"));
}

TEST(ToolGrammar, SpecialTokensNameTheMarkers) {
  EXPECT_EQ(
      build_tool_grammar(weather_tools(), required(), true, ToolCallFormat::hermes).special_tokens,
      (std::vector<std::string>{"<tool_call>", "</tool_call>"}));
  EXPECT_EQ(
      build_tool_grammar(weather_tools(), required(), true, ToolCallFormat::mistral).special_tokens,
      (std::vector<std::string>{"[TOOL_CALLS]"}));
  EXPECT_EQ(build_tool_grammar(weather_tools(), required(), true, ToolCallFormat::llama3_json)
                .special_tokens,
            (std::vector<std::string>{"<|python_tag|>"}));
}

TEST(ToolGrammar, ToolsWithoutParametersTakeAnObject) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "ping"}},
                                     {"type": "retrieval"}])");
  auto g = tool_grammar(required(), false, ToolCallFormat::hermes, tools);
  EXPECT_TRUE(accepts(g, hermes(R"({"name":"ping","arguments":{}})")));
  EXPECT_TRUE(accepts(g, hermes(R"({"name":"ping","arguments":{"any":[1]}})")));
  EXPECT_FALSE(accepts(g, hermes(R"({"name":"ping","arguments":[]})")));
}

TEST(ToolGrammar, BadToolsThrowRequestErrors) {
  auto param_of = [](const Json& tools, ToolChoice choice = required()) {
    try {
      build_tool_grammar(tools, choice, false, ToolCallFormat::hermes);
    } catch (const RequestError& e) {
      return e.param();
    }
    return std::string("no error");
  };
  EXPECT_EQ(param_of(Json::object()), "tools");
  EXPECT_EQ(param_of(Json::array()), "tools");
  EXPECT_EQ(param_of(Json::parse(R"([1])")), "tools");
  EXPECT_EQ(param_of(Json::parse(R"([{"type": "function"}])")), "tools");
  EXPECT_EQ(param_of(Json::parse(R"([{"type": "function", "function": {"name": ""}}])")), "tools");
  EXPECT_EQ(param_of(Json::parse(R"([{"type": "function", "function": {"name": "a"}},
                                     {"type": "function", "function": {"name": "a"}}])")),
            "tools");
  EXPECT_EQ(param_of(Json::parse(
                R"([{"type": "function", "function": {"name": "a", "parameters": 3}}])")),
            "tools[0].function.parameters");
  EXPECT_EQ(param_of(Json::parse(R"J([{"type": "function", "function": {"name": "a", "parameters":
              {"type": "object", "properties": {"s": {"type": "string", "pattern": "(?=x)"}}}}}])J")),
            "tools[0].function.parameters");
  EXPECT_EQ(param_of(Json::parse(R"([{"type": "function", "function": {"name": "a", "parameters":
              {"type": "blob"}}}])")),
            "tools[0].function.parameters");
  EXPECT_EQ(param_of(weather_tools(), {ToolChoice::Mode::named, "absent"}), "tool_choice");
}

TEST(ToolChoiceTest, FromJson) {
  EXPECT_EQ(ToolChoice::from_json(nullptr).mode, ToolChoice::Mode::automatic);
  EXPECT_EQ(ToolChoice::from_json("auto").mode, ToolChoice::Mode::automatic);
  EXPECT_EQ(ToolChoice::from_json("none").mode, ToolChoice::Mode::none);
  EXPECT_EQ(ToolChoice::from_json("required").mode, ToolChoice::Mode::required);
  const ToolChoice named =
      ToolChoice::from_json(Json::parse(R"({"type": "function", "function": {"name": "f"}})"));
  EXPECT_EQ(named.mode, ToolChoice::Mode::named);
  EXPECT_EQ(named.name, "f");
  EXPECT_THROW(ToolChoice::from_json("always"), RequestError);
  EXPECT_THROW(ToolChoice::from_json(3), RequestError);
  EXPECT_THROW(ToolChoice::from_json(Json::parse(R"({"type": "function"})")), RequestError);
  EXPECT_THROW(
      ToolChoice::from_json(Json::parse(R"({"type": "function", "function": {"name": 1}})")),
      RequestError);
}

TEST(NormalizeToolParameters, RewritesDatasetSpellings) {
  const Json in = Json::parse(R"({"type": "dict", "properties": {
      "a": {"type": "float"}, "b": {"type": "tuple", "items": {"type": "float"}},
      "c": {"type": "any", "description": "x"}, "d": {"type": "dict", "optional": true,
        "properties": {"e": {"type": ["integer", "any"]}}},
      "f": {"type": ["float", "null"]}, "g": {"anyOf": [{"type": "bool"}, {"type": "str"}]}},
      "required": ["a"]})");
  const Json out = normalize_tool_parameters(in);
  EXPECT_EQ(out["type"], "object");
  EXPECT_EQ(out["properties"]["a"]["type"], "number");
  EXPECT_EQ(out["properties"]["b"]["type"], "array");
  EXPECT_EQ(out["properties"]["b"]["items"]["type"], "number");
  EXPECT_FALSE(out["properties"]["c"].contains("type"));
  EXPECT_FALSE(out["properties"]["d"].contains("optional"));
  EXPECT_EQ(out["properties"]["d"]["type"], "object");
  EXPECT_FALSE(out["properties"]["d"]["properties"]["e"].contains("type"));
  EXPECT_EQ(out["properties"]["f"]["type"], Json::parse(R"(["number", "null"])"));
  EXPECT_EQ(out["properties"]["g"]["anyOf"][0]["type"], "boolean");
  EXPECT_EQ(out["properties"]["g"]["anyOf"][1]["type"], "string");
  EXPECT_EQ(normalize_tool_parameters(nullptr), Json::parse(R"({"type": "object"})"));
  EXPECT_EQ(normalize_tool_parameters(Json::object()), Json::parse(R"({"type": "object"})"));
  EXPECT_THROW(normalize_tool_parameters(
                   Json::parse(R"({"type": "dict", "properties": {"x": {"type": "blob"}}})")),
               RequestError);
}

TEST(CloseObjectSchemas, ClosesPlainObjectsOnly) {
  const Json in = Json::parse(R"({"type": "object", "properties": {
      "a": {"type": "object", "properties": {"x": {"type": "integer"}}},
      "b": {"type": "array", "items": {"type": "object", "properties": {"y": {}}}},
      "c": {"type": "object"},
      "d": {"type": "object", "properties": {"z": {}}, "additionalProperties": {"type": "string"}},
      "e": {"allOf": [{"properties": {"p": {}}}, {"properties": {"q": {}}}]},
      "f": {"type": "object", "properties": {"r": {}}, "anyOf": [{"required": ["r"]}]}}})");
  const Json out = close_object_schemas(in);
  EXPECT_EQ(out["additionalProperties"], false);
  EXPECT_EQ(out["properties"]["a"]["additionalProperties"], false);
  EXPECT_EQ(out["properties"]["b"]["items"]["additionalProperties"], false);
  EXPECT_FALSE(
      out["properties"]["c"].contains("additionalProperties"));  // a free-form object stays free
  EXPECT_EQ(out["properties"]["d"]["additionalProperties"], Json::parse(R"({"type": "string"})"));
  EXPECT_EQ(out["properties"]["e"], in["properties"]["e"]);
  EXPECT_EQ(out["properties"]["f"], in["properties"]["f"]);
}

TEST(ToolGrammar, ClosedObjectsOption) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"a": {"type": "integer"}}}}}])");
  const std::string extra = hermes(R"({"name":"f","arguments":{"a":1,"b":2}})");
  EXPECT_FALSE(accepts(tool_grammar(required(), false, ToolCallFormat::hermes, tools), extra));
  ToolGrammarOptions open;
  open.closed_objects = false;
  EXPECT_TRUE(accepts(
      compile(*build_tool_grammar(tools, required(), false, ToolCallFormat::hermes, open).grammar),
      extra));
}

TEST(FormatNames, RoundTripAndUnknown) {
  for (ToolCallFormat f : {ToolCallFormat::generic, ToolCallFormat::hermes,
                           ToolCallFormat::llama3_json, ToolCallFormat::mistral,
                           ToolCallFormat::functionary_v3_1, ToolCallFormat::firefunction_v2}) {
    EXPECT_EQ(tool_call_format_from_name(tool_call_format_name(f)), f);
  }
  EXPECT_THROW(tool_call_format_from_name("xml"), RequestError);
  for (ReasoningFormat f :
       {ReasoningFormat::none, ReasoningFormat::think, ReasoningFormat::think_open}) {
    EXPECT_EQ(reasoning_format_from_name(reasoning_format_name(f)), f);
  }
  EXPECT_THROW(reasoning_format_from_name("thinking"), RequestError);
}

std::string read_template(const std::string& name) {
  std::ifstream in(orchard::testing::shared_data("chat-templates/" + name + ".jinja"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DetectFormat, SharedChatTemplates) {
  ORCHARD_REQUIRE_SHARED_DATA("chat-templates");
  const std::map<std::string, std::pair<ToolCallFormat, ReasoningFormat>> expected = {
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
       {ToolCallFormat::hermes, ReasoningFormat::none}},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
       {ToolCallFormat::hermes, ReasoningFormat::none}},
      {"Qwen-Qwen2.5-7B-Instruct", {ToolCallFormat::hermes, ReasoningFormat::none}},
      {"Qwen-Qwen3-0.6B", {ToolCallFormat::hermes, ReasoningFormat::think}},
      {"Qwen-QwQ-32B", {ToolCallFormat::hermes, ReasoningFormat::think_open}},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
       {ToolCallFormat::generic, ReasoningFormat::think_open}},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
       {ToolCallFormat::generic, ReasoningFormat::think_open}},
      {"meta-llama-Llama-3.1-8B-Instruct", {ToolCallFormat::llama3_json, ReasoningFormat::none}},
      {"meta-llama-Llama-3.2-3B-Instruct", {ToolCallFormat::llama3_json, ReasoningFormat::none}},
      {"meta-llama-Llama-3.3-70B-Instruct", {ToolCallFormat::llama3_json, ReasoningFormat::none}},
      {"mistralai-Mistral-Nemo-Instruct-2407", {ToolCallFormat::mistral, ReasoningFormat::none}},
      {"meetkai-functionary-medium-v3.1",
       {ToolCallFormat::functionary_v3_1, ReasoningFormat::none}},
      {"fireworks-ai-llama-3-firefunction-v2",
       {ToolCallFormat::firefunction_v2, ReasoningFormat::none}},
      {"google-gemma-2-2b-it", {ToolCallFormat::generic, ReasoningFormat::none}},
      {"microsoft-Phi-3.5-mini-instruct", {ToolCallFormat::generic, ReasoningFormat::none}},
  };
  for (const auto& [name, formats] : expected) {
    const std::string source = read_template(name);
    ASSERT_FALSE(source.empty()) << name;
    EXPECT_EQ(tool_call_format_name(detect_tool_call_format(source)),
              std::string(tool_call_format_name(formats.first)))
        << name;
    EXPECT_EQ(reasoning_format_name(detect_reasoning_format(source)),
              std::string(reasoning_format_name(formats.second)))
        << name;
  }
}

TEST(Reasoning, WrapThinkIsOptional) {
  auto tg = build_tool_grammar(weather_tools(), required(), false, ToolCallFormat::hermes);
  auto g = compile(wrap_with_reasoning(*tg.grammar, ReasoningFormat::think));
  EXPECT_TRUE(
      accepts(g, "<think>\nThe user wants <b>weather</b>.\n</think>\n\n" + hermes(kWeather)));
  EXPECT_TRUE(accepts(g, hermes(kWeather)));
  EXPECT_TRUE(accepts(g, "<think></think>" + hermes(kWeather)));
  EXPECT_FALSE(
      accepts(g, "<think>\nhmm\n</think>\n\nIt is sunny."));      // the answer stays constrained
  EXPECT_FALSE(accepts(g, "<think>\nhmm\n" + hermes(kWeather)));  // never closed
  EXPECT_FALSE(accepts(g, "<think>a</think> </think>" + hermes(kWeather)));
}

TEST(Reasoning, WrapThinkOpenRequiresTheClose) {
  auto tg = build_tool_grammar(weather_tools(), required(), false, ToolCallFormat::hermes);
  auto g = compile(wrap_with_reasoning(*tg.grammar, ReasoningFormat::think_open));
  EXPECT_TRUE(accepts(g, "Okay, weather.</think>\n\n" + hermes(kWeather)));
  EXPECT_TRUE(accepts(g, "</think>" + hermes(kWeather)));
  EXPECT_FALSE(accepts(g, hermes(kWeather)));
  EXPECT_FALSE(accepts(g, "<think>x" + hermes(kWeather)));
  EXPECT_EQ(wrap_with_reasoning(*tg.grammar, ReasoningFormat::none).hash(), tg.grammar->hash());
  EXPECT_THROW(wrap_with_reasoning(*tg.grammar, ReasoningFormat::think, {"", "</think>"}),
               pse::GrammarError);
  EXPECT_THROW(wrap_with_reasoning(pse::Grammar(), ReasoningFormat::think), pse::GrammarError);
}

// The "text without a marker" expression against a brute-force check, on random strings over a
// small alphabet (so near misses are frequent); both the one-expression and the KMP (recurring
// first character) constructions.
TEST(TextWithout, MatchesBruteForce) {
  for (const std::string marker : {"<ab>", "abab", "aab", "<|", "x"}) {
    ReasoningMarkers markers{"", marker};
    pse::Grammar answer;
    answer.set_root(answer.add_rule("root", answer.add_bytes("!")));
    // think_open: T marker "!" accepts exactly the T without the marker.
    auto g = compile(wrap_with_reasoning(answer, ReasoningFormat::think_open, markers));
    std::mt19937 rng(7);
    const std::string alphabet = "ab<>|x";
    for (int n = 0; n < 400; ++n) {
      std::string t;
      const int len = static_cast<int>(rng() % 9);
      for (int k = 0; k < len; ++k) t.push_back(alphabet[rng() % alphabet.size()]);
      const bool expected = t.find(marker) == std::string::npos;
      EXPECT_EQ(accepts(g, t + marker + "!"), expected) << "marker " << marker << " text " << t;
    }
  }
}

// A marker that is not UTF-8 (a truncated or overlong sequence) is a GrammarError naming the byte.
TEST(TextWithout, InvalidUtf8MarkerIsAnError) {
  pse::Grammar answer;
  answer.set_root(answer.add_rule("root", answer.add_bytes("!")));
  for (const std::string& marker : {std::string("ab\xC3"), std::string("\xC0\xAF"), std::string("a\xFF" "b")}) {
    try {
      (void)wrap_with_reasoning(answer, ReasoningFormat::think_open, ReasoningMarkers{"", marker});
      ADD_FAILURE() << "no error for an invalid marker";
    } catch (const pse::GrammarError& e) {
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace pie
