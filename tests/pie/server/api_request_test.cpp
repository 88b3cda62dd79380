// Request parsing and validation: every field's type and range, each error naming its field.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/api_request.h"

namespace pie::server {
namespace {

Json chat(Json extra = Json::object()) {
  Json body{{"model", "m"}, {"messages", Json::array({Json{{"role", "user"}, {"content", "hi"}}})}};
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

// The param an ApiError names, or "<no error>".
template <typename F>
std::string param_of(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    return e.param();
  }
  return "<no error>";
}

TEST(ParseBody, RejectsMalformedJsonAndNonObjects) {
  EXPECT_EQ(parse_body(R"({"a": 1})")["a"], 1);
  try {
    parse_body(R"({"a": )");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.code(), "invalid_json");
    EXPECT_NE(std::string(e.what()).find("byte"), std::string::npos);
  }
  EXPECT_THROW(parse_body("[1, 2]"), ApiError);
  EXPECT_THROW(parse_body(""), ApiError);
}

// A number past a double's range is a 400 naming its field (nlohmann's own error was a 500); one past a
// float's range too, for the fields that become floats; nesting past kMaxBodyNesting is refused while
// parsing, before anything walks the body.
TEST(ParseBody, OverflowAndNestingNameTheField) {
  auto field_of = [](const std::string& text) {
    try {
      parse_body(text);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << e.what();
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
      return e.param();
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(field_of(R"({"max_tokens": 1e400})"), "max_tokens");
  EXPECT_EQ(field_of(R"({"messages": [{"role": "user"}, {"n": -1e999}]})"), "messages[1].n");
  EXPECT_EQ(field_of(R"({"options": {"num_predict": 1E+400}})"), "options.num_predict");
  EXPECT_EQ(field_of(R"([1, 2, 3e400])"), "[2]");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"temperature", 1e300}})); }), "temperature");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"max_tokens", 1e30}})); }), "max_tokens");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"logit_bias", Json{{"7", -1e300}}}})); }), "logit_bias.7");
  const Json ollama_user = Json::array({Json{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(param_of([&] {
              parse_ollama_chat(Json{{"model", "m"}, {"messages", ollama_user}, {"options", Json{{"top_p", 1e200}}}});
            }),
            "options.top_p");
  const std::string deep = std::string(kMaxBodyNesting + 1, '[') + std::string(kMaxBodyNesting + 1, ']');
  try {
    parse_body(R"({"a": )" + deep + "}");
    ADD_FAILURE() << "nesting past the bound was parsed";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), "invalid_json");
    EXPECT_EQ(e.param(), "a[0][0][0][0][0][0][0][0][0][0][0]...");
  }
  const std::string ok = std::string(kMaxBodyNesting - 1, '[') + std::string(kMaxBodyNesting - 1, ']');
  EXPECT_NO_THROW(parse_body(R"({"a": )" + ok + "}"));
}

TEST(ParseOpenAIChat, ReadsSamplingFieldsAndMessages) {
  Json body = chat({{"temperature", 0.5}, {"top_p", 0.9}, {"top_k", 40}, {"min_p", 0.05}, {"seed", 7},
                    {"presence_penalty", 0.1}, {"frequency_penalty", -0.2}, {"n", 2}, {"max_tokens", 16},
                    {"stop", Json::array({"a", "bc"})}, {"logit_bias", Json{{"42", -100}}},
                    {"logprobs", true}, {"top_logprobs", 3}, {"stream", true},
                    {"stream_options", Json{{"include_usage", true}}}});
  ChatRequest r = parse_openai_chat(body);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.sampling.top_p, 0.9f);
  EXPECT_EQ(r.params.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.sampling.min_p, 0.05f);
  EXPECT_EQ(r.params.sampling.seed, 7u);
  EXPECT_FLOAT_EQ(r.params.sampling.frequency_penalty, -0.2f);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "bc"}));
  ASSERT_EQ(r.params.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.params.sampling.logit_bias[0].first, 42);
  EXPECT_TRUE(r.params.sampling.logprobs);
  EXPECT_EQ(r.params.sampling.top_logprobs, 3);
  EXPECT_TRUE(r.params.stream);
  EXPECT_TRUE(r.params.include_usage);
  EXPECT_EQ(r.messages[0]["role"], "user");
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::none);
}

