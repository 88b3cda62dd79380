#include "pie/chat_template.h"

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

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  if (!context.is_null() && !context.is_object()) {
    throw TemplateError("the render context must be a JSON object, got " + std::string(context.type_name()), 0, 0);
  }
  jinja::Interpreter interpreter(options);
  return interpreter.render(*program_, context);
}

std::string apply_chat_template(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
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
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = tokens.bos_token;
  context["eos_token"] = tokens.eos_token;
  if (extra.is_object()) {
    for (const auto& [k, v] : extra.items()) context[k] = v;
  }
  return tmpl.render(context, options);
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
