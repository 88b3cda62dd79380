// JSON syntax scanning (RFC 8259) over possibly incomplete text.
#include "tools/json_scan.h"

#include <nlohmann/json.hpp>

namespace pie::tools_detail {
namespace {

constexpr int kMaxDepth = 512;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

Scan scan_string(std::string_view t, std::size_t& pos) {
  std::size_t i = pos + 1;  // past the opening quote
  while (i < t.size()) {
    const auto c = static_cast<unsigned char>(t[i]);
    if (c == '"') {
      pos = i + 1;
      return Scan::ok;
    }
    if (c < 0x20) return Scan::error;
    if (c == '\\') {
      if (i + 1 >= t.size()) return Scan::incomplete;
      const char e = t[i + 1];
      if (e == 'u') {
        for (std::size_t k = 0; k < 4; ++k) {
          if (i + 2 + k >= t.size()) return Scan::incomplete;
          if (!is_hex(t[i + 2 + k])) return Scan::error;
        }
        i += 6;
        continue;
      }
      if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' &&
          e != 't') {
        return Scan::error;
      }
      i += 2;
      continue;
    }
    ++i;
  }
  return Scan::incomplete;
}

Scan scan_number(std::string_view t, std::size_t& pos) {
  std::size_t i = pos;
  auto at_end = [&] { return i >= t.size(); };
  if (t[i] == '-') ++i;
  if (at_end()) return Scan::incomplete;
  if (t[i] == '0') {
    ++i;
  } else if (is_digit(t[i])) {
    while (!at_end() && is_digit(t[i])) ++i;
  } else {
    return Scan::error;
  }
  if (at_end()) return Scan::incomplete;
  if (t[i] == '.') {
    ++i;
    if (at_end()) return Scan::incomplete;
    if (!is_digit(t[i])) return Scan::error;
    while (!at_end() && is_digit(t[i])) ++i;
    if (at_end()) return Scan::incomplete;
  }
  if (t[i] == 'e' || t[i] == 'E') {
    ++i;
    if (at_end()) return Scan::incomplete;
    if (t[i] == '+' || t[i] == '-') ++i;
    if (at_end()) return Scan::incomplete;
    if (!is_digit(t[i])) return Scan::error;
    while (!at_end() && is_digit(t[i])) ++i;
    if (at_end()) return Scan::incomplete;
  }
  pos = i;
  return Scan::ok;
}

Scan scan_literal(std::string_view t, std::size_t& pos, std::string_view word) {
  for (std::size_t k = 0; k < word.size(); ++k) {
    if (pos + k >= t.size()) return Scan::incomplete;
    if (t[pos + k] != word[k]) return Scan::error;
  }
  pos += word.size();
  return Scan::ok;
}

Scan scan_value(std::string_view t, std::size_t& pos, int depth) {
  if (pos >= t.size()) return Scan::incomplete;
  if (depth > kMaxDepth) return Scan::error;
  const char c = t[pos];
  if (c == '"') return scan_string(t, pos);
  if (c == '-' || is_digit(c)) return scan_number(t, pos);
  if (c == 't') return scan_literal(t, pos, "true");
  if (c == 'f') return scan_literal(t, pos, "false");
  if (c == 'n') return scan_literal(t, pos, "null");
  if (c != '{' && c != '[') return Scan::error;
  const bool object = c == '{';
  const char close = object ? '}' : ']';
  std::size_t i = skip_json_whitespace(t, pos + 1);
  if (i >= t.size()) return Scan::incomplete;
  if (t[i] == close) {
    pos = i + 1;
    return Scan::ok;
  }
  for (;;) {
    if (object) {
      if (i >= t.size()) return Scan::incomplete;
      if (t[i] != '"') return Scan::error;
      if (Scan s = scan_string(t, i); s != Scan::ok) return s;
      i = skip_json_whitespace(t, i);
      if (i >= t.size()) return Scan::incomplete;
      if (t[i] != ':') return Scan::error;
      i = skip_json_whitespace(t, i + 1);
    }
    if (Scan s = scan_value(t, i, depth + 1); s != Scan::ok) return s;
    i = skip_json_whitespace(t, i);
    if (i >= t.size()) return Scan::incomplete;
    if (t[i] == close) {
      pos = i + 1;
      return Scan::ok;
    }
    if (t[i] != ',') return Scan::error;
    i = skip_json_whitespace(t, i + 1);
  }
}

}  // namespace

Scan scan_json_value(std::string_view text, std::size_t& pos) {
  std::size_t p = pos;
  const Scan s = scan_value(text, p, 0);
  if (s == Scan::ok) pos = p;
  return s;
}

std::size_t skip_json_whitespace(std::string_view text, std::size_t pos) {
  while (pos < text.size() && is_json_whitespace(text[pos])) ++pos;
  return pos;
}

std::string compact_json(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      out.push_back(c);
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (!is_json_whitespace(c)) {
      out.push_back(c);
      if (c == '"') in_string = true;
    }
  }
  return out;
}

bool decode_json_string(std::string_view literal, std::string& out) {
  std::size_t pos = 0;
  if (literal.empty() || literal[0] != '"' || scan_json_value(literal, pos) != Scan::ok ||
      pos != literal.size()) {
    return false;
  }
  const nlohmann::json value = nlohmann::json::parse(literal, nullptr, /*allow_exceptions=*/false);
  if (!value.is_string()) return false;  // e.g. a lone surrogate escape
  out = value.get<std::string>();
  return true;
}

Scan decode_json_string_prefix(std::string_view text, std::string& out, std::size_t& end) {
  if (text.empty() || text[0] != '"') return Scan::error;
  std::size_t pos = 0;
  const Scan s = scan_json_value(text, pos);
  if (s == Scan::error) return s;
  if (s == Scan::ok) {
    end = pos;
    return decode_json_string(text.substr(0, pos), out) ? Scan::ok : Scan::error;
  }
  // The longest prefix that ends between characters: an escape (a surrogate pair, whole) or a byte.
  std::size_t i = 1, safe = 1;
  while (i < text.size()) {
    if (text[i] == '\\') {
      if (i + 1 >= text.size()) break;
      if (text[i + 1] == 'u') {
        if (i + 6 > text.size()) break;
        const unsigned long unit = std::stoul(std::string(text.substr(i + 2, 4)), nullptr, 16);
        const std::size_t length = unit >= 0xD800 && unit <= 0xDBFF ? 12 : 6;  // a high surrogate's pair
        if (i + length > text.size()) break;
        i += length;
      } else {
        i += 2;
      }
    } else {
      ++i;
    }
    safe = i;
  }
  std::string literal(text.substr(0, safe));
  literal += '"';
  return decode_json_string(literal, out) ? Scan::incomplete : Scan::error;
}

}  // namespace pie::tools_detail
