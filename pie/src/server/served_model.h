// The model behind the server and how its requests are prepared: the chat template (the model's, or the
// built-in ChatML one), its tool-call and reasoning formats, and the step from a parsed API request to an
// engine GenerateRequest (prompt tokens, sampling, stop strings, the grammar of the output constraint or
// of the tools).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pie/chat_template.h"
#include "pie/engine.h"
#include "pie/reasoning.h"
#include "pie/tool_calls.h"
#include "pse/json_schema.h"
#include "server/api_request.h"

namespace pie::server {

// The name a model is served under when none is given: the slug of its file's stem
// ("SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct.Q4_1"; a folder: its name), as llama.cpp
// names it, or of its metadata name for a model loaded from no file; "orchard" when both are empty.
std::string served_model_name(const Model& model);
// `text` with every run of characters outside [A-Za-z0-9._:+-] replaced by one '-', without leading or
// trailing '-' (may be empty).
std::string model_name_slug(std::string_view text);

struct ServedModelOptions {
  std::vector<std::string> aliases;  // other names the `model` field accepts (listed after the name)
  pse::JsonLayout json_layout = pse::JsonLayout::kCompact;  // of response_format / Ollama format output
  // Special-token text in the messages and tools ("<|im_end|>") tokenized as the control token it spells;
  // by default it is plain text, and only the template's own markup becomes control tokens.
  bool special_tokens_in_messages = false;
};

class ServedModel {
 public:
  // name: what clients call the model. Throws pie::Error when a name is empty or holds whitespace or
  // control characters (names go in URLs and Ollama tags), or when the model's own template does not
  // parse (the server would fail every chat).
  ServedModel(std::shared_ptr<Engine> engine, std::string name, ServedModelOptions options = {});

  Engine& engine() const { return *engine_; }
  const Model& model() const { return engine_->model(); }
  const std::string& name() const { return name_; }
  // The served name first, then the aliases (duplicates removed): what /v1/models and /api/tags list.
  const std::vector<std::string>& names() const { return names_; }
  const ChatTemplate& chat_template() const { return template_; }
  bool builtin_template() const { return builtin_template_; }
  ToolCallFormat tool_format() const { return tool_format_; }
  ReasoningFormat reasoning_format() const { return reasoning_format_; }
  std::int32_t context_length() const { return context_length_; }
  pse::JsonLayout json_layout() const { return json_layout_; }
  bool special_tokens_in_messages() const { return special_tokens_in_messages_; }

  // Whether `asked` names this model: one of names(), NAME:latest (Ollama's tag) of one, "default", or
  // empty (the one model served).
  bool serves(const std::string& asked) const;

 private:
  std::shared_ptr<Engine> engine_;
  std::string name_;
  std::vector<std::string> names_;
  ChatTemplate template_;
  bool builtin_template_ = false;
  ToolCallFormat tool_format_ = ToolCallFormat::generic;
  ReasoningFormat reasoning_format_ = ReasoningFormat::none;
  ChatTemplateTokens tokens_;
  std::int32_t context_length_ = 0;
  pse::JsonLayout json_layout_ = pse::JsonLayout::kCompact;
  bool special_tokens_in_messages_ = false;

  friend struct Preparer;
};

// A request ready for the engine, and how to read its output back.
struct PreparedRequest {
  GenerateRequest request;
  std::string prompt_text;        // the rendered prompt (completions echo it)
  bool parse_tool_calls = false;  // the output may hold tool calls (tools given, tool_choice not none)
  ToolCallFormat tool_format = ToolCallFormat::generic;
  ParseOptions parse;             // reasoning split and the seed of call ids
  std::string constraint_param;   // the field that held the constraint, named by compile errors
};

// The grammar of a request's constraint (nullopt for none); JSON is laid out as `layout` says. pse's
// errors surface as ApiError naming the field that held the constraint, with their location.
std::optional<pse::Grammar> constraint_grammar(const Constraint& c, pse::JsonLayout layout);

// Throw ApiError (400 naming the field) for a conversation the template rejects, a constraint or tool
// schema pse cannot enforce, or a prompt that does not tokenize.
PreparedRequest prepare_chat(const ServedModel& model, const ChatRequest& request);
PreparedRequest prepare_completion(const ServedModel& model, const CompletionRequest& request);

}  // namespace pie::server
