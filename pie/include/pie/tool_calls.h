// Tool calling: the text formats models use to call functions, grammars that force a model's output
// into them (pse), and parsers (one-shot and streaming) that turn the output back into OpenAI-style
// tool calls.
//
//   auto format = pie::detect_tool_call_format(template_source);
//   auto tg = pie::build_tool_grammar(request["tools"],
//   pie::ToolChoice::from_json(request["tool_choice"]),
//                                     /*parallel_tool_calls=*/true, format);
//   generate_request.grammar = tg.grammar;  generate_request.grammar_special_tokens =
//   tg.special_tokens;
//   ... generate ...
//   pie::ParsedOutput out = pie::parse_tool_calls(text, format, {.id_seed = seed});
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "pie/reasoning.h"
#include "pse/grammar.h"
#include "pse/json_schema.h"

namespace pie {
namespace tools_detail {
enum class ParseEnd : std::uint8_t;  // tools/output_parse.h
}  // namespace tools_detail

enum class ToolCallFormat : std::uint8_t {
  // {"tool_calls": [{"name": ..., "arguments": {...}}, ...]} or {"content": "..."}: the whole
  // output is one
  // JSON object (for models without a native format).
  generic,
  // Hermes 2 Pro / Qwen2.5 / Qwen3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
  // one block
  // per call.
  hermes,
  // Llama 3.1 / 3.2 / 3.3: {"name": ..., "parameters": {...}}, optionally after <|python_tag|>;
  // parallel
  // calls separated by ";" (no marker, so in auto mode the output is either text or calls).
  llama3_json,
  // Mistral Nemo: [TOOL_CALLS][{"name": ..., "arguments": {...}[, "id": "<9 alphanumerics>"]}, ...]
  mistral,
  // Functionary v3.1 (Llama 3.1): <function=NAME>{...}</function>, one per call.
  functionary_v3_1,
  // Firefunction v2: functools[{"name": ..., "arguments": {...}}, ...]
  firefunction_v2,
};

const char* tool_call_format_name(
    ToolCallFormat format);  // "generic", "hermes", "llama3_json", ...
// Throws RequestError (param "tool_call_format") on an unknown name.
ToolCallFormat tool_call_format_from_name(std::string_view name);
// The family from chat-template source text (the markers it writes); generic when none is
// recognised.
ToolCallFormat detect_tool_call_format(std::string_view chat_template_source);

struct ToolChoice {
  enum class Mode : std::uint8_t { none, automatic, required, named };
  Mode mode = Mode::automatic;
  std::string name;  // Mode::named: the function that must be called

