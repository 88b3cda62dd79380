#include "pie/chat_template.h"

#include <utility>
#include <vector>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_parser.h"

namespace pie {

ChatTemplate::ChatTemplate(std::string source)
    : source_(std::move(source)), program_(jinja::parse(source_)) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render(context, RenderOptions{});
}

void check_template_value_depth(const nlohmann::ordered_json& value, const std::string& what) {
  using Iterator = nlohmann::ordered_json::const_iterator;
  if (!value.is_structured()) return;
  // The open containers, each with its next child: no recursion, whatever the depth.
  std::vector<std::pair<Iterator, Iterator>> open{{value.cbegin(), value.cend()}};
  while (!open.empty()) {
    auto& [next, end] = open.back();
    if (next == end) {
      open.pop_back();
      continue;
    }
    const nlohmann::ordered_json& child = *next;
    ++next;
    if (!child.is_structured()) continue;
    if (static_cast<int>(open.size()) + 1 > kMaxTemplateValueDepth) {
      throw TemplateError(what + " nests arrays and objects deeper than " + std::to_string(kMaxTemplateValueDepth) +
                              " levels",
                          0, 0);
    }
    open.emplace_back(child.cbegin(), child.cend());
  }
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return render_tracked(context, {}, options).text;
}

RenderedText ChatTemplate::render_tracked(const nlohmann::ordered_json& context,
                                          const std::vector<std::string>& tracked, const RenderOptions& options) const {
  if (!context.is_null() && !context.is_object()) {
    throw TemplateError("the render context must be a JSON object, got " + std::string(context.type_name()), 0, 0);
  }
  check_template_value_depth(context, "the render context");
  jinja::Interpreter interpreter(options);
  jinja::Text text = interpreter.render(*program_, context, tracked);
  RenderedText out;
  out.text = std::move(text.s);
  out.tracked.reserve(text.spans.size());
  for (const jinja::Span& span : text.spans) out.tracked.emplace_back(span.begin, span.end);
  return out;
}

std::string apply_chat_template(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                const ChatTemplateTokens& tokens, const nlohmann::ordered_json& extra,
                                const RenderOptions& options) {
  return apply_chat_template_tracked(tmpl, messages, tools, add_generation_prompt, tokens, extra, options).text;
}

RenderedText apply_chat_template_tracked(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                         const ChatTemplateTokens& tokens, const nlohmann::ordered_json& extra,
                                         const RenderOptions& options) {
  if (!messages.is_array()) {
    throw TemplateError("messages must be a JSON array, got " + std::string(messages.type_name()), 0, 0);
  }
  if (!extra.is_null() && !extra.is_object()) {
    throw TemplateError("extra template variables must be a JSON object, got " + std::string(extra.type_name()),
                        0, 0);
  }
  // Before the copies below, which recurse.
  check_template_value_depth(messages, "messages");
  check_template_value_depth(tools, "tools");
  check_template_value_depth(extra, "extra template variables");
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = tokens.bos_token;
  context["eos_token"] = tokens.eos_token;
  if (extra.is_object()) {
    for (const auto& [k, v] : extra.items()) context[k] = v;
  }
  return tmpl.render_tracked(context, {"messages", "tools"}, options);
}

const std::string& builtin_chat_template() {
  static const std::string kChatML =
      "{%- for message in messages %}"
      "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
      "{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  return kChatML;
}

}  // namespace pie
