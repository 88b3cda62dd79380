#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace pie::jinja {

void Value::release_nested() {
  std::vector<Value> work;
  auto take = [&work](Value& v) {
    if (v.list && v.list.use_count() == 1) {
      for (auto& x : *v.list) work.push_back(std::move(x));
      v.list->clear();
    }
    if (v.dict && v.dict.use_count() == 1) {
      for (auto& [k, x] : v.dict->items) {
        work.push_back(std::move(k));
        work.push_back(std::move(x));
      }
      v.dict->items.clear();
    }
  };
  take(*this);
  while (!work.empty()) {
    Value v = std::move(work.back());
    work.pop_back();
    take(v);  // v's children move to the work list, so destroying v recurses no further
  }
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.s));
  for (const auto& [k, v] : items) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.kind == Kind::string && k.s == key) return &v;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return v.markup ? "Markup" : "str";
    case Kind::list: return v.generator ? "generator" : v.tuple ? "tuple" : "list";
    case Kind::dict: return v.namespace_ ? "Namespace" : "dict";
    case Kind::function: return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return v.b;
    case Kind::integer: return v.i != 0;
    case Kind::floating: return v.f != 0.0;
    case Kind::string: return !v.s.empty();
    case Kind::list: return v.generator || !v.list->empty();
    case Kind::dict: return v.namespace_ || !v.dict->items.empty();
    case Kind::function: return true;
  }
  return false;
}

std::vector<std::uint32_t> utf8_decode(std::string_view s) {
  std::vector<std::uint32_t> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {  // invalid byte: keep it as a code point of its own
      out.push_back(c);
      ++i;
      continue;
    }
    std::uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

bool is_py_space(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
         cp == 0x205f || cp == 0x3000;
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  if (x == 0.0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci = [-]d[.ddd]e[+-]XX: the shortest digits that round-trip, as Python's repr picks them.
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const std::size_t e = sci.find('e');
  std::string digits;
  for (std::size_t k = 0; k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += exp < 0 ? "e-" : "e+";
    const int a = std::abs(exp);
    if (a < 10) out += '0';
    out += std::to_string(a);
  } else if (exp < 0) {
    out += "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  } else {
    const auto int_len = static_cast<std::size_t>(exp + 1);
    if (digits.size() <= int_len) {
      out += digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return out;
}

namespace {

bool py_printable(std::uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return false;
  if ((cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) || (cp >= 0x205f && cp <= 0x206f))
    return false;
  if (cp == 0x1680 || cp == 0x3000 || cp == 0xfeff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
  return true;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (std::uint32_t cp : utf8_decode(s)) {
    if (cp == '\\') out += "\\\\";
    else if (cp == static_cast<std::uint32_t>(quote)) { out += '\\'; out += quote; }
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (py_printable(cp)) utf8_append(out, cp);
    else {
      char buf[16];
      if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      else std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      out += buf;
    }
  }
  out += quote;
  return out;
}

}  // namespace

namespace {
std::string repr_at(const Value& v, int depth);
}

std::string repr(const Value& v) { return repr_at(v, 0); }

namespace {
// A namespace can hold itself (set ns.x = ns): the depth bound stands in for Python's "..." detection.
std::string repr_at(const Value& v, int depth) {
  if (depth > kMaxValueDepth) throw ValueError{"value nested too deeply to print"};
  switch (v.kind) {
    case Kind::string: return v.markup ? "Markup(" + string_repr(v.s) + ")" : string_repr(v.s);
    case Kind::list: {
      if (v.generator) return "<generator object>";
      std::string out = v.tuple ? "(" : "[";
      for (std::size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += repr_at((*v.list)[k], depth + 1);
      }
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Kind::dict: {
      std::string out = v.namespace_ ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += repr_at(k, depth + 1) + ": " + repr_at(x, depth + 1);
      }
      return out + (v.namespace_ ? "}>" : "}");
    }
    default: return to_str(v);
  }
}
}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return "";
    case Kind::none: return "None";
    case Kind::boolean: return v.b ? "True" : "False";
    case Kind::integer: return std::to_string(v.i);
    case Kind::floating: return float_repr(v.f);
    case Kind::string: return v.s;
    case Kind::list:
    case Kind::dict: return repr(v);
    case Kind::function: return "<function " + v.fn->name + ">";
  }
  return "";
}

namespace {
bool equals_at(const Value& a, const Value& b, int depth);
int compare_at(const Value& a, const Value& b, int depth);
}  // namespace

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }
int compare(const Value& a, const Value& b) { return compare_at(a, b, 0); }

namespace {
bool equals_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) throw ValueError{"values nested too deeply to compare"};
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::undefined:
    case Kind::none: return true;
    case Kind::string: return a.s == b.s;
    case Kind::list: {
      if (a.generator || b.generator) return a.list == b.list;
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (std::size_t k = 0; k < a.list->size(); ++k) {
        if (!equals_at((*a.list)[k], (*b.list)[k], depth + 1)) return false;
      }
      return true;
    }
    case Kind::dict: {
      if (a.namespace_ || b.namespace_) return a.dict == b.dict;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (y == nullptr || !equals_at(x, *y, depth + 1)) return false;
      }
      return true;
    }
    case Kind::function: return a.fn == b.fn;
    default: return false;
  }
}

