// Chat templates: a Jinja2 interpreter covering what real chat templates use, with the settings Hugging
// Face renders them under (trim_blocks, lstrip_blocks, loop controls, an immutable sandbox, HF's `tojson`,
// `raise_exception` and `strftime_now`), so a template renders byte for byte as `apply_chat_template` does.
//
//   pie::ChatTemplate tmpl(source);                       // throws TemplateError on a syntax error
//   std::string prompt = pie::apply_chat_template(tmpl, messages, nullptr, true, {"<s>", "</s>"});
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pie/error.h"

namespace pie {

// A template that cannot be parsed or rendered: a syntax error, raise_exception(), a type error, an
// exceeded bound. line and column are 1-based places in the template source (0 when unknown).
class TemplateError : public Error {
 public:
  TemplateError(const std::string& message, int line, int column)
      : Error(line > 0 ? "[chat_template] line " + std::to_string(line) + ", column " +
                             std::to_string(column) + ": " + message
                       : "[chat_template] " + message),
        message_(message),
        line_(line),
        column_(column) {}
  const std::string& message() const { return message_; }  // without the place
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  std::string message_;
  int line_;
  int column_;
};

// Bounds that keep a hostile template from hanging the server or exhausting memory or the stack.
struct TemplateLimits {
  std::size_t max_output_bytes = 8u << 20;        // rendered text and any one string built on the way
  std::int64_t max_loop_iterations = 1'000'000;   // summed over every loop of one render
  int max_call_depth = 100;                       // nested macro calls
  std::size_t max_collection_size = 1'000'000;    // elements of one list built by *, +, slicing, ...
  std::size_t max_work_bytes = 1u << 30;          // bytes of strings and lists built over one render
};

struct RenderOptions {
  TemplateLimits limits;
  // The time strftime_now() formats (local time); nullopt: the current time.
  std::optional<std::chrono::system_clock::time_point> now;
};

namespace jinja {
struct Program;
}

// Rendered text, with the byte ranges [begin, end) of it that came from the text of tracked variables
// (sorted, disjoint): what a tokenizer must read as plain text, never as special tokens, while the
// template's own markup around it becomes control tokens. Text the template derived from tracked values
// in ways it cannot follow byte by byte (filters such as tojson or replace, methods such as split) counts
// whole.
struct RenderedText {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> tracked;
};

class ChatTemplate {
 public:
  // Parses the template. Throws TemplateError (with line and column) on a syntax error.
  explicit ChatTemplate(std::string source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with the keys of `context` (an object) as variables. Thread-safe (const). Throws TemplateError
  // on raise_exception(), a type error or an exceeded bound; nothing is kept from a failed render.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options) const;
  // The same, tracking where the text of the variables named in `tracked` lands.
  RenderedText render_tracked(const nlohmann::ordered_json& context, const std::vector<std::string>& tracked,
                              const RenderOptions& options = {}) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const jinja::Program> program_;
};

struct ChatTemplateTokens {
  std::string bos_token;
  std::string eos_token;
};

// Arrays and objects nested deeper than this in a render's variables are a TemplateError, found before
// anything copies or walks them (the check is iterative, linear in the value's size).
constexpr int kMaxTemplateValueDepth = 256;
// Throws TemplateError ("`what` nests ... deeper than 256") when `value` does.
void check_template_value_depth(const nlohmann::ordered_json& value, const std::string& what);

// Renders as Hugging Face's apply_chat_template does: variables messages, tools (null when none),
// add_generation_prompt, bos_token, eos_token, then the keys of `extra` (an object or null), which win.
std::string apply_chat_template(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                const ChatTemplateTokens& tokens,
                                const nlohmann::ordered_json& extra = nlohmann::ordered_json{},
                                const RenderOptions& options = {});

// The same, tracking where the text of `messages` and `tools` (given by users) lands in the prompt.
RenderedText apply_chat_template_tracked(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                         const ChatTemplateTokens& tokens,
                                         const nlohmann::ordered_json& extra = nlohmann::ordered_json{},
                                         const RenderOptions& options = {});

// The ChatML template (<|im_start|>role\ncontent<|im_end|>\n ...), for models that ship none.
const std::string& builtin_chat_template();

}  // namespace pie
