// Filters, tests, globals and str/dict/list methods, each as jinja2 3.1 (and Python) defines it, under
// the ImmutableSandboxedEnvironment Hugging Face renders chat templates with: methods that mutate a list or
// a dict are refused.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <unordered_map>

#include "chat/jinja_interpreter.h"

namespace pie::jinja {
namespace {

using FilterFn = std::function<Value(Interpreter&, const Value&, CallArgs&)>;

std::string soft_str(const Value& v) { return v.is_string() ? v.s : to_str(v); }
Value keep_markup(const Value& like, std::string s) { return Value::string(std::move(s), like.is_string() && like.markup); }

// Appends `v` as join() writes it (str() of a non-string), with its context text.
void append_joined(Value& out, const Value& v) {
  const std::size_t at = out.s.size();
  if (v.is_string()) {
    out.s += v.s;
    append_spans(out.spans, v.spans, at);
    return;
  }
  out.s += to_str(v);
  if (holds_context_text(v)) add_span(out.spans, at, out.s.size());
}

std::int64_t int_arg(const Value* v, std::int64_t fallback, const char* what) {
  if (v == nullptr || v->is_none()) return fallback;
  if (!v->is_integral()) throw ValueError{std::string(what) + " must be an integer, got " + type_name(*v)};
  return v->as_int();
}
bool bool_arg(const Value* v, bool fallback) { return v == nullptr ? fallback : truthy(*v); }
std::string str_arg(const Value* v, const std::string& fallback) { return v == nullptr ? fallback : soft_str(*v); }

std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string ascii_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
bool is_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

std::string py_capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

// str.title(): a letter after a cased letter is lowered, any other letter raised.
std::string py_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (is_alpha(c)) {
      c = static_cast<char>(prev_cased ? std::tolower(static_cast<unsigned char>(c))
                                       : std::toupper(static_cast<unsigned char>(c)));
      prev_cased = true;
    } else {
      prev_cased = (static_cast<unsigned char>(c) & 0x80) != 0 && prev_cased;
    }
  }
  return out;
}

// jinja2's title filter: words split at whitespace and -({[<, each capitalized.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    const bool sep = std::isspace(static_cast<unsigned char>(c)) || c == '-' || c == '(' || c == '{' ||
                     c == '[' || c == '<';
    if (sep) {
      out += c;
      word_start = true;
    } else if (word_start) {
      out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      word_start = false;
    } else {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);

// strip/lstrip/rstrip of a string value: a substring, whose context text is the original's there.
Value stripped(const Value& v, const Value* chars, bool left, bool right) {
  const std::string text = v.is_string() ? v.s : to_str(v);
  Value out = keep_markup(v, py_strip(text, chars, left, right));
  if (v.is_string() && !v.spans.empty() && !out.s.empty()) {
    // The result starts at the first character not stripped: nothing before it can hold a copy of it.
    const std::size_t at = text.find(out.s);
    out.spans = sub_spans(v.spans, at, at + out.s.size());
  } else if (!v.is_string() && holds_context_text(v)) {
    mark_derived(out);
  }
  return out;
}

// str.strip/lstrip/rstrip with chars (nullptr: whitespace).
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  const bool ws = chars == nullptr || chars->is_none();
  if (ws) {  // fast path: ASCII at both ends decides without decoding
    auto ascii = [](char c) { return (static_cast<unsigned char>(c) & 0x80) == 0; };
    std::size_t b = 0, e = s.size();
    if (left) while (b < e && ascii(s[b]) && is_py_space(static_cast<unsigned char>(s[b]))) ++b;
    if (right) while (e > b && ascii(s[e - 1]) && is_py_space(static_cast<unsigned char>(s[e - 1]))) --e;
    if ((!left || b == e || ascii(s[b])) && (!right || b == e || ascii(s[e - 1]))) return s.substr(b, e - b);
  }
  const auto cps = utf8_decode(s);
  std::vector<std::uint32_t> set;
  if (!ws) {
    if (!chars->is_string()) throw ValueError{"strip arg must be None or str"};
    set = utf8_decode(chars->s);
  }
  auto strip_cp = [&](std::uint32_t cp) {
    return ws ? is_py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  std::size_t b = 0, e = cps.size();
  if (left) while (b < e && strip_cp(cps[b])) ++b;
  if (right) while (e > b && strip_cp(cps[e - 1])) --e;
  std::string out;
  for (std::size_t k = b; k < e; ++k) utf8_append(out, cps[k]);
  return out;
}