TEST(ParseOpenAIChat, MaxCompletionTokensAndNegativeSeed) {
  ChatRequest r = parse_openai_chat(chat({{"max_completion_tokens", 5}, {"seed", -1}}));
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_EQ(r.params.sampling.seed, static_cast<std::uint64_t>(-1));
}

TEST(ParseOpenAIChat, ContentPartsJoinAndDeveloperIsSystem) {
  Json body = chat();
  body["messages"] = Json::array(
      {Json{{"role", "developer"}, {"content", "be brief"}},
       Json{{"role", "user"},
            {"content", Json::array({Json{{"type", "text"}, {"text", "a"}}, Json{{"type", "text"}, {"text", "b"}}})}},
       Json{{"role", "assistant"}, {"content", nullptr},
            {"tool_calls", Json::array({Json{{"id", "call_1"}, {"type", "function"},
                                             {"function", Json{{"name", "f"}, {"arguments", R"({"x": 1})"}}}}})}},
       Json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "42"}}});
  ChatRequest r = parse_openai_chat(body);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"]["x"], 1);  // parsed for templates
  EXPECT_EQ(r.messages[3]["tool_call_id"], "call_1");
}

TEST(ParseOpenAIChat, ErrorsNameTheField) {
  EXPECT_EQ(param_of([] { parse_openai_chat(Json{{"model", "m"}}); }), "messages");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"messages", Json::array()}})); }), "messages");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"temperature", "hot"}})); }), "temperature");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"n", 0}})); }), "n");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"n", 1.5}})); }), "n");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"max_tokens", 0}})); }), "max_tokens");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"stop", 3}})); }), "stop");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"stop", Json::array({""})}})); }), "stop");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"logit_bias", Json{{"abc", 1}}}})); }), "logit_bias");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"top_logprobs", 2}})); }), "top_logprobs");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"logprobs", true}, {"top_logprobs", 21}})); }), "top_logprobs");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"stream_options", Json{{"include_usage", true}}}})); }),
            "stream_options");
  Json bad_role = chat();
  bad_role["messages"][0]["role"] = "wizard";
  EXPECT_EQ(param_of([&] { parse_openai_chat(bad_role); }), "messages[0].role");
  Json image = chat();
  image["messages"][0]["content"] = Json::array({Json{{"type", "image_url"}, {"image_url", "x"}}});
  EXPECT_EQ(param_of([&] { parse_openai_chat(image); }), "messages[0].content[0].type");
  Json no_content = chat();
  no_content["messages"][0].erase("content");
  EXPECT_EQ(param_of([&] { parse_openai_chat(no_content); }), "messages[0].content");
}

TEST(ParseOpenAIChat, SpeculativeExtension) {
  EXPECT_FALSE(parse_openai_chat(chat()).params.speculative);
  const auto named = parse_openai_chat(chat({{"speculative", "ngram"}})).params.speculative;
  ASSERT_TRUE(named);
  EXPECT_EQ(named->mode, DraftMode::ngram);
  EXPECT_EQ(named->k, 0);
  const auto full = parse_openai_chat(chat({{"speculative", Json{{"mode", "ngram"}, {"k", 5}}}})).params.speculative;
  ASSERT_TRUE(full);
  EXPECT_EQ(full->k, 5);
  EXPECT_EQ(parse_openai_chat(chat({{"speculative", "off"}})).params.speculative->mode, DraftMode::off);
  EXPECT_EQ(parse_openai_chat(chat({{"speculative", "draft"}})).params.speculative->mode, DraftMode::draft);
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"speculative", "eagle"}})); }), "speculative");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"speculative", 3}})); }), "speculative");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"speculative", Json{{"k", 17}}}})); }), "speculative.k");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"speculative", Json{{"depth", 2}}}})); }), "speculative");
  const Json ollama{{"model", "m"},
                    {"messages", Json::array({Json{{"role", "user"}, {"content", "hi"}}})},
                    {"options", Json{{"speculative", "ngram"}}}};
  EXPECT_EQ(parse_ollama_chat(ollama).params.speculative->mode, DraftMode::ngram);
}

