// Tools for a chat template that cannot render them. Many templates (SmolLM2's, base models', the
// built-in ChatML one) know nothing of tools: rendered as they are, the tools would vanish and the model
// would never learn what it may call. As llama.cpp does for its generic format, the tools and the call
// syntax then go in a system message, earlier calls are written in the format's own syntax, and tool
// results become user messages.
#pragma once

#include <string>
#include <string_view>

#include "pie/tool_calls.h"
#include "server/api_request.h"

namespace pie::server {

// What a chat template renders by itself, read from the words of its source.
struct TemplateToolSupport {
  bool tools = false;    // the tools list ("tools")
  bool calls = false;    // an assistant message's "tool_calls"
  bool results = false;  // messages of role "tool" (or Llama's "ipython")
};
TemplateToolSupport template_tool_support(std::string_view template_source);

// The system text that tells a model of request.tools: one line per tool (name, description and
// parameters as compact JSON), then how to call in `format`, written as the grammar will enforce it
// (with tool_choice auto in the generic format, also how to answer without a call; a named choice
// names its function).
std::string tools_system_text(const ChatRequest& request, ToolCallFormat format);

// The messages to render. Where the template renders tools, calls and results itself: request.messages.
// Otherwise, while tools are active (given, tool_choice not none), tools_system_text is appended to the
// first system message (or is one, first); earlier assistant calls are written as content in `format`;
// runs of tool results become one user message of {"tool_response":{"name":...,"content":...}} lines.
Json messages_for_template(std::string_view template_source, ToolCallFormat format, const ChatRequest& request);

}  // namespace pie::server