List py_split(const std::string& s, const Value* sep_v, std::int64_t maxsplit) {
  List out;
  if (sep_v == nullptr || sep_v->is_none()) {
    const auto cps = utf8_decode(s);
    std::size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && is_py_space(cps[k])) ++k;
      if (k >= cps.size()) break;
      std::string word;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) >= maxsplit) {
        for (std::size_t j = k; j < cps.size(); ++j) utf8_append(word, cps[j]);
        // trailing whitespace of the remainder stays only when it is not at the end
        out.push_back(Value::string(py_strip(word, nullptr, false, true)));
        return out;
      }
      while (k < cps.size() && !is_py_space(cps[k])) utf8_append(word, cps[k++]);
      out.push_back(Value::string(std::move(word)));
    }
    return out;
  }
  if (!sep_v->is_string()) throw ValueError{std::string("must be str or None, not ") + type_name(*sep_v)};
  const std::string& sep = sep_v->s;
  if (sep.empty()) throw ValueError{"empty separator"};
  std::size_t start = 0;
  for (;;) {
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) >= maxsplit) break;
    const std::size_t at = s.find(sep, start);
    if (at == std::string::npos) break;
    out.push_back(Value::string(s.substr(start, at - start)));
    start = at + sep.size();
  }
  out.push_back(Value::string(s.substr(start)));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, std::int64_t count,
                       std::size_t max_bytes) {
  // The result's size first: a short string can expand past any bound.
  std::size_t n = 0;
  if (old.empty()) {
    n = utf8_length(s) + 1;
  } else {
    for (std::size_t at = s.find(old); at != std::string::npos; at = s.find(old, at + old.size())) ++n;
  }
  if (count >= 0) n = std::min<std::size_t>(n, static_cast<std::size_t>(count));
  if (rep.size() > old.size() && n > 0 && (rep.size() - old.size()) > (max_bytes - std::min(max_bytes, s.size())) / n) {
    throw ValueError{"replace: result exceeds the output bound of " + std::to_string(max_bytes) + " bytes"};
  }
  std::string out;
  if (old.empty()) {
    const auto cps = utf8_decode(s);
    std::int64_t done = 0;
    for (std::size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
      }
      if (k < cps.size()) utf8_append(out, cps[k]);
    }
    return out;
  }
  std::size_t start = 0;
  std::int64_t done = 0;
  for (;;) {
    if (count >= 0 && done >= count) break;
    const std::size_t at = s.find(old, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += rep;
    start = at + old.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

// str.splitlines() without keepends.
std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> lines;
  std::string cur;
  const auto cps = utf8_decode(s);
  for (std::size_t k = 0; k < cps.size(); ++k) {
    const std::uint32_t c = cps[k];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
                          c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (boundary) {
      if (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') ++k;
      lines.push_back(std::move(cur));
      cur.clear();
    } else {
      utf8_append(cur, c);
    }
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

std::int64_t py_len(const Value& v) {
  switch (v.kind) {
    case Kind::string: return static_cast<std::int64_t>(utf8_length(v.s));
    case Kind::list:
      if (v.generator) break;
      return static_cast<std::int64_t>(v.list->size());
    case Kind::dict:
      if (v.namespace_) break;
      return static_cast<std::int64_t>(v.dict->items.size());
    case Kind::undefined: return 0;
    default: break;
  }
  throw ValueError{std::string("object of type '") + type_name(v) + "' has no len()"};
}

// jinja2's make_attrgetter: "a.b.0" looked up part by part with getitem semantics.
Value get_attribute_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (attribute.is_integral()) return in.get_item(item, attribute);
  Value cur = item;
  const std::string path = soft_str(attribute);
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) != 0;
    });
    cur = in.get_item(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

// Sort key comparison used by sort, dictsort, unique, min, max: strings compared lower-cased unless
// case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(ascii_lower(v.s));
  return v;
}

Value to_markup(const Value& v) {
  if (v.is_string() && v.markup) return v;
  return Value::string(html_escape(soft_str(v)), true);
}

// printf-style str % args, for the conversions templates use.
std::string percent_format(const std::string& fmt, const List& args) {
  std::string out;
  std::size_t next = 0;
  for (std::size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    if (++k >= fmt.size()) throw ValueError{"incomplete format"};
    const char c = fmt[k];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size()) throw ValueError{"not enough arguments for format string"};
    const Value& a = args[next++];
    switch (c) {
      case 's': out += to_str(a); break;
      case 'r': out += repr(a); break;
      case 'd':
      case 'i':
        if (!a.is_number()) throw ValueError{std::string("%d format: a real number is required, not ") + type_name(a)};
        out += std::to_string(a.kind == Kind::floating ? static_cast<std::int64_t>(a.f) : a.as_int());
        break;
      case 'f': {
        if (!a.is_number()) throw ValueError{"%f format: a real number is required"};
        char buf[64];
        std::snprintf(buf, sizeof buf, "%f", a.as_double());
        out += buf;
        break;
      }
      default: throw ValueError{std::string("unsupported format character '") + c + "'"};
    }
  }
  if (next < args.size()) throw ValueError{"not all arguments converted during string formatting"};
  return out;
}

Value python_round(const Value& v, std::int64_t precision) {
  if (v.is_integral() && precision >= 0) return Value::integer(v.as_int());
  const double x = v.as_double();
  if (!std::isfinite(x)) return Value::floating(x);
  if (precision == 0) return Value::floating(std::nearbyint(x));
  // printf rounds the exact binary value correctly (half-even on ties), as Python's round does.
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<std::int64_t>(precision, 0, 300)), x);
  return Value::floating(std::strtod(buf, nullptr));
}

const Value kNone = Value::none();

List select_items(Interpreter& in, const Value& seq, CallArgs& args, bool by_attr, bool keep) {
  const std::size_t first_test_arg = by_attr ? 1 : 0;
  const Value* attr = by_attr ? args.get(0, "") : nullptr;
  if (by_attr && attr == nullptr) throw ValueError{"Missing parameter for attribute name"};
  std::string test;
  CallArgs test_args;
  test_args.interp = &in;
  if (args.positional.size() > first_test_arg) {
    test = soft_str(args.positional[first_test_arg]);
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(first_test_arg) + 1,
                                args.positional.end());
  }
  test_args.keyword = args.keyword;
  List out;
  if (!truthy(seq)) return out;  // jinja2 yields nothing for a falsy sequence (None included)
  for (const auto& item : in.iterate(seq)) {
    in.count_iteration();
    const Value v = by_attr ? get_attribute_path(in, item, *attr) : item;
    const bool r = test.empty() ? truthy(v) : apply_test(in, test, v, test_args);
    if (r == keep) out.push_back(item);
  }
  return out;
}

