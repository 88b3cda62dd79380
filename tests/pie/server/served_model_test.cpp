// The served model: its names (the slug of the file's stem, aliases, "default"), the layout of JSON
// output, and the prompts it renders for tools (the system message of a template without tools).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "pie/engine.h"
#include "pse/compiler.h"
#include "pse/matcher.h"
#include "pse/vocabulary.h"
#include "server/served_model.h"
#include "server/tool_prompt.h"

namespace pie::server {
namespace {

// One token per byte, and an end-of-sequence token: what a grammar accepts, byte by byte.
std::shared_ptr<const pse::Vocabulary> byte_vocabulary() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.emplace_back("<eos>");
  const auto eos = static_cast<pse::TokenId>(tokens.size() - 1);
  return std::make_shared<const pse::Vocabulary>(std::move(tokens), std::vector<pse::TokenId>{eos},
                                                 std::vector<pse::TokenId>{eos});
}

// The default (random-weight) model under another path and template: naming and rendering only.
std::shared_ptr<Engine> engine_for(const std::filesystem::path& path, std::string chat_template = {},
                                   std::string name = "Some Model 1B") {
  auto model = std::make_shared<Model>(*random_model());
  model->path = path;
  model->name = std::move(name);
  model->chat_template = std::move(chat_template);
  EngineOptions options;
  options.n_threads = 1;
  options.max_running = 1;
  options.context_length = 256;
  return std::make_shared<Engine>(model, options);
}

TEST(ServedModelName, SlugKeepsNameCharactersOnly) {
  EXPECT_EQ(model_name_slug("Smollm2 135M 8k Lc100K Mix1 Ep2"), "Smollm2-135M-8k-Lc100K-Mix1-Ep2");
  EXPECT_EQ(model_name_slug("  a//b  c\t"), "a-b-c");
  EXPECT_EQ(model_name_slug("smollm2:135m-instruct-q4_1"), "smollm2:135m-instruct-q4_1");
  EXPECT_EQ(model_name_slug("Qwen2.5+x_y"), "Qwen2.5+x_y");
  EXPECT_EQ(model_name_slug("  "), "");
}

TEST(ServedModelName, FileStemThenMetadataName) {
  Model m;
  m.name = "Smollm2 135M 8k Lc100K Mix1 Ep2";
  m.path = "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  EXPECT_EQ(served_model_name(m), "SmolLM2-135M-Instruct.Q4_1");
  m.path = "/models/my model.bin";
  EXPECT_EQ(served_model_name(m), "my-model");
  m.path = std::filesystem::temp_directory_path() / "";  // a folder, written with its slash
  EXPECT_EQ(served_model_name(m), model_name_slug(std::filesystem::temp_directory_path().filename().string()));
  m.path.clear();
  EXPECT_EQ(served_model_name(m), "Smollm2-135M-8k-Lc100K-Mix1-Ep2");
  m.name.clear();
  EXPECT_EQ(served_model_name(m), "orchard");
}

TEST(ServedModelName, ServesItsNameAliasesTagsAndDefault) {
  ServedModel model(engine_for("/m/x.gguf"), "x", {.aliases = {"gpt-4o", "smol", "gpt-4o"}});
  EXPECT_EQ(model.names(), (std::vector<std::string>{"x", "gpt-4o", "smol"}));  // duplicates dropped
  for (const char* asked : {"", "default", "x", "x:latest", "gpt-4o", "smol:latest"}) {
    EXPECT_TRUE(model.serves(asked)) << asked;
  }
  for (const char* asked : {"X", "y", "x:7b", "default:latest", "smol ", ":latest"}) {
    EXPECT_FALSE(model.serves(asked)) << asked;
  }
}

TEST(ServedModelName, BadNamesAreErrors) {
  auto engine = engine_for("/m/x.gguf");
  EXPECT_THROW(ServedModel(engine, ""), Error);
  EXPECT_THROW(ServedModel(engine, "a b"), Error);
  EXPECT_THROW(ServedModel(engine, "x", {.aliases = {"tab\there"}}), Error);
  EXPECT_THROW(ServedModel(engine, "x", {.aliases = {""}}), Error);
}

// SmolLM2-135M-Instruct's template: ChatML, no tools section, a default system message.
constexpr const char* kSmolLM2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

ChatRequest chat_request(const std::string& body) { return parse_openai_chat(Json::parse(body)); }

constexpr const char* kWeatherTools = R"("tools": [{"type": "function", "function": {"name": "get_weather",
    "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}}}])";

TEST(ServedModelTools, SystemMessageDescribesToolsForATemplateWithout) {
  ServedModel model(engine_for("/m/smol.gguf", kSmolLM2Template), "smol");
  ASSERT_EQ(model.tool_format(), ToolCallFormat::generic);
  PreparedRequest p = prepare_chat(
      model, chat_request(std::string(R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], )") +
                          kWeatherTools + "}"));
  EXPECT_EQ(p.prompt_text,
            "<|im_start|>system\nYou can call these tools:\n"
            R"({"name":"get_weather","description":"Weather in a city","parameters":{"type":"object",)"
            R"("properties":{"city":{"type":"string"}},"required":["city"]}})"
            "\n\nTo call a tool, answer with "
            R"({"tool_calls":[{"name":"<tool name>","arguments":{<its arguments>}}]})"
            "\nOtherwise answer with {\"content\":\"<your answer>\"}<|im_end|>\n"
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(p.parse_tool_calls);
}

TEST(ServedModelTools, EarlierCallsAndResultsInTheFormatsSyntax) {
  ServedModel model(engine_for("/m/smol.gguf", kSmolLM2Template), "smol");
  const std::string body = std::string(R"({"tool_choice": "none", "messages": [
      {"role": "user", "content": "Weather in Paris and Oslo?"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
      {"role": "tool", "tool_call_id": "call_a", "content": "21 C"},
      {"role": "tool", "tool_call_id": "call_b", "content": "8 C"}], )") + kWeatherTools + "}";
  PreparedRequest p = prepare_chat(model, chat_request(body));
  // tool_choice none: no tools text (the template's own system message stays), no grammar.
  EXPECT_EQ(p.prompt_text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWeather in Paris and Oslo?<|im_end|>\n"
            "<|im_start|>assistant\n"
            R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}},)"
            R"({"name":"get_weather","arguments":{"city":"Oslo"}}]})"
            "<|im_end|>\n<|im_start|>user\n"
            R"({"tool_response":{"name":"get_weather","content":"21 C"}})"
            "\n"
            R"({"tool_response":{"name":"get_weather","content":"8 C"}})"
            "<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(p.request.grammar.has_value());
  EXPECT_FALSE(p.parse_tool_calls);
}

