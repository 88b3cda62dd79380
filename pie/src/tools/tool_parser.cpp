// parse_tool_calls and the streaming parser: both read parse_output; the stream emits the
// difference between the parse of what it has received and what it emitted before.
#include <algorithm>

#include "pie/tool_calls.h"
#include "tools/output_parse.h"

namespace pie {

using tools_detail::OutputParse;
using tools_detail::ParseEnd;
using tools_detail::parse_output;
using tools_detail::tool_call_id;

ParsedOutput parse_tool_calls(std::string_view text, ToolCallFormat format,
                              const ParseOptions& options, bool cut) {
  OutputParse p = parse_output(text, format, options, cut ? ParseEnd::cut : ParseEnd::whole);
  ParsedOutput out;
  out.content = std::move(p.content);
  out.reasoning_content = std::move(p.reasoning);
  for (std::size_t i = 0; i < p.calls.size(); ++i) {
    out.tool_calls.push_back({tool_call_id(format, options.id_seed, i), std::move(p.calls[i].name),
                              std::move(p.calls[i].arguments)});
  }
  return out;
}

ToolCallStreamParser::ToolCallStreamParser(ToolCallFormat format, ParseOptions options)
    : format_(format), options_(std::move(options)) {}

StreamDelta ToolCallStreamParser::push(std::string_view text) {
  if (finished_) return {};
  text_.append(text);
  if (in_argument_string_ && !diverged_ && std::none_of(text.begin(), text.end(), [](char c) {
        return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
      })) {
    // Inside a string the arguments keep every byte: the parse would only extend them by `text`.
    StreamDelta d;
    emitted_.tool_calls.back().arguments.append(text);
    d.tool_calls.push_back(
        {static_cast<std::int32_t>(emitted_.tool_calls.size() - 1), "", "", std::string(text)});
    return d;
  }
  return advance(ParseEnd::prefix);
}

StreamDelta ToolCallStreamParser::finish(bool cut) {
  if (finished_) return {};
  StreamDelta d = advance(cut ? ParseEnd::cut : ParseEnd::whole);
  finished_ = true;
  return d;
}

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// Appends what `now` adds to `before` (when before is a prefix of now) to `delta` and `before`.
bool extend(std::string& before, const std::string& now, std::string& delta) {
  if (!starts_with(now, before)) return false;
  delta.append(now, before.size());
  before = now;
  return true;
}

// Whether JSON text (a prefix of a value) ends inside a string, with no escape pending.
bool ends_inside_string(const std::string& json) {
  bool in_string = false, escaped = false;
  for (char c : json) {
    if (escaped) {
      escaped = false;
    } else if (in_string && c == '\\') {
      escaped = true;
    } else if (c == '"') {
      in_string = !in_string;
    }
  }
  return in_string && !escaped;
}

}  // namespace

StreamDelta ToolCallStreamParser::advance(ParseEnd end) {
  const bool final = end != ParseEnd::prefix;
  StreamDelta d;
  if (diverged_) {
    // The output broke its format after parts of a call were streamed: the rest is plain content.
    d.content = text_.substr(committed_);
    committed_ = text_.size();
    emitted_.content += d.content;
    return d;
  }
  const OutputParse p = parse_output(text_, format_, options_, end);
  // Cut inside a call the stream began: its deltas are out, but it is no call of the parsed output.
  if (end == ParseEnd::cut && p.calls.size() < emitted_.tool_calls.size()) {
    emitted_.tool_calls.resize(p.calls.size());
  }
  bool consistent = starts_with(p.reasoning, emitted_.reasoning_content) &&
                    starts_with(p.content, emitted_.content) &&
                    p.calls.size() >= emitted_.tool_calls.size();
  for (std::size_t i = 0; consistent && i < emitted_.tool_calls.size(); ++i) {
    consistent = p.calls[i].name == emitted_.tool_calls[i].name &&
                 starts_with(p.calls[i].arguments, emitted_.tool_calls[i].arguments);
  }
  if (!consistent) {
    diverged_ = true;
    // What the parse now reads as content past what was emitted, when it still extends it; the text
    // received later follows as content.
    if (starts_with(p.content, emitted_.content)) extend(emitted_.content, p.content, d.content);
    committed_ = text_.size();
    return d;
  }
  in_argument_string_ = !final && !p.calls.empty() && !p.calls.back().complete &&
                        ends_inside_string(p.calls.back().arguments);
  extend(emitted_.reasoning_content, p.reasoning, d.reasoning_content);
  extend(emitted_.content, p.content, d.content);
  for (std::size_t i = 0; i < p.calls.size(); ++i) {
    const auto index = static_cast<std::int32_t>(i);
    if (i == emitted_.tool_calls.size()) {
      emitted_.tool_calls.push_back(
          {tool_call_id(format_, options_.id_seed, i), p.calls[i].name, ""});
      d.tool_calls.push_back({index, emitted_.tool_calls[i].id, p.calls[i].name, ""});
    }
    std::string fragment;
    extend(emitted_.tool_calls[i].arguments, p.calls[i].arguments, fragment);
    if (!fragment.empty()) d.tool_calls.push_back({index, "", "", std::move(fragment)});
  }
  return d;
}

}  // namespace pie