Value filter_tojson(Interpreter&, const Value& v, CallArgs& args) {
  args.check("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = bool_arg(args.get(0, "ensure_ascii"), false);
  const Value* indent = args.get(1, "indent");
  if (indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) o.indent_string = indent->s, o.indent = 0;
    else o.indent = static_cast<int>(std::clamp<std::int64_t>(int_arg(indent, 0, "indent"), 0, 64));
  }
  const bool has_indent = indent != nullptr && !indent->is_none();
  o.item_separator = has_indent ? "," : ", ";
  o.key_separator = ": ";
  const Value* separators = args.get(2, "separators");
  if (separators != nullptr && !separators->is_none()) {
    if (separators->kind != Kind::list || separators->list->size() != 2 || !(*separators->list)[0].is_string() ||
        !(*separators->list)[1].is_string())
      throw ValueError{"separators must be a pair of strings"};
    o.item_separator = (*separators->list)[0].s;
    o.key_separator = (*separators->list)[1].s;
  }
  o.sort_keys = bool_arg(args.get(3, "sort_keys"), false);
  return Value::string(to_json(v, o));
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = [] {
    std::unordered_map<std::string, FilterFn> t;
    t["abs"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("abs", {});
      if (v.kind == Kind::floating) return Value::floating(std::fabs(v.f));
      if (!v.is_integral()) throw ValueError{std::string("bad operand type for abs(): '") + type_name(v) + "'"};
      if (v.as_int() == INT64_MIN) throw ValueError{"integer overflow"};
      return Value::integer(std::llabs(v.as_int()));
    };
    t["batch"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("batch", {"linecount", "fill_with"});
      const std::int64_t n = int_arg(a.get(0, "linecount"), 0, "linecount");
      if (n <= 0) throw ValueError{"batch: linecount must be positive"};
      const Value* fill = a.get(1, "fill_with");
      List out, cur;
      for (auto& item : in.iterate(v)) {
        cur.push_back(item);
        if (static_cast<std::int64_t>(cur.size()) == n) {
          out.push_back(Value::make_list(std::move(cur)));
          cur.clear();
        }
      }
      if (!cur.empty()) {
        if (fill != nullptr && !fill->is_none()) {
          while (static_cast<std::int64_t>(cur.size()) < n) cur.push_back(*fill);
        }
        out.push_back(Value::make_list(std::move(cur)));
      }
      return Value::make_generator(std::move(out));
    };
    t["capitalize"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("capitalize", {});
      return keep_markup(v, py_capitalize(soft_str(v)));
    };
    t["default"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("default", {"default_value", "boolean"});
      const Value* d = a.get(0, "default_value");
      if (v.is_undefined() || (bool_arg(a.get(1, "boolean"), false) && !truthy(v))) {
        return d != nullptr ? *d : Value::string("");
      }
      return v;
    };
    t["d"] = t["default"];
    t["dictsort"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("dictsort", {"case_sensitive", "by", "reverse"});
      if (v.kind != Kind::dict || v.namespace_) throw ValueError{"dictsort: can only sort a mapping"};
      const bool cs = bool_arg(a.get(0, "case_sensitive"), false);
      const std::string by = str_arg(a.get(1, "by"), "key");
      if (by != "key" && by != "value") throw ValueError{"You can only sort by either 'key' or 'value'"};
      const bool rev = bool_arg(a.get(2, "reverse"), false);
      List pairs;
      for (const auto& [k, x] : v.dict->items) pairs.push_back(Value::make_list({k, x}, true));
      const std::size_t pos = by == "key" ? 0 : 1;
      std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& l, const Value& r) {
        const int c = compare(sort_key((*l.list)[pos], cs), sort_key((*r.list)[pos], cs));
        return rev ? c > 0 : c < 0;
      });
      return Value::make_list(std::move(pairs));
    };
    t["escape"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("escape", {});
      return to_markup(v);
    };
    t["e"] = t["escape"];
    t["first"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("first", {});
      List items = in.iterate(v);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    t["last"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("last", {});
      if (v.kind == Kind::list && v.generator) throw ValueError{"'generator' object is not reversible"};
      List items = in.iterate(v);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    t["float"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("float", {"default"});
      const Value* d = a.get(0, "default");
      if (v.is_number()) return Value::floating(v.as_double());
      if (v.is_string()) {
        const std::string s = py_strip(v.s, nullptr, true, true);
        char* end = nullptr;
        const double x = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size()) return Value::floating(x);
      }
      return d != nullptr ? *d : Value::floating(0.0);
    };
    t["format"] = [](Interpreter&, const Value& v, CallArgs& a) {
      if (!a.keyword.empty()) throw ValueError{"format: keyword arguments are not supported"};
      return Value::string(percent_format(soft_str(v), a.positional));
    };
    t["indent"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("indent", {"width", "first", "blank"});
      const Value* w = a.get(0, "width");
      std::string indention;
      if (w != nullptr && w->is_string()) indention = w->s;
      else indention.assign(static_cast<std::size_t>(std::clamp<std::int64_t>(int_arg(w, 4, "width"), 0, 1024)), ' ');
      const bool first = bool_arg(a.get(1, "first"), false);
      const bool blank = bool_arg(a.get(2, "blank"), false);
      std::string s = soft_str(v) + "\n";
      auto lines = py_splitlines(s);
      if (lines.size() * indention.size() > in.options().limits.max_output_bytes) {
        throw ValueError{"indent: result exceeds the output bound"};
      }
      std::string rv;
      if (blank) {
        for (std::size_t k = 0; k < lines.size(); ++k) {
          if (k) rv += "\n" + indention;
          rv += lines[k];
        }
      } else if (!lines.empty()) {
        rv = lines[0];
        for (std::size_t k = 1; k < lines.size(); ++k) {
          rv += "\n";
          if (!lines[k].empty()) rv += indention;
          rv += lines[k];
        }
      }
      if (first) rv = indention + rv;
      return keep_markup(v, std::move(rv));
    };
    t["int"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("int", {"default", "base"});
      const Value* d = a.get(0, "default");
      const std::int64_t base = int_arg(a.get(1, "base"), 10, "base");
      if (v.is_integral()) return Value::integer(v.as_int());
      if (v.kind == Kind::floating && std::isfinite(v.f) && std::fabs(v.f) < 9.2e18) {
        return Value::integer(static_cast<std::int64_t>(std::trunc(v.f)));
      }
      if (v.is_string()) {
        std::string s = py_strip(v.s, nullptr, true, true);
        s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
        errno = 0;
        char* end = nullptr;
        const long long x = std::strtoll(s.c_str(), &end, static_cast<int>(base));
        if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::integer(x);
        const double f = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(f) && std::fabs(f) < 9.2e18) {
          return Value::integer(static_cast<std::int64_t>(std::trunc(f)));
        }
      }
      return d != nullptr ? *d : Value::integer(0);
    };
    t["items"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("items", {});
      if (v.is_undefined()) return Value::make_generator({});
      if (v.kind != Kind::dict || v.namespace_) throw ValueError{"Can only get item pairs from a mapping."};
      List pairs;
      for (const auto& [k, x] : v.dict->items) pairs.push_back(Value::make_list({k, x}, true));
      return Value::make_generator(std::move(pairs));
    };
    t["join"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("join", {"d", "attribute"});
      const Value* sep_arg = a.get(0, "d");
      const Value sep = sep_arg != nullptr ? *sep_arg : Value::string("");
      const Value* attr = a.get(1, "attribute");
      Value out = Value::string("");
      bool first = true;
      for (const auto& item : in.iterate(v)) {
        if (!first) append_joined(out, sep);
        first = false;
        append_joined(out, attr != nullptr && !attr->is_none() ? get_attribute_path(in, item, *attr) : item);
        in.charge(sep.s.size());
      }
      in.charge(out.s.size());
      return out;
    };
    t["length"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("length", {});
      return Value::integer(py_len(v));
    };
    t["count"] = t["length"];
    t["list"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("list", {});
      return Value::make_list(in.iterate(v));
    };
    t["lower"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("lower", {});
      return keep_markup(v, ascii_lower(soft_str(v)));
    };
    t["upper"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("upper", {});
      return keep_markup(v, ascii_upper(soft_str(v)));
    };
    t["title"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("title", {});
      return keep_markup(v, jinja_title(soft_str(v)));
    };
    t["map"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      List out;
      const Value* attr = nullptr;
      for (const auto& [k, x] : a.keyword) {
        if (k == "attribute") attr = &x;
      }
      if (attr != nullptr) {
        const Value* dflt = nullptr;
        for (const auto& [k, x] : a.keyword) {
          if (k == "default") dflt = &x;
          else if (k != "attribute") throw ValueError{"map: unexpected keyword argument '" + k + "'"};
        }
        if (!truthy(v)) return Value::make_generator({});
        for (const auto& item : in.iterate(v)) {
          Value x = get_attribute_path(in, item, *attr);
          if (x.is_undefined() && dflt != nullptr) x = *dflt;
          out.push_back(std::move(x));
        }
        return Value::make_generator(std::move(out));
      }
      if (a.positional.empty()) throw ValueError{"map requires a filter argument"};
      const std::string name = soft_str(a.positional[0]);
      if (!truthy(v)) return Value::make_generator({});
      CallArgs rest;
      rest.interp = &in;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      rest.keyword = a.keyword;
      for (const auto& item : in.iterate(v)) {
        in.count_iteration();
        CallArgs copy = rest;
        out.push_back(apply_filter(in, name, item, copy));
      }
      return Value::make_generator(std::move(out));
    };
    auto minmax = [](bool want_max) {
      return [want_max](Interpreter& in, const Value& v, CallArgs& a) {
        a.check(want_max ? "max" : "min", {"case_sensitive", "attribute"});
        const bool cs = bool_arg(a.get(0, "case_sensitive"), false);
        const Value* attr = a.get(1, "attribute");
        List items = in.iterate(v);
        if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
        std::size_t best = 0;
        auto key = [&](const Value& x) {
          return sort_key(attr != nullptr && !attr->is_none() ? get_attribute_path(in, x, *attr) : x, cs);
        };
        for (std::size_t k = 1; k < items.size(); ++k) {
          const int c = compare(key(items[k]), key(items[best]));
          if (want_max ? c > 0 : c < 0) best = k;
        }
        return items[best];
      };
    };
    t["max"] = minmax(true);
    t["min"] = minmax(false);
    t["reject"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      return Value::make_generator(select_items(in, v, a, false, false));
    };
    t["select"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      return Value::make_generator(select_items(in, v, a, false, true));
    };
    t["rejectattr"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      return Value::make_generator(select_items(in, v, a, true, false));
    };
    t["selectattr"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      return Value::make_generator(select_items(in, v, a, true, true));
    };
    t["replace"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("replace", {"old", "new", "count"});
      const Value* old_v = a.get(0, "old");
      const Value* new_v = a.get(1, "new");
      if (old_v == nullptr || new_v == nullptr) throw ValueError{"replace() missing required arguments"};
      std::string out = py_replace(soft_str(v), soft_str(*old_v), soft_str(*new_v),
                                   int_arg(a.get(2, "count"), -1, "count"), in.options().limits.max_output_bytes);
      if (out.size() > in.options().limits.max_output_bytes) throw ValueError{"string exceeds the output bound"};
      in.charge(out.size());
      return Value::string(std::move(out));
    };
    t["reverse"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("reverse", {});
      if (v.is_string()) {
        auto cps = utf8_decode(v.s);
        std::string out;
        for (auto it = cps.rbegin(); it != cps.rend(); ++it) utf8_append(out, *it);
        return keep_markup(v, std::move(out));
      }
      if (v.kind == Kind::list && v.generator) throw ValueError{"'generator' object is not reversible"};
      List items = in.iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::make_generator(std::move(items));
    };
    t["round"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("round", {"precision", "method"});
      const std::int64_t precision = int_arg(a.get(0, "precision"), 0, "precision");
      const std::string method = str_arg(a.get(1, "method"), "common");
      if (!v.is_number()) throw ValueError{std::string("type ") + type_name(v) + " doesn't define __round__ method"};
      if (method == "common") return python_round(v, precision);
      if (method != "ceil" && method != "floor") throw ValueError{"method must be common, ceil or floor"};
      const double scale = std::pow(10.0, static_cast<double>(precision));
      const double x = v.as_double() * scale;
      return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
    };
    t["safe"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("safe", {});
      return Value::string(soft_str(v), true);
    };
    t["sort"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("sort", {"reverse", "case_sensitive", "attribute"});
      const bool rev = bool_arg(a.get(0, "reverse"), false);
      const bool cs = bool_arg(a.get(1, "case_sensitive"), false);
      const Value* attr = a.get(2, "attribute");
      List items = in.iterate(v);
      auto key = [&](const Value& x) {
        return sort_key(attr != nullptr && !attr->is_none() ? get_attribute_path(in, x, *attr) : x, cs);
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& l, const Value& r) {
        const int c = compare(key(l), key(r));
        return rev ? c > 0 : c < 0;
      });
      return Value::make_list(std::move(items));
    };
    t["string"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("string", {});
      return v.is_string() ? v : Value::string(to_str(v));
    };
    t["sum"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("sum", {"attribute", "start"});
      const Value* attr = a.get(0, "attribute");
      const Value* start = a.get(1, "start");
      Value total = start != nullptr ? *start : Value::integer(0);
      for (const auto& item : in.iterate(v)) {
        const Value x = attr != nullptr && !attr->is_none() ? get_attribute_path(in, item, *attr) : item;
        if (!x.is_number() || !total.is_number()) {
          throw ValueError{std::string("unsupported operand type(s) for +: '") + type_name(total) + "' and '" +
                           type_name(x) + "'"};
        }
        if (x.is_integral() && total.is_integral()) {
          std::int64_t r;
          if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) throw ValueError{"integer overflow"};
          total = Value::integer(r);
        } else {
          total = Value::floating(total.as_double() + x.as_double());
        }
      }
      return total;
    };
    t["trim"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("trim", {"chars"});
      return stripped(v, a.get(0, "chars"), true, true);
    };
    t["tojson"] = filter_tojson;
    t["unique"] = [](Interpreter& in, const Value& v, CallArgs& a) {
      a.check("unique", {"case_sensitive", "attribute"});
      const bool cs = bool_arg(a.get(0, "case_sensitive"), false);
      const Value* attr = a.get(1, "attribute");
      List seen, out;
      for (const auto& item : in.iterate(v)) {
        in.count_iteration();
        const Value key =
            sort_key(attr != nullptr && !attr->is_none() ? get_attribute_path(in, item, *attr) : item, cs);
        if (key.kind == Kind::list && !key.tuple) throw ValueError{"unhashable type: 'list'"};
        if (key.kind == Kind::dict) throw ValueError{"unhashable type: 'dict'"};
        bool dup = false;
        for (const auto& s : seen) {
          if (equals(s, key)) { dup = true; break; }
        }
        if (!dup) {
          seen.push_back(key);
          out.push_back(item);
        }
      }
      return Value::make_generator(std::move(out));
    };
    t["wordcount"] = [](Interpreter&, const Value& v, CallArgs& a) {
      a.check("wordcount", {});
      const std::string s = soft_str(v);
      std::int64_t n = 0;
      bool in_word = false;
      for (char c : s) {
        const bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (static_cast<unsigned char>(c) & 0x80);
        if (w && !in_word) ++n;
        in_word = w;
      }
      return Value::integer(n);
    };
    return t;
  }();
  return table;
}

