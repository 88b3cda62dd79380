// What the server was asked for, independent of the API it came through: OpenAI's chat and text
// completions and Ollama's chat and generate requests all parse into these, validated field by field
// (an ApiError 400 naming the field at fault: "messages[2].content", "tool_choice").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pie/sampling.h"
#include "pie/speculation.h"
#include "pie/tool_calls.h"

namespace pie::server {

using Json = nlohmann::ordered_json;

// The output constraint a request asked for (tools aside).
struct Constraint {
  enum class Kind : std::uint8_t { none, json_object, json_schema, grammar, lark, regex };
  Kind kind = Kind::none;
  Json schema;        // json_schema: the schema (property order kept)
  std::string text;   // grammar (GBNF), lark or regex source
  std::string param;  // the request field that held it, for errors ("response_format.json_schema.schema")
};

struct Tool {
  std::string name;
  std::string description;
  Json parameters;  // JSON Schema of the arguments (an object schema)
};

struct GenerationParams {
  std::string model;                 // as asked (empty: the served model)
  SamplingParams sampling;
  std::int32_t n = 1;
  std::optional<std::int32_t> max_tokens;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  Constraint constraint;
  bool token_detail = false;         // extension: each token sampled or forced, and its step's mask count
  std::optional<SpeculativeOptions> speculative;  // extension; nullopt: the server's --spec
};

struct ChatRequest {
  GenerationParams params;
  // Normalized for the chat template: role, content (a string: text parts joined), and where present
  // name, tool_call_id, tool_calls (arguments parsed to objects when they are JSON), reasoning_content.
  Json messages = Json::array();
  std::vector<Tool> tools;
  Json tools_json = Json::array();   // the tools in OpenAI's shape, for the template
  ToolChoice tool_choice{ToolChoice::Mode::none, {}};  // none when there are no tools
  bool parallel_tool_calls = true;
  bool load_only = false;            // Ollama /api/chat without messages: load the model, generate nothing
};

struct CompletionRequest {
  GenerationParams params;
  std::optional<std::string> prompt_text;   // text, or
  std::vector<std::int32_t> prompt_tokens;  // token ids (when prompt_text is empty)
  bool echo = false;
};

// The output constraint of an OpenAI request body: response_format (json_object, json_schema), or the
// extensions grammar (GBNF), lark, regex; at most one. Throws ApiError naming the field.
Constraint parse_constraint(const Json& body);

// OpenAI POST /v1/chat/completions and /v1/completions bodies. Throw ApiError.
ChatRequest parse_openai_chat(const Json& body);
CompletionRequest parse_openai_completion(const Json& body);

// Ollama POST /api/chat and /api/generate bodies (stream defaults to true there). /api/generate without
// "raw" becomes a chat (system + user) so that the model's template applies: `chat` is set then.
ChatRequest parse_ollama_chat(const Json& body);
struct OllamaGenerate {
  std::optional<ChatRequest> chat;    // templated
  CompletionRequest completion;       // raw (used when chat is empty)
  bool load_only = false;             // no prompt: load the model, generate nothing (as Ollama does)
};
OllamaGenerate parse_ollama_generate(const Json& body);

// Arrays and objects nested in a request body, at most: the body's values are copied and printed by
// recursive code (nlohmann's), which this bound keeps off the end of the stack.
constexpr int kMaxBodyNesting = 1000;

// The JSON body of a request; ApiError 400 (code "invalid_json") when it is not a JSON object or nests
// deeper than kMaxBodyNesting, and 400 naming the field for a number beyond a double's range.
Json parse_body(const std::string& body);

}  // namespace pie::server
