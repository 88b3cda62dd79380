#include "chat_options.h"

#include <fmt/format.h>

#include "read_input.h"

namespace orchard::cli {

using Json = nlohmann::ordered_json;

void ChatOptions::add_options(ArgParser& p) {
  p.option("system", 0, "TEXT", "the system message (default: the chat template's own, if any)", &system)
      .option("tools", 0, "FILE",
              "tools the model may call: a JSON array in OpenAI's shape ([{\"type\": \"function\", \"function\": "
              "{\"name\", \"description\", \"parameters\"}}]); calls are printed as JSON lines",
              &tools)
      .option("tool-choice", 0, "CHOICE", "with --tools: auto (default), required, none, or a function's name",
              &tool_choice)
      .flag("one-call", 0, "with --tools: at most one call per answer (default: parallel calls allowed)", &one_call);
}

Json constraint_fields(const GrammarSource& grammar) {
  if (grammar.json_layout || grammar.strict_keywords || grammar.any_order) {
    throw UsageError("--json-layout, --strict-keywords and --any-order are not options of the chat path");
  }
  if (grammar.schema) {
    const std::string text = read_input(*grammar.schema);
    Json schema;
    try {
      schema = Json::parse(text);
    } catch (const Json::parse_error& e) {
      throw UsageError(fmt::format("--schema {}: not JSON: {}", *grammar.schema, e.what()));
    }
    return Json{{"response_format",
                 {{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", std::move(schema)}}}}}};
  }
  if (grammar.gbnf) return Json{{"grammar", read_input(*grammar.gbnf)}};
  if (grammar.lark) return Json{{"lark", read_input(*grammar.lark)}};
  if (grammar.regex) return Json{{"regex", *grammar.regex}};
  return Json::object();
}

Json ChatOptions::fields(const Json& sampling, const GrammarSource& grammar) const {
  Json out = sampling;
  out.update(constraint_fields(grammar));
  if ((tool_choice || one_call) && !tools) throw UsageError("--tool-choice and --one-call need --tools");
  if (tools) {
    if (grammar.given()) throw UsageError("give --tools or a grammar, not both");
    const std::string text = read_input(*tools);
    try {
      out["tools"] = Json::parse(text);
    } catch (const Json::parse_error& e) {
      throw UsageError(fmt::format("--tools {}: not JSON: {}", *tools, e.what()));
    }
    const std::string choice = tool_choice.value_or("auto");
    if (choice == "auto" || choice == "required" || choice == "none") {
      out["tool_choice"] = choice;
    } else {
      out["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", choice}}}};
    }
    if (one_call) out["parallel_tool_calls"] = false;
  }
  return out;
}

}  // namespace orchard::cli