bool is_lower(const std::string& s) {
  bool cased = false;
  for (char c : s) {
    if (std::isupper(static_cast<unsigned char>(c))) return false;
    if (std::islower(static_cast<unsigned char>(c))) cased = true;
  }
  return cased;
}
bool is_upper(const std::string& s) {
  bool cased = false;
  for (char c : s) {
    if (std::islower(static_cast<unsigned char>(c))) return false;
    if (std::isupper(static_cast<unsigned char>(c))) cased = true;
  }
  return cased;
}

using TestFn = std::function<bool(Interpreter&, const Value&, CallArgs&)>;

const Value& required_arg(CallArgs& a, const char* test) {
  const Value* v = a.get(0, "other");
  if (v == nullptr) v = a.get(0, "value");
  if (v == nullptr) v = a.get(0, "seq");
  if (v == nullptr) v = a.get(0, "num");
  if (v == nullptr) throw ValueError{std::string("test '") + test + "' needs an argument"};
  return *v;
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = [] {
    std::unordered_map<std::string, TestFn> t;
    t["defined"] = [](Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); };
    t["none"] = [](Interpreter&, const Value& v, CallArgs&) { return v.is_none(); };
    t["boolean"] = [](Interpreter&, const Value& v, CallArgs&) { return v.kind == Kind::boolean; };
    t["true"] = [](Interpreter&, const Value& v, CallArgs&) { return v.kind == Kind::boolean && v.b; };
    t["false"] = [](Interpreter&, const Value& v, CallArgs&) { return v.kind == Kind::boolean && !v.b; };
    t["integer"] = [](Interpreter&, const Value& v, CallArgs&) { return v.kind == Kind::integer; };
    t["float"] = [](Interpreter&, const Value& v, CallArgs&) { return v.kind == Kind::floating; };
    t["number"] = [](Interpreter&, const Value& v, CallArgs&) { return v.is_number(); };
    t["string"] = [](Interpreter&, const Value& v, CallArgs&) { return v.is_string(); };
    t["mapping"] = [](Interpreter&, const Value& v, CallArgs&) { return v.kind == Kind::dict && !v.namespace_; };
    t["iterable"] = [](Interpreter&, const Value& v, CallArgs&) {
      return v.is_undefined() || v.is_string() || v.kind == Kind::list || (v.kind == Kind::dict && !v.namespace_);
    };
    t["sequence"] = t["iterable"];
    t["callable"] = [](Interpreter&, const Value& v, CallArgs&) { return v.kind == Kind::function; };
    t["escaped"] = [](Interpreter&, const Value& v, CallArgs&) { return v.is_string() && v.markup; };
    t["lower"] = [](Interpreter&, const Value& v, CallArgs&) { return is_lower(soft_str(v)); };
    t["upper"] = [](Interpreter&, const Value& v, CallArgs&) { return is_upper(soft_str(v)); };
    auto int_of = [](const Value& v, const char* test) {
      if (!v.is_number()) throw ValueError{std::string("test '") + test + "' needs a number, got " + type_name(v)};
      return v;
    };
    t["odd"] = [int_of](Interpreter&, const Value& v, CallArgs&) {
      const Value n = int_of(v, "odd");
      return n.is_integral() ? (n.as_int() % 2) != 0 : std::fmod(n.f, 2.0) != 0.0;
    };
    t["even"] = [int_of](Interpreter&, const Value& v, CallArgs&) {
      const Value n = int_of(v, "even");
      return n.is_integral() ? (n.as_int() % 2) == 0 : std::fmod(n.f, 2.0) == 0.0;
    };
    t["divisibleby"] = [int_of](Interpreter&, const Value& v, CallArgs& a) {
      const Value n = int_of(v, "divisibleby");
      const Value d = int_of(required_arg(a, "divisibleby"), "divisibleby");
      if (d.as_double() == 0.0) throw ValueError{"integer division or modulo by zero"};
      if (n.is_integral() && d.is_integral()) return n.as_int() % d.as_int() == 0;
      return std::fmod(n.as_double(), d.as_double()) == 0.0;
    };
    t["sameas"] = [](Interpreter&, const Value& v, CallArgs& a) {
      const Value& o = required_arg(a, "sameas");
      if (v.kind != o.kind) return false;
      switch (v.kind) {
        case Kind::none:
        case Kind::undefined: return true;
        case Kind::boolean: return v.b == o.b;
        case Kind::list: return v.list == o.list;
        case Kind::dict: return v.dict == o.dict;
        case Kind::function: return v.fn == o.fn;
        default: return equals(v, o);
      }
    };
    t["eq"] = [](Interpreter&, const Value& v, CallArgs& a) { return equals(v, required_arg(a, "eq")); };
    t["equalto"] = t["eq"];
    t["=="] = t["eq"];
    t["ne"] = [](Interpreter&, const Value& v, CallArgs& a) { return !equals(v, required_arg(a, "ne")); };
    t["!="] = t["ne"];
    auto ordered = [](const char* name, std::function<bool(int)> ok) {
      return [name, ok](Interpreter&, const Value& v, CallArgs& a) {
        const Value& o = required_arg(a, name);
        if (v.is_undefined() || o.is_undefined()) throw ValueError{"undefined value in comparison"};
        return ok(compare(v, o));
      };
    };
    t["lt"] = ordered("lt", [](int c) { return c < 0; });
    t["lessthan"] = t["lt"];
    t["<"] = t["lt"];
    t["le"] = ordered("le", [](int c) { return c <= 0; });
    t["<="] = t["le"];
    t["gt"] = ordered("gt", [](int c) { return c > 0; });
    t["greaterthan"] = t["gt"];
    t[">"] = t["gt"];
    t["ge"] = ordered("ge", [](int c) { return c >= 0; });
    t[">="] = t["ge"];
    t["in"] = [](Interpreter&, const Value& v, CallArgs& a) {
      const Value& seq = required_arg(a, "in");
      switch (seq.kind) {
        case Kind::string:
          if (!v.is_string()) throw ValueError{"'in <string>' requires string as left operand"};
          return seq.s.find(v.s) != std::string::npos;
        case Kind::list:
          return std::any_of(seq.list->begin(), seq.list->end(), [&](const Value& x) { return equals(x, v); });
        case Kind::dict: return seq.dict->find(v) != nullptr;
        case Kind::undefined: return false;
        default: throw ValueError{std::string("argument of type '") + type_name(seq) + "' is not iterable"};
      }
    };
    return t;
  }();
  return table;
}

