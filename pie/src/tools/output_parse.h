// The parse of a model's output (or a prefix of it, while it streams) into reasoning, content and
// calls. One function serves both: on a prefix (ParseEnd::prefix) it returns only what can no longer
// change for well-formed output (text that may still be a marker or trailing whitespace held back;
// the last call possibly partial), so the streaming parser emits differences between successive
// parses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pie/tool_calls.h"

namespace pie::tools_detail {

struct PartialCall {
  std::string name;
  std::string arguments;  // compact; a prefix of the final arguments while !complete
  bool complete = false;  // nothing that follows can change it
  bool arguments_closed = false;  // its arguments value is whole (a cut output keeps such calls)
};

// How much of the output the text is: a prefix of what is still streaming, the whole output, or an
// output that was cut short (max_tokens, the context): a call block cut inside keeps the calls whose
// arguments are whole, and the rest of the block is dropped (neither a call nor text the model meant).
enum class ParseEnd : std::uint8_t { prefix, whole, cut };

struct OutputParse {
  std::string reasoning;
  std::string content;
  std::vector<PartialCall> calls;
};

OutputParse parse_output(std::string_view text, ToolCallFormat format, const ParseOptions& options,
                         ParseEnd end);

// The id of call `index` of an output parsed with `seed` (mistral: 9 alphanumerics, as its template
// requires; others "call_" + 24).
std::string tool_call_id(ToolCallFormat format, std::uint64_t seed, std::size_t index);

}  // namespace pie::tools_detail