TEST(ParseOpenAIChat, ResponseFormats) {
  ChatRequest text = parse_openai_chat(chat({{"response_format", Json{{"type", "text"}}}}));
  EXPECT_EQ(text.params.constraint.kind, Constraint::Kind::none);
  ChatRequest object = parse_openai_chat(chat({{"response_format", Json{{"type", "json_object"}}}}));
  EXPECT_EQ(object.params.constraint.kind, Constraint::Kind::json_object);
  Json schema{{"type", "object"}, {"properties", Json{{"b", Json{{"type", "string"}}}, {"a", Json{{"type", "integer"}}}}}};
  ChatRequest with_schema = parse_openai_chat(chat(
      {{"response_format", Json{{"type", "json_schema"}, {"json_schema", Json{{"name", "x"}, {"strict", true}, {"schema", schema}}}}}}));
  EXPECT_EQ(with_schema.params.constraint.kind, Constraint::Kind::json_schema);
  EXPECT_EQ(with_schema.params.constraint.param, "response_format.json_schema.schema");
  // Property order is kept (the grammar writes properties in schema order).
  EXPECT_EQ(with_schema.params.constraint.schema["properties"].begin().key(), "b");

  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"response_format", Json{{"type", "yaml"}}}})); }),
            "response_format.type");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"response_format", Json{{"type", "json_schema"}}}})); }),
            "response_format.json_schema");
  EXPECT_EQ(param_of([] {
              parse_openai_chat(chat({{"response_format",
                                       Json{{"type", "json_schema"}, {"json_schema", Json{{"schema", Json::object()}}}}}}));
            }),
            "response_format.json_schema.name");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"grammar", "root ::= \"a\""}, {"regex", "a"}})); }), "regex");
  ChatRequest grammar = parse_openai_chat(chat({{"grammar", "root ::= \"a\""}}));
  EXPECT_EQ(grammar.params.constraint.kind, Constraint::Kind::grammar);
  ChatRequest regex = parse_openai_chat(chat({{"regex", "[0-9]+"}}));
  EXPECT_EQ(regex.params.constraint.kind, Constraint::Kind::regex);
  ChatRequest lark = parse_openai_chat(chat({{"lark", "start: \"a\""}}));
  EXPECT_EQ(lark.params.constraint.kind, Constraint::Kind::lark);
  EXPECT_EQ(lark.params.constraint.text, "start: \"a\"");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"lark", "start: \"a\""}, {"grammar", "root ::= \"a\""}})); }),
            "lark");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"lark", 5}})); }), "lark");
}

// The constraint fields alone (the compile route reads them so), and the token_detail extension.
TEST(ParseConstraint, FieldsAloneAndTokenDetail) {
  EXPECT_EQ(parse_constraint(Json::object()).kind, Constraint::Kind::none);
  Constraint regex = parse_constraint(Json{{"regex", "[0-9]+"}, {"messages", 5}});  // other fields are not read
  EXPECT_EQ(regex.kind, Constraint::Kind::regex);
  EXPECT_EQ(regex.param, "regex");
  EXPECT_EQ(parse_constraint(Json{{"response_format", Json{{"type", "json_object"}}}}).kind,
            Constraint::Kind::json_object);
  EXPECT_EQ(param_of([] { parse_constraint(Json{{"grammar", "root ::= \"a\""}, {"lark", "start: \"a\""}}); }), "lark");
  EXPECT_THROW(parse_constraint(Json::array()), ApiError);
  EXPECT_FALSE(parse_openai_chat(chat()).params.token_detail);
  EXPECT_TRUE(parse_openai_chat(chat({{"token_detail", true}})).params.token_detail);
  EXPECT_TRUE(parse_openai_completion(Json{{"prompt", "x"}, {"token_detail", true}}).params.token_detail);
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"token_detail", 1}})); }), "token_detail");
}

Json weather_tool(const char* name = "get_weather") {
  Json parameters{{"type", "object"}, {"properties", Json{{"city", Json{{"type", "string"}}}}}};
  Json function{{"name", name}, {"description", "d"}, {"parameters", parameters}};
  return Json{{"type", "function"}, {"function", function}};
}