[[noreturn]] void unsafe_method(const Value& obj, const std::string& name) {
  throw ValueError{"access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe."};
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args) {
  args.interp = &in;
  const auto& table = filters();
  const auto it = table.find(name);
  if (it == table.end()) throw ValueError{"no filter named '" + name + "'"};
  Value result = it->second(in, operand, args);
  // trim and join keep exact track of context text; what any other filter builds from it is context text.
  if (name != "trim" && name != "join") {
    if (holds_context_text(operand) || args_hold_context_text(args)) mark_derived(result);
  }
  return result;
}

bool has_test(const std::string& name) { return tests().count(name) != 0; }

bool apply_test(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args) {
  args.interp = &in;
  const auto& table = tests();
  const auto it = table.find(name);
  if (it == table.end()) throw ValueError{"no test named '" + name + "'"};
  return it->second(in, operand, args);
}

Value bound_method(Interpreter& in, const Value& obj, const std::string& name) {
  (void)in;
  if (obj.kind != Kind::string && obj.kind != Kind::dict && obj.kind != Kind::list) return Value::undefined();
  // Every method name is lower-case ASCII letters; anything else (most dict keys) is no method.
  if (name.empty() || name.size() > 10 ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
    return Value::undefined();
  const std::string qualified = std::string(type_name(obj)) + "." + name;
  if (obj.is_string()) {
    const Value self = obj;
    auto method = [&](std::function<Value(const Value&, CallArgs&)> fn) {
      return Value::function(qualified, [self, fn](CallArgs& a) { return fn(self, a); });
    };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool left = name != "rstrip", right = name != "lstrip";
      Value m = method([left, right, name](const Value& s, CallArgs& a) {
        a.check(name, {"chars"});
        return stripped(s, a.get(0, "chars"), left, right);
      });
      m.fn->exact_spans = true;
      return m;
    }
    if (name == "split") {
      return method([](const Value& s, CallArgs& a) {
        a.check("split", {"sep", "maxsplit"});
        List parts = py_split(s.s, a.get(0, "sep"), int_arg(a.get(1, "maxsplit"), -1, "maxsplit"));
        a.interp->check_collection(parts.size());
        return Value::make_list(std::move(parts));
      });
    }
    if (name == "startswith" || name == "endswith") {
      const bool starts = name == "startswith";
      return method([starts, name](const Value& s, CallArgs& a) {
        a.check(name, {"prefix"});
        const Value* p = a.get(0, "prefix");
        if (p == nullptr) throw ValueError{name + "() takes at least 1 argument (0 given)"};
        auto one = [&](const Value& x) {
          if (!x.is_string()) throw ValueError{name + " first arg must be str or a tuple of str"};
          if (x.s.size() > s.s.size()) return false;
          return starts ? s.s.compare(0, x.s.size(), x.s) == 0
                        : s.s.compare(s.s.size() - x.s.size(), x.s.size(), x.s) == 0;
        };
        if (p->kind == Kind::list && p->tuple) {
          return Value::boolean(std::any_of(p->list->begin(), p->list->end(), one));
        }
        return Value::boolean(one(*p));
      });
    }
    if (name == "upper") return method([](const Value& s, CallArgs& a) { a.check("upper", {}); return keep_markup(s, ascii_upper(s.s)); });
    if (name == "lower") return method([](const Value& s, CallArgs& a) { a.check("lower", {}); return keep_markup(s, ascii_lower(s.s)); });
    if (name == "title") return method([](const Value& s, CallArgs& a) { a.check("title", {}); return keep_markup(s, py_title(s.s)); });
    if (name == "capitalize") {
      return method([](const Value& s, CallArgs& a) { a.check("capitalize", {}); return keep_markup(s, py_capitalize(s.s)); });
    }
    if (name == "replace") {
      return method([](const Value& s, CallArgs& a) {
        a.check("replace", {"old", "new", "count"});
        const Value* o = a.get(0, "old");
        const Value* n = a.get(1, "new");
        if (o == nullptr || n == nullptr || !o->is_string() || !n->is_string()) {
          throw ValueError{"replace() arguments must be str"};
        }
        std::string out = py_replace(s.s, o->s, n->s, int_arg(a.get(2, "count"), -1, "count"),
                                     a.interp->options().limits.max_output_bytes);
        if (out.size() > a.interp->options().limits.max_output_bytes) throw ValueError{"string exceeds the output bound"};
        a.interp->charge(out.size());
        return keep_markup(s, std::move(out));
      });
    }
    if (name == "find" || name == "count" || name == "rfind") {
      return method([name](const Value& s, CallArgs& a) {
        a.check(name, {"sub"});
        const Value* sub = a.get(0, "sub");
        if (sub == nullptr || !sub->is_string()) throw ValueError{name + "() argument must be str"};
        if (name == "count") {
          if (sub->s.empty()) return Value::integer(static_cast<std::int64_t>(utf8_length(s.s)) + 1);
          std::int64_t n = 0;
          for (std::size_t at = s.s.find(sub->s); at != std::string::npos; at = s.s.find(sub->s, at + sub->s.size())) ++n;
          return Value::integer(n);
        }
        const std::size_t at = name == "find" ? s.s.find(sub->s) : s.s.rfind(sub->s);
        if (at == std::string::npos) return Value::integer(-1);
        return Value::integer(static_cast<std::int64_t>(utf8_length(std::string_view(s.s).substr(0, at))));
      });
    }
    if (name == "join") {
      Value m = method([](const Value& s, CallArgs& a) {
        a.check("join", {"iterable"});
        const Value* it = a.get(0, "iterable");
        if (it == nullptr) throw ValueError{"join() takes exactly one argument"};
        Value out = Value::string("");
        bool first = true;
        for (const auto& x : a.interp->iterate(*it)) {
          if (!x.is_string()) throw ValueError{std::string("sequence item: expected str instance, ") + type_name(x) + " found"};
          if (!first) append_joined(out, s);
          first = false;
          append_joined(out, x);
        }
        a.interp->charge(out.s.size());
        return out;
      });
      m.fn->exact_spans = true;
      return m;
    }
    if (name == "format") {  // the sandbox's str.format: {} {0} {name}, {{ and }}; no format specs
      return method([](const Value& s, CallArgs& a) {
        std::string out;
        std::size_t next = 0;
        bool automatic = false, manual = false;
        for (std::size_t k = 0; k < s.s.size(); ++k) {
          const char c = s.s[k];
          if (c == '}') {
            if (k + 1 < s.s.size() && s.s[k + 1] == '}') { out += '}'; ++k; continue; }
            throw ValueError{"Single '}' encountered in format string"};
          }
          if (c != '{') { out += c; continue; }
          if (k + 1 < s.s.size() && s.s[k + 1] == '{') { out += '{'; ++k; continue; }
          const std::size_t close = s.s.find('}', k);
          if (close == std::string::npos) throw ValueError{"Single '{' encountered in format string"};
          const std::string field = s.s.substr(k + 1, close - k - 1);
          if (field.find_first_of(":!.[") != std::string::npos) {
            throw ValueError{"format: field '" + field + "' uses a conversion, spec or lookup, which is not supported"};
          }
          const Value* v = nullptr;
          const bool numbered = !field.empty() && std::isdigit(static_cast<unsigned char>(field[0]));
          (field.empty() ? automatic : numbered ? manual : automatic) |= field.empty() || numbered;
          if (automatic && manual) {
            throw ValueError{"cannot switch from manual field specification to automatic field numbering"};
          }
          if (field.empty()) {
            v = next < a.positional.size() ? &a.positional[next] : nullptr;
            ++next;
          } else if (std::all_of(field.begin(), field.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)) != 0; })) {
            const auto index = static_cast<std::size_t>(std::stoull(field.substr(0, 9)));
            v = index < a.positional.size() ? &a.positional[index] : nullptr;
          } else {
            for (const auto& [kw, x] : a.keyword) {
              if (kw == field) v = &x;
            }
            if (v == nullptr) throw ValueError{"KeyError: '" + field + "'"};
          }
          if (v == nullptr) throw ValueError{"Replacement index out of range for positional args tuple"};
          out += to_str(*v);
          k = close;
        }
        a.interp->charge(out.size());
        return keep_markup(s, std::move(out));
      });
    }
    if (name == "splitlines") {
      return method([](const Value& s, CallArgs& a) {
        a.check("splitlines", {});
        List out;
        for (auto& line : py_splitlines(s.s)) out.push_back(Value::string(std::move(line)));
        return Value::make_list(std::move(out));
      });
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "islower" ||
        name == "isupper") {
      return method([name](const Value& s, CallArgs& a) {
        a.check(name, {});
        if (name == "islower") return Value::boolean(is_lower(s.s));
        if (name == "isupper") return Value::boolean(is_upper(s.s));
        const auto cps = utf8_decode(s.s);
        if (cps.empty()) return Value::boolean(false);
        for (std::uint32_t cp : cps) {
          const bool ok = name == "isspace" ? is_py_space(cp)
                          : cp >= 0x80     ? name != "isdigit"
                          : name == "isdigit" ? std::isdigit(static_cast<int>(cp)) != 0
                          : name == "isalpha" ? std::isalpha(static_cast<int>(cp)) != 0
                                              : std::isalnum(static_cast<int>(cp)) != 0;
          if (!ok) return Value::boolean(false);
        }
        return Value::boolean(true);
      });
    }
    return Value::undefined();
  }
  if (obj.kind == Kind::dict && !obj.namespace_) {
    const Value self = obj;
    auto method = [&](std::function<Value(const Value&, CallArgs&)> fn) {
      return Value::function(qualified, [self, fn](CallArgs& a) { return fn(self, a); });
    };
    if (name == "get") {
      return method([](const Value& d, CallArgs& a) {
        a.check("get", {"key", "default"});
        const Value* key = a.get(0, "key");
        if (key == nullptr) throw ValueError{"get expected at least 1 argument, got 0"};
        const Value* found = d.dict->find(*key);
        if (found != nullptr) return *found;
        const Value* dflt = a.get(1, "default");
        return dflt != nullptr ? *dflt : Value::none();
      });
    }
    if (name == "items" || name == "keys" || name == "values") {
      return method([name](const Value& d, CallArgs& a) {
        a.check(name, {});
        List out;
        for (const auto& [k, x] : d.dict->items) {
          if (name == "items") out.push_back(Value::make_list({k, x}, true));
          else out.push_back(name == "keys" ? k : x);
        }
        return Value::make_list(std::move(out));
      });
    }
    if (name == "copy") {
      return method([](const Value& d, CallArgs& a) {
        a.check("copy", {});
        Value c = Value::make_dict();
        *c.dict = *d.dict;
        return c;
      });
    }
    if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear") {
      return Value::function(qualified, [self, name](CallArgs&) -> Value { unsafe_method(self, name); });
    }
    return Value::undefined();
  }
  if (obj.kind == Kind::list) {
    const Value self = obj;
    if (name == "index" || name == "count") {
      return Value::function(qualified, [self, name](CallArgs& a) {
        a.check(name, {"value"});
        const Value* x = a.get(0, "value");
        if (x == nullptr) throw ValueError{name + "() takes exactly one argument"};
        std::int64_t n = 0;
        for (std::size_t k = 0; k < self.list->size(); ++k) {
          if (equals((*self.list)[k], *x)) {
            if (name == "index") return Value::integer(static_cast<std::int64_t>(k));
            ++n;
          }
        }
        if (name == "index") throw ValueError{repr(*x) + " is not in list"};
        return Value::integer(n);
      });
    }
    if (!obj.tuple && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                       name == "remove" || name == "reverse" || name == "sort" || name == "clear")) {
      return Value::function(qualified, [self, name](CallArgs&) -> Value { unsafe_method(self, name); });
    }
    return Value::undefined();
  }
  return Value::undefined();
}

