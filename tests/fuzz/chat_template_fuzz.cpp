// libFuzzer target for the chat-template interpreter: any input either fails to parse with a
// pie::TemplateError or renders (a small conversation, tight bounds) to text or a pie::TemplateError;
// never a crash, a hang, unbounded memory or another exception type.
#include <cstddef>
#include <cstdint>
#include <string>

#include "pie/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const nlohmann::ordered_json kMessages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "f", "arguments": {"x": [1, 2.5, true, null]}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"}])");
  static const nlohmann::ordered_json kTools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  pie::RenderOptions options;
  options.limits.max_output_bytes = 1 << 16;
  options.limits.max_loop_iterations = 10000;
  options.limits.max_work_bytes = 1 << 22;
  options.limits.max_collection_size = 10000;
  try {
    pie::ChatTemplate tmpl(std::string(reinterpret_cast<const char*>(data), size));
    (void)pie::apply_chat_template(tmpl, kMessages, kTools, true, {"<s>", "</s>"}, {}, options);
  } catch (const pie::TemplateError&) {
  }
  return 0;
}