int compare_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) throw ValueError{"values nested too deeply to compare"};
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.s.compare(b.s);  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind == Kind::list && b.kind == Kind::list && a.tuple == b.tuple && !a.generator && !b.generator) {
    const std::size_t n = std::min(a.list->size(), b.list->size());
    for (std::size_t k = 0; k < n; ++k) {
      if (!equals_at((*a.list)[k], (*b.list)[k], depth + 1)) return compare_at((*a.list)[k], (*b.list)[k], depth + 1);
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  throw ValueError{std::string("'<' not supported between instances of '") + type_name(a) + "' and '" +
                   type_name(b) + "'"};
}
}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (std::uint32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    char buf[16];
    if (cp < 0x20 || (ensure_ascii && cp > 0x7e && cp < 0x10000)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else if (ensure_ascii && cp >= 0x10000) {
      const std::uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      out += buf;
    } else {
      utf8_append(out, cp);
    }
  }
  out += '"';
}

std::string json_float(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x < 0 ? "-Infinity" : "Infinity";
  return float_repr(x);
}

std::string json_key(const Value& k) {
  switch (k.kind) {
    case Kind::string: return k.s;
    case Kind::integer: return std::to_string(k.i);
    case Kind::boolean: return k.b ? "true" : "false";
    case Kind::none: return "null";
    case Kind::floating: return json_float(k.f);
    default:
      throw ValueError{std::string("keys must be str, int, float, bool or None, not ") + type_name(k)};
  }
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > kMaxValueDepth) throw ValueError{"tojson: nesting too deep"};
  auto newline = [&](int level) {
    if (o.indent < 0 && o.indent_string.empty()) return;
    out += '\n';
    for (int k = 0; k < level; ++k) {
      if (!o.indent_string.empty()) out += o.indent_string;
      else out.append(static_cast<std::size_t>(std::max(o.indent, 0)), ' ');
    }
  };
  switch (v.kind) {
    case Kind::none: out += "null"; return;
    case Kind::boolean: out += v.b ? "true" : "false"; return;
    case Kind::integer: out += std::to_string(v.i); return;
    case Kind::floating: out += json_float(v.f); return;
    case Kind::string: json_string(out, v.s, o.ensure_ascii); return;
    case Kind::list: {
      if (v.generator) break;
      if (v.list->empty()) { out += "[]"; return; }
      out += '[';
      newline(depth + 1);
      for (std::size_t k = 0; k < v.list->size(); ++k) {
        if (k) { out += o.item_separator; newline(depth + 1); }
        json_value(out, (*v.list)[k], o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::dict: {
      if (v.namespace_) break;
      if (v.dict->items.empty()) { out += "{}"; return; }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, x] : v.dict->items) entries.emplace_back(json_key(k), &x);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      newline(depth + 1);
      for (std::size_t k = 0; k < entries.size(); ++k) {
        if (k) { out += o.item_separator; newline(depth + 1); }
        json_string(out, entries[k].first, o.ensure_ascii);
        out += o.key_separator;
        json_value(out, *entries[k].second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default: break;
  }
  throw ValueError{std::string("Object of type ") + type_name(v) + " is not JSON serializable"};
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(out, v, options, 0);
  return out;
}

void add_span(Spans& spans, std::size_t begin, std::size_t end) {
  if (begin >= end) return;
  if (!spans.empty() && spans.back().end >= begin) {
    spans.back().end = std::max(spans.back().end, static_cast<std::uint32_t>(end));
    return;
  }
  spans.push_back(Span{static_cast<std::uint32_t>(begin), static_cast<std::uint32_t>(end)});
}

void append_spans(Spans& to, const Spans& from, std::size_t offset) {
  for (const Span& s : from) add_span(to, s.begin + offset, s.end + offset);
}

Spans sub_spans(const Spans& spans, std::size_t begin, std::size_t end) {
  Spans out;
  for (const Span& s : spans) {
    const std::size_t b = std::max<std::size_t>(s.begin, begin), e = std::min<std::size_t>(s.end, end);
    if (b < e) add_span(out, b - begin, e - begin);
  }
  return out;
}

bool overlaps(const Spans& spans, std::size_t begin, std::size_t end) {
  auto it = std::upper_bound(spans.begin(), spans.end(), begin, [](std::size_t b, const Span& s) { return b < s.end; });
  return it != spans.end() && it->begin < end && begin < end;
}

namespace {

bool holds_context_text_at(const Value& v, int depth) {
  if (depth > kMaxValueDepth) return true;  // (cannot be printed either: counts as context text)
  switch (v.kind) {
    case Kind::string: return !v.spans.empty();
    case Kind::list:
      return std::any_of(v.list->begin(), v.list->end(),
                         [&](const Value& x) { return holds_context_text_at(x, depth + 1); });
    case Kind::dict:
      return std::any_of(v.dict->items.begin(), v.dict->items.end(), [&](const auto& kv) {
        return holds_context_text_at(kv.first, depth + 1) || holds_context_text_at(kv.second, depth + 1);
      });
    default: return false;
  }
}

}  // namespace

bool holds_context_text(const Value& v) { return holds_context_text_at(v, 0); }

void mark_derived(Value& v) {
  if (v.kind == Kind::string) {
    if (v.spans.empty()) add_span(v.spans, 0, v.s.size());
    return;
  }
  if (v.kind == Kind::list) {
    // A fresh list: the one returned may be an input's, shared by reference.
    List items = *v.list;
    for (Value& x : items) {
      if (x.kind == Kind::string && x.spans.empty()) add_span(x.spans, 0, x.s.size());
    }
    Value copy = Value::make_list(std::move(items), v.tuple);
    copy.generator = v.generator;
    v = std::move(copy);
  }
}

Value from_json(const nlohmann::ordered_json& j, int depth, bool context_text) {
  if (depth > kMaxValueDepth) throw ValueError{"template variable nested deeper than " + std::to_string(kMaxValueDepth)};
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      Value v = Value::string(j.get<std::string>());
      if (context_text) add_span(v.spans, 0, v.s.size());
      return v;
    }
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, depth + 1, context_text));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::make_dict();
      d.dict->items.reserve(j.size());
      for (const auto& [k, x] : j.items()) {
        Value key = Value::string(k);
        if (context_text) add_span(key.spans, 0, key.s.size());
        d.dict->items.emplace_back(std::move(key), from_json(x, depth + 1, context_text));
      }
      return d;
    }
    default: return Value::none();
  }
}

}  // namespace pie::jinja
