// A JSON syntax scanner for model output: finds where a value ends without building it, tells an
// incomplete prefix from an error (for streaming), and strips insignificant whitespace (the
// arguments' compact form keeps every token as the model wrote it).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pie::tools_detail {

enum class Scan { ok, incomplete, error };

// Scans one JSON value starting at text[pos] (no leading whitespace skipped). ok: pos is just past
// it; incomplete: the text ends inside a value that could still complete (pos unchanged); error: it
// cannot. Nesting deeper than 512 is an error. A number at the very end is incomplete (more digits
// may follow).
Scan scan_json_value(std::string_view text, std::size_t& pos);

std::size_t skip_json_whitespace(std::string_view text, std::size_t pos);
inline bool is_json_whitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// `text` (a JSON value or a prefix of one) without whitespace outside strings. On a prefix, the
// result is a prefix of the result on the whole value.
std::string compact_json(std::string_view text);

// Decodes a complete JSON string literal (with quotes); false when it is not one.
bool decode_json_string(std::string_view literal, std::string& out);

// Decodes the JSON string literal at text[0], whole or cut short. ok: `end` is just past its closing
// quote; incomplete: the text ends inside it and `out` holds its characters before the last unfinished
// escape (the decoded prefix of every longer text); error: no JSON string starts there.
Scan decode_json_string_prefix(std::string_view text, std::string& out, std::size_t& end);

}  // namespace pie::tools_detail