TEST(ParseOpenAIChat, ToolsAndToolChoice) {
  ChatRequest automatic = parse_openai_chat(chat({{"tools", Json::array({weather_tool()})}}));
  EXPECT_EQ(automatic.tool_choice.mode, ToolChoice::Mode::automatic);
  ASSERT_EQ(automatic.tools.size(), 1u);
  EXPECT_EQ(automatic.tools_json[0]["function"]["name"], "get_weather");
  ChatRequest required = parse_openai_chat(chat({{"tools", Json::array({weather_tool()})}, {"tool_choice", "required"}}));
  EXPECT_EQ(required.tool_choice.mode, ToolChoice::Mode::required);
  ChatRequest named = parse_openai_chat(chat({{"tools", Json::array({weather_tool(), weather_tool("other")})},
                                              {"tool_choice", Json{{"type", "function"}, {"function", Json{{"name", "other"}}}}},
                                              {"parallel_tool_calls", false}}));
  EXPECT_EQ(named.tool_choice.mode, ToolChoice::Mode::named);
  EXPECT_EQ(named.tool_choice.name, "other");
  EXPECT_FALSE(named.parallel_tool_calls);

  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"tool_choice", "required"}})); }), "tool_choice");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"tools", Json::array({weather_tool()})}, {"tool_choice", "maybe"}})); }),
            "tool_choice");
  EXPECT_EQ(param_of([] {
              parse_openai_chat(chat({{"tools", Json::array({weather_tool()})},
                                      {"tool_choice", Json{{"type", "function"}, {"function", Json{{"name", "nope"}}}}}}));
            }),
            "tool_choice");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"tools", Json::array({weather_tool("bad name")})}})); }),
            "tools[0].function.name");
  EXPECT_EQ(param_of([] { parse_openai_chat(chat({{"tools", Json::array({weather_tool(), weather_tool()})}})); }),
            "tools[1].function.name");
  EXPECT_EQ(param_of([] {
              parse_openai_chat(chat({{"tools", Json::array({weather_tool()})}, {"response_format", Json{{"type", "json_object"}}}}));
            }),
            "response_format");
}

// A call's arguments are an object: parameters whose "type" excludes one are refused (a forced call
// could not be written), a schema without "type" gets "type": "object".
TEST(ParseOpenAIChat, ToolParametersDescribeObjects) {
  auto tool = [](Json parameters) {
    return Json::array({Json{{"type", "function"}, {"function", Json{{"name", "f"}, {"parameters", parameters}}}}});
  };
  EXPECT_EQ(param_of([&] { parse_openai_chat(chat({{"tools", tool(Json{{"type", "string"}})}}));
            }),
            "tools[0].function.parameters.type");
  EXPECT_EQ(param_of([&] {
              parse_openai_chat(chat({{"tools", tool(Json{{"type", Json::array({"string", "null"})}})}}));
            }),
            "tools[0].function.parameters.type");
  ChatRequest untyped = parse_openai_chat(chat({{"tools", tool(Json{{"properties", Json::object()}})}}));
  EXPECT_EQ(untyped.tools[0].parameters["type"], "object");
  EXPECT_EQ(untyped.tools_json[0]["function"]["parameters"]["type"], "object");
  ChatRequest either = parse_openai_chat(chat({{"tools", tool(Json{{"type", Json::array({"object", "null"})}})}}));
  EXPECT_EQ(either.tools[0].parameters["type"], "object");
  ChatRequest dict = parse_openai_chat(chat({{"tools", tool(Json{{"type", "dict"}})}}));  // BFCL's spelling
  EXPECT_EQ(dict.tools[0].parameters["type"], "dict");
}

TEST(ParseOpenAICompletion, PromptForms) {
  CompletionRequest text = parse_openai_completion(Json{{"model", "m"}, {"prompt", "hello"}, {"logprobs", 2}, {"echo", true}});
  EXPECT_EQ(text.prompt_text, "hello");
  EXPECT_TRUE(text.params.sampling.logprobs);
  EXPECT_EQ(text.params.sampling.top_logprobs, 2);
  EXPECT_TRUE(text.echo);
  CompletionRequest ids = parse_openai_completion(Json{{"prompt", Json::array({1, 2, 3})}});
  EXPECT_FALSE(ids.prompt_text);
  EXPECT_EQ(ids.prompt_tokens, (std::vector<std::int32_t>{1, 2, 3}));
  CompletionRequest nested = parse_openai_completion(Json{{"prompt", Json::array({Json::array({4, 5})})}});
  EXPECT_EQ(nested.prompt_tokens, (std::vector<std::int32_t>{4, 5}));
  CompletionRequest one = parse_openai_completion(Json{{"prompt", Json::array({"x"})}});
  EXPECT_EQ(one.prompt_text, "x");

  EXPECT_EQ(param_of([] { parse_openai_completion(Json{{"model", "m"}}); }), "prompt");
  EXPECT_EQ(param_of([] { parse_openai_completion(Json{{"prompt", Json::array({"a", "b"})}}); }), "prompt");
  EXPECT_EQ(param_of([] { parse_openai_completion(Json{{"prompt", Json::array({1, -2})}}); }), "prompt");
  EXPECT_EQ(param_of([] { parse_openai_completion(Json{{"prompt", 5}}); }), "prompt");
  EXPECT_EQ(param_of([] { parse_openai_completion(Json{{"prompt", "a"}, {"suffix", "b"}}); }), "suffix");
}

