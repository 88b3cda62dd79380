// Reasoning ("thinking") output of Qwen3, QwQ and DeepSeek R1: free text between "<think>" and
// "</think>" before the answer. The grammar side lets the model think freely and then constrains
// only the answer; the parser side (pie/tool_calls.h) splits reasoning_content from content.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pse/grammar.h"

namespace pie {

enum class ReasoningFormat : std::uint8_t {
  none,   // no reasoning section
  think,  // the output may open with "<think>" ... "</think>" (Qwen3: thinking can be switched off)
  think_open,  // the prompt already ends in "<think>" (QwQ, DeepSeek R1): the output starts inside
               // the reasoning, which "</think>" closes
};

const char* reasoning_format_name(ReasoningFormat format);  // "none", "think", "think_open"
// Throws RequestError (param "reasoning_format") on an unknown name.
ReasoningFormat reasoning_format_from_name(std::string_view name);

// The family from chat-template source: think_open when the generation prompt ends in "<think>"
// (QwQ, DeepSeek R1 distills), think when the template knows "<think>" otherwise (Qwen3), none
// else.
ReasoningFormat detect_reasoning_format(std::string_view chat_template_source);

struct ReasoningMarkers {
  std::string open = "<think>";
  std::string close = "</think>";
};

// A grammar that accepts the reasoning section of `format` and then exactly the language of
// `answer`:
//   think:      ("<think>" T "</think>" W)? answer
//   think_open: T "</think>" W answer
// where T is any text not containing the close marker and W at most 4 bytes of whitespace ("\n\n"
// is what the models write). none returns `answer` unchanged; otherwise `answer`'s rules are copied
// with the prefix "answer_". Throws pse::GrammarError when `answer` is not a valid grammar (no
// root, undefined rule) or a marker is empty. The markers are text the engine must treat as text:
// list them in GenerateRequest::grammar_special_tokens.
pse::Grammar wrap_with_reasoning(const pse::Grammar& answer, ReasoningFormat format,
                                 const ReasoningMarkers& markers = {});

}  // namespace pie