TEST(ServedModelTools, RequiredAndNamedChoicesSayWhatToCall) {
  ChatRequest r = chat_request(std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + kWeatherTools +
                               R"(, "tool_choice": "required"})");
  EXPECT_NE(tools_system_text(r, ToolCallFormat::generic)
                .find("\nAnswer with a tool call: {\"tool_calls\":[{\"name\":\"<tool name>\",\"arguments\":"),
            std::string::npos);
  r.tool_choice = {ToolChoice::Mode::named, "get_weather"};
  EXPECT_NE(tools_system_text(r, ToolCallFormat::hermes)
                .find("\nAnswer with a call of get_weather: <tool_call>\n{\"name\":\"get_weather\",\"arguments\":"
                      "{<its arguments>}}\n</tool_call>"),
            std::string::npos);
  r.tool_choice = {ToolChoice::Mode::automatic, ""};
  const std::string automatic = tools_system_text(r, ToolCallFormat::mistral);
  EXPECT_NE(automatic.find("To call a tool, answer with [TOOL_CALLS][{\"name\":"), std::string::npos);
  EXPECT_EQ(automatic.find("Otherwise"), std::string::npos);  // text is an answer in that format
}

// Call ids must not repeat across requests, whatever their sampling seed: the id seed is fresh each time.
TEST(ServedModelTools, CallIdSeedIsFreshPerRequest) {
  ServedModel model(engine_for("/m/smol.gguf", kSmolLM2Template), "smol");
  const ChatRequest r = chat_request(std::string(R"({"seed": 7, "messages": [{"role": "user", "content": "x"}], )") +
                                     kWeatherTools + "}");
  EXPECT_NE(prepare_chat(model, r).parse.id_seed, prepare_chat(model, r).parse.id_seed);
  EXPECT_EQ(prepare_chat(model, r).request.sampling.seed, 7u);
}

