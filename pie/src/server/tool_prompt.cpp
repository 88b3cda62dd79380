#include "server/tool_prompt.h"

#include <utility>
#include <vector>

namespace pie::server {
namespace {

bool contains(std::string_view text, std::string_view word) { return text.find(word) != std::string_view::npos; }

// A message's content as text (null for an assistant message that only called tools).
std::string content_text(const Json& message) {
  const auto it = message.find("content");
  return it != message.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// An assistant message's normalized tool_calls ({id, type, function: {name, arguments}}) as ToolCalls.
std::vector<ToolCall> calls_of(const Json& message) {
  std::vector<ToolCall> calls;
  for (const Json& call : message["tool_calls"]) {
    const Json& function = call["function"];
    const Json& arguments = function["arguments"];
    calls.push_back({call.value("id", ""), function["name"].get<std::string>(),
                     arguments.is_string() ? arguments.get<std::string>() : arguments.dump()});
  }
  return calls;
}

}  // namespace

TemplateToolSupport template_tool_support(std::string_view source) {
  return {contains(source, "tools"), contains(source, "tool_calls"),
          contains(source, "'tool'") || contains(source, "\"tool\"") || contains(source, "ipython")};
}

std::string tools_system_text(const ChatRequest& r, ToolCallFormat format) {
  std::string text = "You can call these tools:\n";
  for (const Tool& tool : r.tools) {
    Json line{{"name", tool.name}};
    if (!tool.description.empty()) line["description"] = tool.description;
    line["parameters"] = tool.parameters;
    text += line.dump() + "\n";
  }
  const bool named = r.tool_choice.mode == ToolChoice::Mode::named;
  const std::string syntax =
      format_tool_calls(format, {{"", named ? r.tool_choice.name : "<tool name>", "{<its arguments>}"}});
  switch (r.tool_choice.mode) {
    case ToolChoice::Mode::required:
      text += "\nAnswer with a tool call: " + syntax;
      break;
    case ToolChoice::Mode::named:
      text += "\nAnswer with a call of " + r.tool_choice.name + ": " + syntax;
      break;
    case ToolChoice::Mode::automatic:
    case ToolChoice::Mode::none:
      text += "\nTo call a tool, answer with " + syntax;
      // The generic format's answers are all JSON: say how one reads that calls nothing.
      if (format == ToolCallFormat::generic) text += "\nOtherwise answer with {\"content\":\"<your answer>\"}";
      break;
  }
  return text;
}

Json messages_for_template(std::string_view source, ToolCallFormat format, const ChatRequest& r) {
  const TemplateToolSupport support = template_tool_support(source);
  const bool tools_active = !r.tools.empty() && r.tool_choice.mode != ToolChoice::Mode::none;
  if ((support.tools || !tools_active) && support.calls && support.results) return r.messages;
  Json messages = Json::array();
  std::vector<ToolCall> earlier_calls;  // to name the function of a result by its call id
  bool after_result = false;            // the last message holds tool results
  for (const Json& m : r.messages) {
    const std::string role = m.value("role", "");
    const bool was_after_result = std::exchange(after_result, false);
    if (role == "assistant" && m.contains("tool_calls")) {
      std::vector<ToolCall> calls = calls_of(m);
      earlier_calls.insert(earlier_calls.end(), calls.begin(), calls.end());
      if (!support.calls) {
        Json copy = m;
        copy.erase("tool_calls");
        const std::string text = content_text(m);
        copy["content"] = (text.empty() ? "" : text + "\n") + format_tool_calls(format, calls);
        messages.push_back(std::move(copy));
        continue;
      }
    }
    if (role == "tool" && !support.results) {
      Json response{{"content", content_text(m)}};
      const std::string id = m.value("tool_call_id", "");
      for (const ToolCall& call : earlier_calls) {
        if (!id.empty() && call.id == id) response = Json{{"name", call.name}, {"content", content_text(m)}};
      }
      const std::string line = Json{{"tool_response", std::move(response)}}.dump();
      // Results of one turn's calls go in one message: templates may insist that roles alternate.
      if (was_after_result) {
        messages.back()["content"] = content_text(messages.back()) + "\n" + line;
      } else {
        messages.push_back(Json{{"role", "user"}, {"content", line}});
      }
      after_result = true;
      continue;
    }
    messages.push_back(m);
  }
  if (tools_active && !support.tools) {
    const std::string text = tools_system_text(r, format);
    if (!messages.empty() && messages[0].value("role", "") == "system") {
      messages[0]["content"] = content_text(messages[0]) + "\n\n" + text;
    } else {
      messages.insert(messages.begin(), Json{{"role", "system"}, {"content", text}});
    }
  }
  return messages;
}

}  // namespace pie::server
