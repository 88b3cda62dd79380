// The tree-walking Jinja interpreter: scopes, statements, expressions and Python's attribute and item
// lookup rules, under the bounds of TemplateLimits. One Interpreter renders one template once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"
#include "pie/chat_template.h"

namespace pie::jinja {

class Interpreter;

// Nesting of statements and expressions being evaluated at once (macro recursion included): deep enough
// for any real template, shallow enough for the stack of a server thread under sanitizers.
constexpr int kMaxEvalDepth = 1000;

// Evaluated arguments of a call, a filter or a test (the operand is not among them).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  Interpreter* interp = nullptr;

  // The argument at `index` or named `name`; nullptr when absent.
  const Value* get(std::size_t index, std::string_view name) const;
  // Throws ValueError when there are more positional arguments than `names` or an unknown keyword.
  void check(std::string_view function, std::initializer_list<const char*> names) const;
};

// Rendered text, and the context text in it.
struct Text {
  std::string s;
  Spans spans;
};

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* lookup(std::string_view name) const;
  void set(const std::string& name, Value value);
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& options) : options_(options) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // namespace() objects are the only mutable values, so the only ones that can form reference cycles
  // (set ns.self = ns); they are emptied when the render ends so that no cycle outlives it.
  void track_namespace(const DictPtr& dict) { namespaces_.push_back(dict); }

  // The variables named in `tracked` hold context text (Span): where it lands in the output is kept.
  Text render(const Program& program, const nlohmann::ordered_json& context,
              const std::vector<std::string>& tracked = {});

  // Python-like lookups as jinja2's sandboxed environment does them.
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value call(const Value& callee, CallArgs& args);
  // Iterates a value as Python's iter() does (dict: keys; string: characters; undefined: nothing).
  List iterate(const Value& v);

  // Bounds: bytes of work (strings and lists built), loop iterations, collection sizes.
  void charge(std::size_t bytes);
  void count_iteration();
  void check_collection(std::size_t n);
  const RenderOptions& options() const { return options_; }

 private:
  enum class Flow : std::uint8_t { normal, break_, continue_ };

  Flow exec(const Body& body, const ScopePtr& scope, Text& out);
  Flow exec_stmt(const Stmt& s, const ScopePtr& scope, Text& out);
  void exec_for(const Stmt& s, const ScopePtr& scope, Text& out);
  void assign(const Expr& target, Value value, const ScopePtr& scope);
  Value make_macro(const Stmt& s, const ScopePtr& scope, const Body* caller_body, const ScopePtr& caller_scope);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  bool eval_compare(const std::string& op, const Value& a, const Value& b);
  CallArgs eval_args(const std::vector<Arg>& args, const ScopePtr& scope);
  void append(Text& out, std::string_view text);
  void append(Text& out, const Value& v);  // a string with its spans; other values as str() would print
  [[noreturn]] void fail_at(const std::string& message, int line, int column) const;

  const RenderOptions& options_;
  std::vector<std::weak_ptr<Dict>> namespaces_;
  std::size_t work_ = 0;
  std::int64_t iterations_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
};

// Whether an argument of a call holds context text (jinja_value.h).
inline bool args_hold_context_text(const CallArgs& args) {
  for (const Value& v : args.positional) {
    if (holds_context_text(v)) return true;
  }
  for (const auto& [k, v] : args.keyword) {
    if (holds_context_text(v)) return true;
  }
  return false;
}

// Builtins (jinja_builtins.cpp): filters, tests, globals and methods of str, dict and list values.
Value apply_filter(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args);
bool has_test(const std::string& name);
// The method `name` bound to `obj` (str.strip, dict.get, ...), or undefined when it has none.
Value bound_method(Interpreter& in, const Value& obj, const std::string& name);
void add_globals(Interpreter& in, Scope& scope);

}  // namespace pie::jinja
