// Modelfiles, as Ollama writes them, and `orchard create NAME -f Modelfile` / POST /api/create:
//   FROM <path or stored name>        (required, once)
//   PARAMETER <name> <value>          sampling defaults: temperature, top_k, top_p, min_p, seed,
//   num_predict,
//                                     num_ctx, stop (repeatable), repeat_penalty, presence_penalty,
//                                     ...
//   TEMPLATE <text>                   the chat template (Jinja, as the model's own), replacing the
//   model's SYSTEM <text>                     the system prompt a conversation without one starts
//   with ADAPTER <path>                    a LoRA adapter (stored and recorded; applied by the LoRA
//   loader) LICENSE <text>                    (repeatable) MESSAGE <role> <text>             a
//   conversation's first messages (repeatable)
// Instructions are case-insensitive; a value is the rest of the line, a "quoted" string or a
// """triple quoted""" one that may span lines; lines starting with '#' are comments.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "pie/error.h"
#include "pie/model_store.h"

namespace pie {

// A Modelfile that cannot be read: "[modelfile] Modelfile:3:1: unknown instruction 'FORM' (...)".
class ModelfileError : public Error {
 public:
  ModelfileError(const std::string& message, std::int32_t line, std::int32_t column)
      : Error(message), line_(line), column_(column) {}
  std::int32_t line() const { return line_; }  // 1-based
  std::int32_t column() const { return column_; }

 private:
  std::int32_t line_;
  std::int32_t column_;
};

struct Modelfile {
  std::string from;
  std::string chat_template;
  std::string system;
  std::string
      parameters;  // JSON object text ("" when none): numbers typed, "stop" an array of strings
  std::vector<std::string> adapters;
  std::vector<std::string> licenses;
  std::string messages;  // JSON array text of {"role", "content"} ("" when none)
};

// Throws ModelfileError with the line and column at fault: an unknown instruction or parameter, a
// value of the wrong type, a missing value, an unterminated quote, no FROM or two.
Modelfile parse_modelfile(std::string_view text, std::string_view file_name = "Modelfile");

// Creates `name` from a parsed Modelfile: FROM a GGUF file (a path, relative to base_dir; its bytes
// are stored as a blob) or a stored model's name (whose template, system prompt, parameters,
// licenses, adapters and messages it inherits unless the Modelfile sets them). Throws
// ModelNotFoundError (FROM names nothing), ModelError (not a GGUF file), StoreError.
StoredModel create_model(const ModelStore& store, std::string_view name, const Modelfile& modelfile,
                         const std::filesystem::path& base_dir, const StoreProgress& progress = {});

// A stored model's sampling parameters as request fields, to apply where a request leaves them out:
// in Ollama's names (an "options" object: temperature, top_p, top_k, min_p, seed, stop,
// repeat_penalty, presence_penalty, frequency_penalty, num_predict), or in OpenAI's (num_predict ->
// max_tokens, repeat_penalty -> repetition_penalty). {} when it has none; parameters that are not
// sampling fields (num_ctx, num_thread, ...) are left out.
nlohmann::json sampling_options(const StoredModel& model);
nlohmann::json openai_sampling_fields(const StoredModel& model);

// The stored model's Modelfile, as /api/show and `orchard show --modelfile` print it.
std::string modelfile_text(const StoredModel& model);

}  // namespace pie
