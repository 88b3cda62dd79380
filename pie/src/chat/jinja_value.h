// Values of the Jinja interpreter, with Python's semantics: truthiness, str() and repr(), ==, ordering,
// json.dumps (as HF's tojson calls it). Lists and dicts are shared by reference, as Python objects are.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pie/chat_template.h"

namespace pie::jinja {

struct Value;
struct Dict;
struct CallArgs;
using List = std::vector<Value>;
using ListPtr = std::shared_ptr<List>;
using DictPtr = std::shared_ptr<Dict>;

// Byte ranges [begin, end) of a string that are context text: text of the render's variables that the
// caller asked to track (a chat's messages and tools, given by users), sorted and disjoint. A prompt's
// tokenizer must not read special-token text there (ChatTemplate::render_tracked).
struct Span {
  std::uint32_t begin = 0, end = 0;
};
using Spans = std::vector<Span>;

// A native function or a bound method or a macro; receives evaluated arguments.
struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
  // Its result's spans are exact (a macro's output): the call does not mark them itself.
  bool exact_spans = false;
  // A bound method of a value that holds context text: what it builds is context text.
  bool bound_to_context_text = false;
};
using FunctionPtr = std::shared_ptr<Function>;

enum class Kind : std::uint8_t { undefined, none, boolean, integer, floating, string, list, dict, function };

struct Value {
  Kind kind = Kind::undefined;
  bool markup = false;     // string: markupsafe.Markup (from |safe, |escape): `+` escapes plain operands
  bool tuple = false;      // list: a Python tuple (repr with parentheses)
  bool namespace_ = false; // dict: a namespace() object (attribute assignment allowed)
  bool generator = false;  // list: a lazy iterator (from map, select, ...): truthy, no len(), not JSON
  bool b = false;
  std::int64_t i = 0;
  double f = 0.0;
  std::string s;           // string; undefined: the name that was looked up (for messages)
  Spans spans;             // string: the bytes that are context text
  ListPtr list;
  DictPtr dict;
  FunctionPtr fn;

  Value() = default;
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) noexcept = default;
  // Releases nested lists and dicts iteratively: a template can nest values deeper (one wrap per loop
  // iteration) than a recursive destructor could unwind on the stack.
  ~Value() {
    if ((list && list.use_count() == 1) || (dict && dict.use_count() == 1)) release_nested();
  }

  static Value undefined(std::string hint = {}) {
    Value v;
    v.s = std::move(hint);
    return v;
  }
  static Value none() { Value v; v.kind = Kind::none; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::boolean; v.b = x; return v; }
  static Value integer(std::int64_t x) { Value v; v.kind = Kind::integer; v.i = x; return v; }
  static Value floating(double x) { Value v; v.kind = Kind::floating; v.f = x; return v; }
  static Value string(std::string x, bool markup = false) {
    Value v; v.kind = Kind::string; v.s = std::move(x); v.markup = markup; return v;
  }
  static Value make_list(List items = {}, bool tuple = false) {
    Value v; v.kind = Kind::list; v.list = std::make_shared<List>(std::move(items)); v.tuple = tuple;
    return v;
  }
  static Value make_generator(List items) {
    Value v = make_list(std::move(items));
    v.generator = true;
    return v;
  }
  static Value make_dict();
  static Value function(std::string name, std::function<Value(CallArgs&)> call) {
    Value v; v.kind = Kind::function;
    v.fn = std::make_shared<Function>(Function{std::move(name), std::move(call)});
    return v;
  }

  void release_nested();

  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_none() const { return kind == Kind::none; }
  bool is_string() const { return kind == Kind::string; }
  bool is_number() const { return kind == Kind::integer || kind == Kind::floating || kind == Kind::boolean; }
  bool is_integral() const { return kind == Kind::integer || kind == Kind::boolean; }  // Python int, incl. bool
  std::int64_t as_int() const { return kind == Kind::boolean ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::floating ? f : static_cast<double>(as_int()); }
};

// Insertion-ordered dict; keys are Values compared with Python ==.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

inline Value Value::make_dict() {
  Value v; v.kind = Kind::dict; v.dict = std::make_shared<Dict>(); return v;
}

// Thrown by value operations; the interpreter adds the template position and rethrows as TemplateError.
struct ValueError {
  std::string message;
};

const char* type_name(const Value& v);             // Python's type name: 'str', 'int', 'dict', ...
bool truthy(const Value& v);                       // Python bool()
std::string to_str(const Value& v);                // Python str(); undefined renders as ""
std::string repr(const Value& v);                  // Python repr()
std::string float_repr(double x);                  // Python repr(float)
bool equals(const Value& a, const Value& b);       // Python ==
int compare(const Value& a, const Value& b);       // Python <, ==, > as -1/0/1; ValueError when unorderable
std::string html_escape(std::string_view s);       // markupsafe.escape

// json.dumps(value, ensure_ascii, indent (<0: none), separators, sort_keys); ValueError for undefined,
// functions, and out-of-range nesting.
struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;
  std::string indent_string;  // when indent was given as a string
  std::string item_separator;
  std::string key_separator;
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

// Nesting bound of values (JSON input, printing, tojson): keeps recursion off the end of the stack.
constexpr int kMaxValueDepth = kMaxTemplateValueDepth;
// `context_text`: every string (and dict key) of `j` is context text.
Value from_json(const nlohmann::ordered_json& j, int depth = 0, bool context_text = false);

// Context text bookkeeping (Span). Appends [begin, end) to sorted `spans`, merging with the last.
void add_span(Spans& spans, std::size_t begin, std::size_t end);
// Appends `from`, shifted by `offset` bytes, to `to`.
void append_spans(Spans& to, const Spans& from, std::size_t offset);
// The part of `spans` inside [begin, end), rebased to begin.
Spans sub_spans(const Spans& spans, std::size_t begin, std::size_t end);
// Whether [begin, end) meets a span.
bool overlaps(const Spans& spans, std::size_t begin, std::size_t end);
// Whether `v` holds context text: a string with spans, or a list or dict holding one (keys included).
bool holds_context_text(const Value& v);
// `v` was built from context text by an operation that does not keep track of where each byte came from
// (a filter, a method, str() of a list): its strings without spans become context text as a whole (a
// list's or tuple's elements too). Marking too much only keeps special-token text from being read as
// control tokens; marking too little would let it be.
void mark_derived(Value& v);

// UTF-8 helpers: Python strings index code points.
std::vector<std::uint32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, std::uint32_t cp);
std::size_t utf8_length(std::string_view s);
bool is_py_space(std::uint32_t cp);  // str.isspace()

}  // namespace pie::jinja
