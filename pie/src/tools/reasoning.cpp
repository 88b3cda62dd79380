// Reasoning sections: format names, detection, and the grammar wrapper.
#include "pie/reasoning.h"

#include "pie/error.h"
#include "tools/grammar_parts.h"

namespace pie {

const char* reasoning_format_name(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::none:
      return "none";
    case ReasoningFormat::think:
      return "think";
    case ReasoningFormat::think_open:
      return "think_open";
  }
  return "unknown";
}

ReasoningFormat reasoning_format_from_name(std::string_view name) {
  if (name == "none") return ReasoningFormat::none;
  if (name == "think") return ReasoningFormat::think;
  if (name == "think_open") return ReasoningFormat::think_open;
  throw RequestError("[reasoning] unknown reasoning format \"" + std::string(name) +
                         "\" (expected none, think or think_open)",
                     "reasoning_format");
}

ReasoningFormat detect_reasoning_format(std::string_view source) {
  if (source.find("<think>") == std::string_view::npos) return ReasoningFormat::none;
  // The generation prompt opens the reasoning itself: "<|im_start|>assistant\n<think>\n" (QwQ) or
  // "<｜Assistant｜><think>\n" (DeepSeek R1 distills). Qwen3 writes "<think>" only when thinking is
  // off.
  for (std::string_view opener : {"assistant\\n<think>\\n", "<｜Assistant｜><think>\\n"}) {
    if (source.find(opener) != std::string_view::npos) return ReasoningFormat::think_open;
  }
  return ReasoningFormat::think;
}

pse::Grammar wrap_with_reasoning(const pse::Grammar& answer, ReasoningFormat format,
                                 const ReasoningMarkers& markers) {
  if (format == ReasoningFormat::none) return answer;
  if (markers.close.empty() || (format == ReasoningFormat::think && markers.open.empty())) {
    throw pse::GrammarError("[reasoning] wrap_with_reasoning: empty marker");
  }
  pse::Grammar g;
  const pse::ExprId answer_ref = g.embed(answer, "answer_");
  const pse::ExprId thought = g.add_rule_ref(
      g.add_rule("reasoning_text", tools_detail::add_text_without(g, markers.close, "reasoning_")));
  const pse::ExprId after = tools_detail::add_whitespace(g, 4);
  pse::ExprId section = g.add_sequence({thought, g.add_bytes(markers.close), after});
  if (format == ReasoningFormat::think) {
    section = g.add_repeat(g.add_sequence({g.add_bytes(markers.open), section}), 0, 1);
  }
  g.set_root(g.add_rule("root", g.add_sequence({section, answer_ref})));
  return g;
}

}  // namespace pie