  // OpenAI's tool_choice: null (auto), "none", "auto", "required", {"type": "function", "function":
  // {"name": ...}}. Throws RequestError (param "tool_choice") otherwise.
  static ToolChoice from_json(const nlohmann::ordered_json& value);
};

struct ToolGrammarOptions {
  // How each tool's arguments are laid out and read (pse::json_schema_to_grammar). Compact by default,
  // and so is the wrapper around them ({"name":...,"arguments":...}, separators): no whitespace between
  // JSON tokens, only the newlines a format writes around its markers (hermes: "<tool_call>\n{...}\n
  // </tool_call>", blocks one a line). Optional whitespace lets a model spend its tokens on runs of
  // blanks (a small model under a forced call may never close it). With kFlexible the wrapper allows
  // schema.max_whitespace_run bytes between its tokens too; kIndented lays out the arguments only.
  // Unknown keywords are ignored by default: tool schemas in the wild carry many annotations.
  pse::JsonSchemaOptions schema = [] {
    pse::JsonSchemaOptions o;
    o.layout = pse::JsonLayout::kCompact;
    o.unknown_keywords = pse::JsonSchemaOptions::UnknownKeywords::kIgnore;
    return o;
  }();
  // Run normalize_tool_parameters on each schema first.
  bool normalize = true;
  // Object schemas that list "properties" but say nothing of other members (no
  // additionalProperties, patternProperties or unevaluatedProperties) take only their listed
  // properties, as OpenAI's strict mode and llama.cpp do: every output stays valid against the
  // schema as written, the model cannot invent argument names, and the grammar is far smaller (the
  // 1,000 BFCL entries, hermes, compiled eagerly against the Llama 3 vocabulary: 38 ms on average
  // instead of 1.4 s). false: as written.
  bool closed_objects = true;
  // Parallel calls at most this many (1..64); bounds a model that would call forever.
  std::uint32_t max_parallel_calls = 16;
};

struct ToolGrammar {
  // nullopt for tool_choice none (no constraint from the tools).
  std::optional<pse::Grammar> grammar;
  // Marker texts the grammar requires that tokenizers often mark special ("<tool_call>",
  // "[TOOL_CALLS]",
  // "<|python_tag|>"): GenerateRequest::grammar_special_tokens.
  std::vector<std::string> special_tokens;
};

// The grammar of an answer to `tools` (OpenAI tools array: [{"type": "function", "function":
// {"name", "description", "parameters"}}]; entries of another type are skipped) in `format`:
//   required: one call (parallel: 1..max_parallel_calls calls) and nothing else; named: the same,
//   of that function only; automatic: free text, and once the format's marker appears, calls
//   constrained as in required (llama3_json, which has no marker: calls, or text that does not
//   start with "{", whitespace or
//   "<|python_tag|>"; generic: {"content": "..."} or calls);
//   none: nullopt.
// Arguments follow each tool's parameters schema (normalised, see normalize_tool_parameters); a
// tool with no parameters takes an object. Throws RequestError: param "tools" (not an array, no
// function tools, a function without a name or with a duplicate name),
// "tools[i].function.parameters" (a schema pse cannot enforce: the SchemaError's pointer and
// keyword in the message), "tool_choice" (named function absent).
ToolGrammar build_tool_grammar(const nlohmann::ordered_json& tools, const ToolChoice& choice,
                               bool parallel_tool_calls, ToolCallFormat format,
                               const ToolGrammarOptions& options = {});

// Rewrites the non-standard spellings of function-calling datasets (BFCL, Gorilla) into JSON
// Schema, in every subschema (properties, items, prefixItems, additionalProperties,
// anyOf/oneOf/allOf, $defs):
//   "type": "dict" -> "object", "float"/"double" -> "number", "tuple" -> "array", "int" ->
//   "integer", "bool" -> "boolean", "str" -> "string", "list" -> "array", "any" -> no type
//   constraint (also inside a type array); the BFCL annotation "optional" is dropped; a missing
//   schema or "{}" becomes an object schema. Throws RequestError (param "parameters") on an unknown
//   "type" spelling, naming its pointer.
nlohmann::ordered_json normalize_tool_parameters(const nlohmann::ordered_json& parameters);

// ToolGrammarOptions::closed_objects on one schema: "additionalProperties": false added to every
// object schema that has a non-empty "properties" and none of additionalProperties and
// patternProperties, through properties and items; schemas that combine others (allOf, anyOf,
// oneOf, not, if, $ref, unevaluated*) are left as written, with everything under them.
nlohmann::ordered_json close_object_schemas(const nlohmann::ordered_json& schema);

struct ToolCall {
  std::string
      id;  // "call_" + 24 alphanumerics (mistral: 9 alphanumerics, as its template requires)
  std::string name;
  std::string arguments;  // JSON text of an object, insignificant whitespace removed
  friend bool operator==(const ToolCall&, const ToolCall&) = default;
};

struct ParsedOutput {
  std::string content;            // text outside calls and reasoning
  std::string reasoning_content;  // the reasoning section, without its markers
  std::vector<ToolCall> tool_calls;
};

struct ParseOptions {
  ReasoningFormat reasoning = ReasoningFormat::none;
  ReasoningMarkers reasoning_markers;
  // Seed of the call ids: the same text and seed give the same ids (the server draws a fresh seed for
  // every request, so that ids never repeat across requests).
  std::uint64_t id_seed = 0;
};

// Splits a model's whole output into reasoning, content and calls. Never throws on model output: a
// call that does not parse (bad JSON, missing name or arguments, unclosed) is left in content,
// marker included. cut: the output was cut short (max_tokens, the context), so a call block that ends
// early is not malformed: its calls with whole arguments are kept and the rest of it is dropped.
ParsedOutput parse_tool_calls(std::string_view text, ToolCallFormat format,
                              const ParseOptions& options = {}, bool cut = false);

// One piece of a streamed tool call, as OpenAI streams them: the first delta of a call carries its
// index, id and name (arguments empty); later ones the same index and a fragment of the arguments.
struct ToolCallDelta {
  std::int32_t index = 0;
  std::string id;         // first delta of the call only
  std::string name;       // first delta of the call only
  std::string arguments;  // fragment
};

struct StreamDelta {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning_content.empty() && tool_calls.empty(); }
};

// Incremental parse of a streamed output: push text deltas, get what became certain. Text that may
// still turn out to be a marker is held back; marker text of a call is never emitted as content.
// For output that parses, the concatenated deltas (content, reasoning, per-call name and arguments)
// equal parse_tool_calls of the whole text, however it was split. For malformed output the parser
// never throws: a call whose name was already emitted keeps what was streamed, and the rest of the
// text becomes content.
class ToolCallStreamParser {
 public:
  explicit ToolCallStreamParser(ToolCallFormat format, ParseOptions options = {});
  StreamDelta push(std::string_view text);
  // The end of the output: flushes held-back text. cut: as parse_tool_calls's (a call the stream
  // already began stays in the deltas, but parsed() holds only the calls with whole arguments).
  StreamDelta finish(bool cut = false);
  // Everything parsed so far (after finish(): as parse_tool_calls would return for well-formed
  // output).
  const ParsedOutput& parsed() const { return emitted_; }

 private:
  ToolCallFormat format_;
  ParseOptions options_;
  std::string text_;
  ParsedOutput emitted_;       // what the deltas so far add up to
  std::size_t committed_ = 0;  // diverged: text_[0, committed_) is settled; the rest is content
  bool diverged_ = false;
  bool finished_ = false;
  // The last parse ended inside a string of the last call's arguments (no escape pending): text
  // without quotes, backslashes and control bytes only extends those arguments, with no need to
  // parse again.
  bool in_argument_string_ = false;
  StreamDelta advance(tools_detail::ParseEnd end);
};

// Calls written in `format` exactly as build_tool_grammar lays them out by default (compact JSON, the
// format's markers and separators): how earlier calls appear in a prompt whose template cannot render
// them, and, with placeholder names and arguments, the syntax shown to a model told of its tools in a
// system message. Each call's `arguments` is JSON text, written as given (ids are not written).
std::string format_tool_calls(ToolCallFormat format, const std::vector<ToolCall>& calls);

// "call_" + 24 characters of [A-Za-z0-9] from `rng`.
std::string make_tool_call_id(std::mt19937_64& rng);

}  // namespace pie
