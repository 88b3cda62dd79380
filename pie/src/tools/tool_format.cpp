// Tool-call format names, detection from chat templates, tool_choice and call ids.
#include <array>
#include <string>
#include <vector>

#include "pie/error.h"
#include "pie/tool_calls.h"

namespace pie {
namespace {

constexpr std::array<std::pair<ToolCallFormat, const char*>, 6> kFormatNames = {{
    {ToolCallFormat::generic, "generic"},
    {ToolCallFormat::hermes, "hermes"},
    {ToolCallFormat::llama3_json, "llama3_json"},
    {ToolCallFormat::mistral, "mistral"},
    {ToolCallFormat::functionary_v3_1, "functionary_v3_1"},
    {ToolCallFormat::firefunction_v2, "firefunction_v2"},
}};

bool contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat format) {
  for (const auto& [f, name] : kFormatNames) {
    if (f == format) return name;
  }
  return "unknown";
}

ToolCallFormat tool_call_format_from_name(std::string_view name) {
  for (const auto& [f, n] : kFormatNames) {
    if (name == n) return f;
  }
  throw RequestError("[tool_calls] unknown tool-call format \"" + std::string(name) +
                         "\" (expected generic, hermes, llama3_json, mistral, functionary_v3_1 or "
                         "firefunction_v2)",
                     "tool_call_format");
}

ToolCallFormat detect_tool_call_format(std::string_view source) {
  // Most specific markers first: Functionary v3.1 also writes <|python_tag|> (for its code
  // interpreter).
  if (contains(source, "<function=")) return ToolCallFormat::functionary_v3_1;
  if (contains(source, "functools[")) return ToolCallFormat::firefunction_v2;
  if (contains(source, "[TOOL_CALLS]")) return ToolCallFormat::mistral;
  if (contains(source, "<tool_call>")) return ToolCallFormat::hermes;
  // Llama 3.x: "Respond in the format {\"name\": function name, \"parameters\": ...}" and the
  // {"name": ..., "parameters": ...} rendering of past calls.
  if (contains(source, "<|start_header_id|>") &&
      (contains(source, "\"parameters\": ") || contains(source, "<|python_tag|>"))) {
    return ToolCallFormat::llama3_json;
  }
  return ToolCallFormat::generic;
}

ToolChoice ToolChoice::from_json(const nlohmann::ordered_json& value) {
  ToolChoice choice;
  if (value.is_null()) return choice;
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    if (s == "auto") return choice;
    if (s == "none") {
      choice.mode = Mode::none;
      return choice;
    }
    if (s == "required") {
      choice.mode = Mode::required;
      return choice;
    }
    throw RequestError(
        "[tool_calls] tool_choice must be \"none\", \"auto\", \"required\" or a function, got \"" +
            s + "\"",
        "tool_choice");
  }
  if (value.is_object()) {
    const auto type = value.find("type");
    const auto function = value.find("function");
    if (type != value.end() && *type == "function" && function != value.end() &&
        function->is_object()) {
      const auto name = function->find("name");
      if (name != function->end() && name->is_string() &&
          !name->get_ref<const std::string&>().empty()) {
        choice.mode = Mode::named;
        choice.name = name->get<std::string>();
        return choice;
      }
    }
    throw RequestError(
        "[tool_calls] tool_choice object must be {\"type\": \"function\", \"function\": {\"name\": "
        "...}}, got " +
            value.dump(),
        "tool_choice");
  }
  throw RequestError("[tool_calls] tool_choice must be a string or an object, got " + value.dump(),
                     "tool_choice");
}

std::string format_tool_calls(ToolCallFormat format, const std::vector<ToolCall>& calls) {
  // {"name":...,"<key>":...}, the name as a JSON string.
  auto object = [](const ToolCall& call, const char* key) {
    return "{\"name\":" + nlohmann::ordered_json(call.name).dump() + ",\"" + key + "\":" + call.arguments + "}";
  };
  auto joined = [&](const char* key, const char* separator) {
    std::string out;
    for (std::size_t i = 0; i < calls.size(); ++i) out += (i ? separator : "") + object(calls[i], key);
    return out;
  };
  switch (format) {
    case ToolCallFormat::generic:
      return "{\"tool_calls\":[" + joined("arguments", ",") + "]}";
    case ToolCallFormat::hermes: {
      std::string out;
      for (std::size_t i = 0; i < calls.size(); ++i) {
        out += (i ? "\n" : "") + std::string("<tool_call>\n") + object(calls[i], "arguments") + "\n</tool_call>";
      }
      return out;
    }
    case ToolCallFormat::llama3_json:
      return joined("parameters", ";");
    case ToolCallFormat::mistral:
      return "[TOOL_CALLS][" + joined("arguments", ",") + "]";
    case ToolCallFormat::functionary_v3_1: {
      std::string out;
      for (const ToolCall& call : calls) out += "<function=" + call.name + ">" + call.arguments + "</function>";
      return out;
    }
    case ToolCallFormat::firefunction_v2:
      return "functools[" + joined("arguments", ",") + "]";
  }
  return {};
}

std::string make_tool_call_id(std::mt19937_64& rng) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[rng() % 62]);
  return id;
}

}  // namespace pie