void add_globals(Interpreter& in, Scope& scope) {
  scope.set("range", Value::function("range", [](CallArgs& a) {
    if (!a.keyword.empty()) throw ValueError{"range() takes no keyword arguments"};
    if (a.positional.empty() || a.positional.size() > 3) {
      throw ValueError{"range expected 1 to 3 arguments, got " + std::to_string(a.positional.size())};
    }
    for (const auto& v : a.positional) {
      if (!v.is_integral()) throw ValueError{std::string("'") + type_name(v) + "' object cannot be interpreted as an integer"};
    }
    std::int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].as_int();
    } else {
      start = a.positional[0].as_int();
      stop = a.positional[1].as_int();
      if (a.positional.size() == 3) step = a.positional[2].as_int();
    }
    if (step == 0) throw ValueError{"range() arg 3 must not be zero"};
    // The sandbox's MAX_RANGE.
    const double n = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
    if (n > 100000) throw ValueError{"Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."};
    List out;
    if (step > 0) for (std::int64_t k = start; k < stop; k += step) out.push_back(Value::integer(k));
    else for (std::int64_t k = start; k > stop; k += step) out.push_back(Value::integer(k));
    a.interp->check_collection(out.size());
    return Value::make_list(std::move(out));
  }));
  auto dict_from_args = [](CallArgs& a, const char* fn) {
    Value d = Value::make_dict();
    if (a.positional.size() > 1) throw ValueError{std::string(fn) + " expected at most 1 positional argument"};
    if (a.positional.size() == 1) {
      const Value& src = a.positional[0];
      if (src.kind == Kind::dict) {
        for (const auto& [k, v] : src.dict->items) d.dict->set(k, v);
      } else {
        for (const auto& pair : a.interp->iterate(src)) {
          if (pair.kind != Kind::list || pair.list->size() != 2) {
            throw ValueError{std::string(fn) + ": sequence elements must be pairs"};
          }
          d.dict->set((*pair.list)[0], (*pair.list)[1]);
        }
      }
    }
    for (auto& [k, v] : a.keyword) d.dict->set(Value::string(k), v);
    return d;
  };
  scope.set("namespace", Value::function("namespace", [dict_from_args](CallArgs& a) {
    Value d = dict_from_args(a, "namespace");
    d.namespace_ = true;
    a.interp->track_namespace(d.dict);
    return d;
  }));
  scope.set("dict", Value::function("dict", [dict_from_args](CallArgs& a) { return dict_from_args(a, "dict"); }));
  scope.set("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
    const Value* msg = a.get(0, "message");
    throw ValueError{msg != nullptr ? soft_str(*msg) : std::string("raise_exception called")};
  }));
  const RenderOptions* options = &in.options();
  scope.set("strftime_now", Value::function("strftime_now", [options](CallArgs& a) {
    a.check("strftime_now", {"format"});
    const Value* fmt = a.get(0, "format");
    if (fmt == nullptr || !fmt->is_string()) throw ValueError{"strftime_now() needs a format string"};
    const auto now = options->now.value_or(std::chrono::system_clock::now());
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    localtime_r(&t, &tm);
    std::string buf(256 + fmt->s.size() * 8, '\0');
    const std::size_t n = fmt->s.empty() ? 0 : std::strftime(buf.data(), buf.size(), fmt->s.c_str(), &tm);
    buf.resize(n);
    return Value::string(std::move(buf));
  }));
}

}  // namespace pie::jinja
