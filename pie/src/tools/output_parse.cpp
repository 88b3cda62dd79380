// Parsing of model output per tool-call format, on whole outputs and on streamed prefixes.
#include "tools/output_parse.h"

#include <optional>
#include <random>

#include "tools/json_scan.h"

namespace pie::tools_detail {
namespace {

enum class Status { complete, partial, malformed };

struct CallObject {
  Status status = Status::malformed;
  std::size_t end = 0;  // complete: just past the closing brace
  PartialCall call;     // partial: name set when known (then arguments is a prefix)
  bool has_name = false;
};

bool is_ws(char c) { return is_json_whitespace(c); }

std::string_view rstrip(std::string_view s) {
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view lstrip(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  return s;
}

// Length of the longest suffix of `text` that is a proper prefix of `marker` (it may still become
// one).
std::size_t marker_prefix_suffix(std::string_view text, std::string_view marker) {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

bool is_prefix_of(std::string_view text, std::string_view of) {
  return text.size() <= of.size() && of.substr(0, text.size()) == text;
}

// Arguments from a complete value: an object (compacted) or a string holding an object's JSON.
std::optional<std::string> arguments_of(std::string_view raw) {
  if (!raw.empty() && raw.front() == '{') return compact_json(raw);
  std::string decoded;
  if (!decode_json_string(raw, decoded)) return std::nullopt;
  std::string_view d = lstrip(decoded);
  std::size_t pos = 0;
  if (d.empty() || d.front() != '{' || scan_json_value(d, pos) != Scan::ok ||
      !lstrip(d.substr(pos)).empty()) {
    return std::nullopt;
  }
  return compact_json(d.substr(0, pos));
}

// {"name": "...", "arguments" | "parameters": {...}, ...} at t[i] (members in any order; for a
// partial call the name is known only when it came before the arguments).
CallObject parse_call_object(std::string_view t, std::size_t i) {
  CallObject r;
  if (i >= t.size()) {
    r.status = Status::partial;
    return r;
  }
  if (t[i] != '{') return r;
  i = skip_json_whitespace(t, i + 1);
  std::optional<std::string> name;
  std::optional<std::string_view> args;
  auto partial = [&](std::string_view args_prefix) {
    r.status = Status::partial;
    if (name) {
      r.has_name = true;
      r.call.name = *name;
      if (!args_prefix.empty() && args_prefix.front() == '{')
        r.call.arguments = compact_json(args_prefix);
    }
    return r;
  };
  if (i < t.size() && t[i] == '}') {
    i += 1;
  } else {
    for (;;) {
      if (i >= t.size()) return partial(args.value_or(""));
      if (t[i] != '"') return r;
      const std::size_t key_start = i;
      if (Scan s = scan_json_value(t, i); s != Scan::ok)
        return s == Scan::incomplete ? partial(args.value_or("")) : r;
      std::string key;
      if (!decode_json_string(t.substr(key_start, i - key_start), key)) return r;
      i = skip_json_whitespace(t, i);
      if (i >= t.size()) return partial(args.value_or(""));
      if (t[i] != ':') return r;
      i = skip_json_whitespace(t, i + 1);
      const std::size_t value_start = i;
      const Scan s = scan_json_value(t, i);
      const bool is_args = key == "arguments" || key == "parameters";
      if (s == Scan::error) return r;
      if (s == Scan::incomplete)
        return partial(is_args && !args ? t.substr(value_start) : args.value_or(""));
      const std::string_view value = t.substr(value_start, i - value_start);
      if (key == "name" && !name) {
        std::string decoded;
        if (!decode_json_string(value, decoded) || decoded.empty()) return r;
        name = std::move(decoded);
      } else if (is_args && !args) {
        args = value;
      }
      i = skip_json_whitespace(t, i);
      if (i >= t.size()) return partial(args.value_or(""));
      if (t[i] == '}') {
        i += 1;
        break;
      }
      if (t[i] != ',') return r;
      i = skip_json_whitespace(t, i + 1);
    }
  }
  if (!name || !args) return r;
  std::optional<std::string> arguments = arguments_of(*args);
  if (!arguments) return r;
  r.status = Status::complete;
  r.end = i;
  r.has_name = true;
  r.call = {*name, std::move(*arguments), true, true};
  return r;
}

// A block of calls that starts at a marker. calls: the block's calls so far (the last possibly
// partial).
struct Block {
  Status status = Status::malformed;
  std::size_t end = 0;
  std::vector<PartialCall> calls;
};

// Adds a partial call object's call (if it has a name) and returns a partial block.
Block partial_block(Block b, const CallObject& o) {
  if (o.has_name) b.calls.push_back(o.call);
  b.status = Status::partial;
  return b;
}

// <tool_call> {...} </tool_call>
Block hermes_block(std::string_view t, std::size_t i) {
  Block b;
  i = skip_json_whitespace(t, i);
  CallObject o = parse_call_object(t, i);
  if (o.status == Status::malformed) return b;
  if (o.status == Status::partial) return partial_block(std::move(b), o);
  i = skip_json_whitespace(t, o.end);
  constexpr std::string_view kClose = "</tool_call>";
  b.calls.push_back(std::move(o.call));
  if (t.substr(i, kClose.size()) == kClose) {
    b.status = Status::complete;
    b.end = i + kClose.size();
    return b;
  }
  if (is_prefix_of(t.substr(i), kClose)) {
    b.calls.back().complete = false;  // not final until the close marker is read
    b.status = Status::partial;
    return b;
  }
  b.calls.clear();
  return b;
}

// [ {...}, {...} ] (mistral, firefunction), after the marker.
Block array_block(std::string_view t, std::size_t i) {
  Block b;
  if (i >= t.size()) {
    b.status = Status::partial;
    return b;
  }
  if (t[i] != '[') return b;
  i = skip_json_whitespace(t, i + 1);
  for (;;) {
    CallObject o = parse_call_object(t, i);
    if (o.status == Status::malformed) return Block{};
    if (o.status == Status::partial) return partial_block(std::move(b), o);
    b.calls.push_back(std::move(o.call));
    i = skip_json_whitespace(t, o.end);
    if (i >= t.size()) {
      b.status = Status::partial;
      return b;
    }
    if (t[i] == ']') {
      b.status = Status::complete;
      b.end = i + 1;
      return b;
    }
    if (t[i] != ',') return Block{};
    i = skip_json_whitespace(t, i + 1);
  }
}

// <function=NAME>{...}</function>, after "<function=".
Block functionary_block(std::string_view t, std::size_t i) {
  Block b;
  const std::size_t gt = t.find('>', i);
  const std::string_view name =
      t.substr(i, gt == std::string_view::npos ? std::string_view::npos : gt - i);
  for (char c : name) {
    if (c == '<' || c == '\n' || c == '"' || c == ' ') return b;
  }
  if (gt == std::string_view::npos) {
    b.status = Status::partial;
    return b;
  }
  if (name.empty()) return b;
  std::size_t j = skip_json_whitespace(t, gt + 1);
  const std::size_t value_start = j;
  const Scan s = j < t.size() && t[j] == '{' ? scan_json_value(t, j)
                 : j < t.size()              ? Scan::error
                                             : Scan::incomplete;
  if (s == Scan::error) return b;
  PartialCall call{std::string(name), "", false, s == Scan::ok};
  if (s == Scan::incomplete) {
    call.arguments = compact_json(t.substr(value_start));
    b.calls.push_back(std::move(call));
    b.status = Status::partial;
    return b;
  }
  call.arguments = compact_json(t.substr(value_start, j - value_start));
  j = skip_json_whitespace(t, j);
  constexpr std::string_view kClose = "</function>";
  b.calls.push_back(std::move(call));
  if (t.substr(j, kClose.size()) == kClose) {
    b.calls.back().complete = true;
    b.status = Status::complete;
    b.end = j + kClose.size();
    return b;
  }
  if (is_prefix_of(t.substr(j), kClose)) {
    b.status = Status::partial;
    return b;
  }
  return Block{};
}

struct MarkerSpec {
  std::string_view open;
  std::string_view close;  // of a malformed block: the content runs to here (empty: to the end)
};

MarkerSpec marker_spec(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::hermes:
      return {"<tool_call>", "</tool_call>"};
    case ToolCallFormat::mistral:
      return {"[TOOL_CALLS]", ""};
    case ToolCallFormat::firefunction_v2:
      return {"functools", ""};
    case ToolCallFormat::functionary_v3_1:
      return {"<function=", "</function>"};
    default:
      return {};
  }
}

Block parse_block(ToolCallFormat format, std::string_view t, std::size_t i) {
  switch (format) {
    case ToolCallFormat::hermes:
      return hermes_block(t, i);
    case ToolCallFormat::functionary_v3_1:
      return functionary_block(t, i);
    default:
      return array_block(t, i);
  }
}

// Appends a piece of text outside calls: whitespace next to a call is dropped; on a prefix, the
// trailing whitespace of the last piece is held back (it is dropped if a call follows).
void add_content(OutputParse& out, std::string_view piece, bool after_call, bool before_call,
                 bool settled) {
  if (after_call) piece = lstrip(piece);
  if (before_call || !settled) piece = rstrip(piece);
  out.content.append(piece);
}

void add_calls(OutputParse& out, std::vector<PartialCall>& calls) {
  for (PartialCall& c : calls) out.calls.push_back(std::move(c));
}

// The calls of a block cut short that are whole.
void add_closed_calls(OutputParse& out, std::vector<PartialCall>& calls) {
  for (PartialCall& c : calls) {
    if (!c.arguments_closed) break;
    c.complete = true;
    out.calls.push_back(std::move(c));
  }
}

// Formats whose calls start at a marker: text, then blocks, text again, ...
void parse_marked(std::string_view t, ToolCallFormat format, ParseEnd end, OutputParse& out) {
  const bool final = end != ParseEnd::prefix;
  const MarkerSpec spec = marker_spec(format);
  std::size_t piece = 0, search = 0;
  bool after_call = false;
  for (;;) {
    const std::size_t m = t.find(spec.open, search);
    if (m == std::string_view::npos) {
      std::string_view rest = t.substr(piece);
      if (!final) {
        // Hold back what may become the marker (or, inside a malformed block, its close marker).
        rest.remove_suffix(marker_prefix_suffix(rest, spec.open));
        if (!spec.close.empty()) rest.remove_suffix(marker_prefix_suffix(rest, spec.close));
      }
      add_content(out, rest, after_call, false, final);
      return;
    }
    Block b = parse_block(format, t, m + spec.open.size());
    if (b.status == Status::partial && end == ParseEnd::cut) {
      add_content(out, t.substr(piece, m - piece), after_call, true, true);
      add_closed_calls(out, b.calls);
      return;
    }
    if (b.status == Status::partial && final) b.status = Status::malformed;
    if (b.status == Status::malformed) {
      // The block is text: content runs on past its close marker (or to the end).
      if (spec.close.empty()) {
        search = t.size();
      } else {
        const std::size_t close = t.find(spec.close, m + spec.open.size());
        search = close == std::string_view::npos ? t.size() : close + spec.close.size();
      }
      if (search == t.size()) {
        std::string_view rest = t.substr(piece);
        if (!final && !spec.close.empty())
          rest.remove_suffix(marker_prefix_suffix(rest, spec.close));
        add_content(out, rest, after_call, false, final);
        return;
      }
      continue;
    }
    add_content(out, t.substr(piece, m - piece), after_call, true, true);
    add_calls(out, b.calls);
    if (b.status == Status::partial) return;
    piece = search = b.end;
    after_call = true;
  }
}

// Llama 3.x: the whole answer is calls ([<|python_tag|>] {...} (; {...})*) or text.
void parse_llama3(std::string_view t, ParseEnd end, OutputParse& out) {
  const bool final = end != ParseEnd::prefix;
  constexpr std::string_view kTag = "<|python_tag|>";
  std::size_t i = skip_json_whitespace(t, 0);
  auto as_text = [&] { add_content(out, t, false, false, final); };
  if (t.substr(i, kTag.size()) == kTag) {
    i = skip_json_whitespace(t, i + kTag.size());
  } else if (!final && is_prefix_of(t.substr(i), kTag)) {
    return;  // may still be the tag
  }
  if (i >= t.size()) {
    if (!final) return;
    return as_text();
  }
  if (t[i] != '{') return as_text();
  std::vector<PartialCall> calls;
  for (;;) {
    CallObject o = parse_call_object(t, i);
    if (o.status == Status::partial && end == ParseEnd::cut) return add_closed_calls(out, calls);
    if (o.status == Status::malformed || (o.status == Status::partial && final)) return as_text();
    if (o.status == Status::partial) {
      if (o.has_name) calls.push_back(o.call);
      return add_calls(out, calls);
    }
    calls.push_back(std::move(o.call));
    i = skip_json_whitespace(t, o.end);
    if (i < t.size() && t[i] == ';') i = skip_json_whitespace(t, i + 1);
    if (i >= t.size()) {
      if (!final) {
        for (PartialCall& c : calls)
          c.complete = false;  // text may still follow and turn it all into text
      }
      return add_calls(out, calls);
    }
    if (t[i] != '{') return as_text();
  }
}

// Generic, an object with other members than one "tool_calls" or "content" (or none): read whole.
void parse_generic_object(std::string_view t, std::size_t start, ParseEnd end, OutputParse& out) {
  const bool final = end != ParseEnd::prefix;
  auto as_text = [&] { add_content(out, t, false, false, final); };
  std::size_t stop = start;
  const Scan s = scan_json_value(t, stop);
  if (s == Scan::error || (s == Scan::incomplete && end == ParseEnd::whole)) return as_text();
  if (s == Scan::incomplete) return;  // wait for the whole object (cut: nothing whole to keep)
  if (!lstrip(t.substr(stop)).empty()) return as_text();
  // Walk the members for "tool_calls" and "content".
  std::size_t i = skip_json_whitespace(t, start + 1);
  std::vector<PartialCall> calls;
  std::optional<std::string> content;
  bool has_calls = false;
  while (i < stop && t[i] == '"') {
    const std::size_t key_start = i;
    scan_json_value(t, i);
    std::string key;
    decode_json_string(t.substr(key_start, i - key_start), key);
    i = skip_json_whitespace(t, skip_json_whitespace(t, i) + 1);  // past ':'
    const std::size_t value_start = i;
    scan_json_value(t, i);
    const std::string_view value = t.substr(value_start, i - value_start);
    if (key == "tool_calls" && !value.empty() && value.front() == '[') {
      Block b = array_block(value, 0);
      if (b.status != Status::complete) return as_text();
      calls = std::move(b.calls);
      has_calls = true;
    } else if (key == "content") {
      std::string decoded;
      if (!decode_json_string(value, decoded)) return as_text();
      content = std::move(decoded);
    }
    i = skip_json_whitespace(t, i);
    if (i < stop && t[i] == ',') i = skip_json_whitespace(t, i + 1);
  }
  if (!has_calls && !content) return as_text();
  if (content) out.content += *content;
  if (!final) {
    for (PartialCall& c : calls) c.complete = false;
  }
  add_calls(out, calls);
}

// Generic: {"tool_calls": [...]} or {"content": "..."}; anything else is text. The calls and the
// content are read as they stream; an object of another shape is read once whole.
void parse_generic(std::string_view t, ParseEnd end, OutputParse& out) {
  const bool final = end != ParseEnd::prefix;
  const std::size_t start = skip_json_whitespace(t, 0);
  auto as_text = [&] { add_content(out, t, false, false, final); };
  if (start >= t.size()) {
    if (final) as_text();
    return;
  }
  if (t[start] != '{') return as_text();
  // The first member's key and colon; the text may end anywhere in them.
  auto unfinished = [&] {
    if (end == ParseEnd::whole) as_text();  // cut: a wrapper without a call or content is nothing
  };
  std::size_t i = skip_json_whitespace(t, start + 1);
  if (i >= t.size()) return unfinished();
  if (t[i] != '"') return parse_generic_object(t, start, end, out);
  const std::size_t key_start = i;
  if (Scan s = scan_json_value(t, i); s != Scan::ok) {
    return s == Scan::incomplete ? unfinished() : as_text();
  }
  std::string key;
  if (!decode_json_string(t.substr(key_start, i - key_start), key)) return as_text();
  if (key != "tool_calls" && key != "content") return parse_generic_object(t, start, end, out);
  i = skip_json_whitespace(t, i);
  if (i >= t.size()) return unfinished();
  if (t[i] != ':') return as_text();
  i = skip_json_whitespace(t, i + 1);
  if (i >= t.size()) return unfinished();

  // The value, then the end of the object: "}" and nothing but whitespace after it.
  std::size_t value_end = 0;
  std::vector<PartialCall> calls;
  std::string content;
  if (key == "tool_calls") {
    if (t[i] != '[') return parse_generic_object(t, start, end, out);
    Block b = array_block(t, i);
    if (b.status == Status::malformed) return parse_generic_object(t, start, end, out);
    if (b.status == Status::partial) {
      if (end == ParseEnd::whole) return as_text();
      if (end == ParseEnd::cut) return add_closed_calls(out, b.calls);
      return add_calls(out, b.calls);
    }
    calls = std::move(b.calls);
    value_end = b.end;
  } else {
    if (t[i] != '"') return parse_generic_object(t, start, end, out);
    const Scan s = decode_json_string_prefix(t.substr(i), content, value_end);
    if (s == Scan::error) return as_text();
    if (s == Scan::incomplete) {
      if (end == ParseEnd::whole) return as_text();
      out.content += content;  // a prefix of the content, or all that a cut output holds
      return;
    }
    value_end += i;
  }
  std::size_t j = skip_json_whitespace(t, value_end);
  if (j < t.size() && t[j] == ',') return parse_generic_object(t, start, end, out);
  if (j < t.size() && t[j] != '}') return as_text();
  const bool closed = j < t.size();
  if (closed && !lstrip(t.substr(j + 1)).empty()) return as_text();
  if (!closed && end == ParseEnd::whole) return as_text();
  out.content += content;
  if (!closed || !final) {
    for (PartialCall& c : calls) c.complete = end == ParseEnd::cut;  // text may still follow
  }
  add_calls(out, calls);
}

void parse_answer(std::string_view t, ToolCallFormat format, ParseEnd end, OutputParse& out) {
  switch (format) {
    case ToolCallFormat::llama3_json:
      return parse_llama3(t, end, out);
    case ToolCallFormat::generic:
      return parse_generic(t, end, out);
    default:
      return parse_marked(t, format, end, out);
  }
}

}  // namespace

OutputParse parse_output(std::string_view text, ToolCallFormat format, const ParseOptions& options,
                         ParseEnd end) {
  const bool final = end != ParseEnd::prefix;
  OutputParse out;
  const ReasoningMarkers& mk = options.reasoning_markers;
  std::size_t reasoning_start = std::string_view::npos;
  if (options.reasoning == ReasoningFormat::think_open && !mk.close.empty()) {
    reasoning_start = 0;
  } else if (options.reasoning == ReasoningFormat::think && !mk.open.empty() && !mk.close.empty()) {
    const std::size_t j = skip_json_whitespace(text, 0);
    if (text.substr(j, mk.open.size()) == mk.open) {
      reasoning_start = j + mk.open.size();
    } else if (!final && is_prefix_of(text.substr(j), mk.open)) {
      return out;  // may still open a reasoning section
    }
  }
  if (reasoning_start == std::string_view::npos) {
    parse_answer(text, format, end, out);
    return out;
  }
  const std::size_t close = text.find(mk.close, reasoning_start);
  if (close == std::string_view::npos) {
    std::string_view r = text.substr(reasoning_start);
    if (!final) r.remove_suffix(marker_prefix_suffix(r, mk.close));
    out.reasoning = std::string(final ? lstrip(rstrip(r)) : rstrip(lstrip(r)));
    return out;
  }
  out.reasoning =
      std::string(rstrip(lstrip(text.substr(reasoning_start, close - reasoning_start))));
  std::string_view answer = text.substr(close + mk.close.size());
  // The answer starts after the blank line models write; whitespace only is nothing yet.
  answer = lstrip(answer);
  parse_answer(answer, format, end, out);
  return out;
}

std::string tool_call_id(ToolCallFormat format, std::uint64_t seed, std::size_t index) {
  std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ULL * (index + 1)));
  if (format != ToolCallFormat::mistral) return make_tool_call_id(rng);
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id;
  for (int i = 0; i < 9; ++i) id.push_back(kAlphabet[rng() % 62]);
  return id;
}

}  // namespace pie::tools_detail
