// The options `orchard chat` and `orchard run --chat` share: the system message, the tools, and the
// request fields (sampling, length, the constraint) of a ChatSession turn in the OpenAI request's shape,
// so the command line and the server read them with the same code.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "grammar_source.h"

namespace orchard::cli {

struct ChatOptions {
  std::optional<std::string> system, tools, tool_choice;
  bool one_call = false;  // --one-call: parallel_tool_calls false
  void add_options(ArgParser& p);

  // The request fields of a turn: `sampling` (temperature, top_k, ... already in OpenAI's names), the
  // constraint of `grammar` (response_format json_schema, or the grammar / lark / regex extensions) and
  // the tools. Throws UsageError for an option the chat path cannot honour (--json-layout, --any-order,
  // --strict-keywords, --tool-choice or --one-call without --tools), runtime_error for an unreadable file.
  nlohmann::ordered_json fields(const nlohmann::ordered_json& sampling, const GrammarSource& grammar) const;
};

// The constraint of `grammar` as request fields ({} when none).
nlohmann::ordered_json constraint_fields(const GrammarSource& grammar);

}  // namespace orchard::cli