TEST(ParseOllama, ChatOptionsAndFormat) {
  Json body{{"model", "m"},
            {"messages", Json::array({Json{{"role", "user"}, {"content", "hi"}}})},
            {"format", "json"},
            {"options", Json{{"temperature", 0}, {"top_k", 5}, {"seed", 3}, {"num_predict", 12}, {"stop", Json::array({"x"})}}}};
  ChatRequest r = parse_ollama_chat(body);
  EXPECT_TRUE(r.params.stream);  // Ollama streams by default
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.0f);
  EXPECT_EQ(r.params.sampling.top_k, 5);
  EXPECT_EQ(r.params.sampling.seed, 3u);
  EXPECT_EQ(r.params.max_tokens, 12);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.params.constraint.kind, Constraint::Kind::json_object);
  body["format"] = Json{{"type", "object"}};
  EXPECT_EQ(parse_ollama_chat(body).params.constraint.kind, Constraint::Kind::json_schema);
  body["options"]["num_predict"] = -1;
  EXPECT_FALSE(parse_ollama_chat(body).params.max_tokens);

  body["format"] = "yaml";
  EXPECT_EQ(param_of([&] { parse_ollama_chat(body); }), "format");
  body.erase("format");
  body.erase("model");
  EXPECT_EQ(param_of([&] { parse_ollama_chat(body); }), "model");
}

TEST(ParseOllama, GenerateTemplatedOrRaw) {
  OllamaGenerate templated = parse_ollama_generate(Json{{"model", "m"}, {"prompt", "hi"}, {"system", "s"}, {"stream", false}});
  ASSERT_TRUE(templated.chat);
  EXPECT_FALSE(templated.chat->params.stream);
  ASSERT_EQ(templated.chat->messages.size(), 2u);
  EXPECT_EQ(templated.chat->messages[0]["role"], "system");
  EXPECT_EQ(templated.chat->messages[1]["content"], "hi");
  OllamaGenerate raw = parse_ollama_generate(Json{{"model", "m"}, {"prompt", "hi"}, {"raw", true}});
  EXPECT_FALSE(raw.chat);
  EXPECT_EQ(raw.completion.prompt_text, "hi");
}

// As Ollama: no prompt (no messages) only loads the model; images are refused, never dropped.
TEST(ParseOllama, LoadOnlyAndImages) {
  EXPECT_TRUE(parse_ollama_generate(Json{{"model", "m"}}).load_only);
  EXPECT_TRUE(parse_ollama_generate(Json{{"model", "m"}, {"prompt", ""}, {"raw", true}}).load_only);
  EXPECT_FALSE(parse_ollama_generate(Json{{"model", "m"}, {"prompt", "x"}}).load_only);
  EXPECT_TRUE(parse_ollama_chat(Json{{"model", "m"}}).load_only);
  EXPECT_TRUE(parse_ollama_chat(Json{{"model", "m"}, {"messages", Json::array()}}).load_only);
  EXPECT_EQ(param_of([] {
              parse_ollama_chat(Json{{"model", "m"}, {"messages", Json::array({Json{
                                    {"role", "user"}, {"content", "x"}, {"images", Json::array({"aGk="})}}})}});
            }),
            "messages[0].images");
  EXPECT_EQ(param_of([] {
              parse_ollama_generate(Json{{"model", "m"}, {"prompt", "x"}, {"images", Json::array({"aGk="})}});
            }),
            "images");
  // An empty list is no image.
  EXPECT_NO_THROW(parse_ollama_chat(Json{{"model", "m"}, {"messages", Json::array({Json{
                                             {"role", "user"}, {"content", "x"}, {"images", Json::array()}}})}}));
  // OpenAI's messages carry no images field: not read there.
  const Json with_images = Json::array({Json{{"role", "user"}, {"content", "x"}, {"images", Json::array({"a"})}}});
  EXPECT_NO_THROW(parse_openai_chat(chat({{"messages", with_images}})));
}

}  // namespace
}  // namespace pie::server