// A template that renders tools, calls and results itself gets the messages as they came.
TEST(ServedModelTools, TemplateWithToolsRendersThemItself) {
  const char* with_tools =
      "{% if tools %}TOOLS{{ tools | length }}\n{% endif %}{% for m in messages %}{% if m.role == 'tool' %}"
      "RESULT:{{ m.content }}\n{% elif m.tool_calls %}CALLS{{ m.tool_calls | length }}\n{% else %}"
      "{{ m.role }}:{{ m.content }}\n{% endif %}{% endfor %}";
  ServedModel model(engine_for("/m/t.gguf", with_tools), "t");
  EXPECT_TRUE(template_tool_support(with_tools).tools);
  PreparedRequest p = prepare_chat(model, chat_request(std::string(R"({"messages": [
      {"role": "user", "content": "hi"},
      {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c", "content": "9"}], )") + kWeatherTools + "}"));
  EXPECT_EQ(p.prompt_text, "TOOLS1\nuser:hi\nCALLS1\nRESULT:9\n");
}

// response_format JSON follows the server's layout: compact by default (no whitespace before, inside
// or after), or as --json-layout says.
TEST(ServedModelJson, LayoutOfResponseFormat) {
  auto engine = engine_for("/m/x.gguf");
  const std::string body = R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type":
      "json_schema", "json_schema": {"name": "p", "schema": {"type": "object", "properties": {"a": {"type":
      "integer"}, "b": {"type": "array", "items": {"type": "integer"}}}, "required": ["a", "b"]}}}})";
  auto grammar_of = [&](pse::JsonLayout layout) {
    ServedModel model(engine, "x", {.json_layout = layout});
    PreparedRequest p = prepare_chat(model, chat_request(body));
    EXPECT_TRUE(p.request.grammar.has_value());
    return pse::compile_grammar(*p.request.grammar, byte_vocabulary());
  };
  auto accepts = [](const pse::CompiledGrammar& g, std::string_view text) {
    pse::Matcher m(g);
    return m.accept_bytes(text) && m.can_stop();
  };
  const pse::CompiledGrammar compact = grammar_of(pse::JsonLayout::kCompact);
  EXPECT_TRUE(accepts(compact, R"({"a":1,"b":[2,3]})"));
  for (const char* spaced : {R"( {"a":1,"b":[]})", R"({"a": 1,"b":[]})", R"({"a":1,"b":[2, 3]})",
                             "{\"a\":1,\"b\":[]}\n", "{\"a\":1,\"b\":[]}  \n"}) {
    EXPECT_FALSE(accepts(compact, spaced)) << spaced;
  }
  const pse::CompiledGrammar indented = grammar_of(pse::JsonLayout::kIndented);
  EXPECT_TRUE(accepts(indented, "{\n  \"a\": 1,\n  \"b\": [\n    2\n  ]\n}"));
  EXPECT_FALSE(accepts(indented, R"({"a":1,"b":[2]})"));
  const pse::CompiledGrammar flexible = grammar_of(pse::JsonLayout::kFlexible);
  EXPECT_TRUE(accepts(flexible, R"({"a":1,"b":[2]})"));
  EXPECT_TRUE(accepts(flexible, "{ \"a\" : 1 ,\n\"b\":[2] }"));
}

}  // namespace
}  // namespace pie::server
