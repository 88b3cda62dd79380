#include "chat/jinja_interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pie::jinja {
namespace {

[[noreturn]] void undefined_error(const Value& v) {
  throw ValueError{v.s.empty() ? "undefined value" : v.s};
}

// The message jinja2's UndefinedError carries for a missing name or attribute.
std::string undefined_hint_name(const std::string& name) { return "'" + name + "' is undefined"; }
std::string undefined_hint_attr(const Value& obj, const std::string& name) {
  return "'" + std::string(type_name(obj)) + " object' has no attribute '" + name + "'";
}

// Python's slice index normalization (PySlice_AdjustIndices); returns the selected indices.
std::vector<std::int64_t> slice_indices(std::int64_t length, const Value& start_v, const Value& stop_v,
                                        const Value& step_v) {
  auto as_index = [](const Value& v, const char* what) -> std::optional<std::int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_integral()) throw ValueError{std::string("slice ") + what + " must be an integer or None"};
    return v.as_int();
  };
  const auto step_o = as_index(step_v, "step");
  const std::int64_t step = step_o.value_or(1);
  if (step == 0) throw ValueError{"slice step cannot be zero"};
  std::int64_t start, stop;
  const auto start_o = as_index(start_v, "start");
  const auto stop_o = as_index(stop_v, "stop");
  if (step > 0) {
    start = start_o.value_or(0);
    stop = stop_o.value_or(length);
    if (start < 0) start = std::max<std::int64_t>(start + length, 0);
    if (start > length) start = length;
    if (stop < 0) stop = std::max<std::int64_t>(stop + length, 0);
    if (stop > length) stop = length;
  } else {
    start = start_o.value_or(length - 1);
    stop = stop_o.value_or(-1 - length);  // sentinel: before the first element
    if (start < 0) start = std::max<std::int64_t>(start + length, -1);
    if (start >= length) start = length - 1;
    if (stop_o) {
      if (stop < 0) stop = std::max<std::int64_t>(stop + length, -1);
      if (stop >= length) stop = length - 1;
    } else {
      stop = -1;
    }
  }
  std::vector<std::int64_t> out;
  if (step > 0) {
    for (std::int64_t k = start; k < stop; k += step) out.push_back(k);
  } else {
    for (std::int64_t k = start; k > stop; k += step) out.push_back(k);
  }
  return out;
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::string:
      if (!item.is_string()) {
        throw ValueError{std::string("'in <string>' requires string as left operand, not ") + type_name(item)};
      }
      return container.s.find(item.s) != std::string::npos;
    case Kind::list:
      for (const auto& x : *container.list) {
        if (equals(x, item)) return true;
      }
      return false;
    case Kind::dict: return container.dict->find(item) != nullptr;
    case Kind::undefined: return false;
    default:
      throw ValueError{std::string("argument of type '") + type_name(container) + "' is not iterable"};
  }
}

}  // namespace

// --- CallArgs and Scope ----------------------------------------------------------------------------

const Value* CallArgs::get(std::size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

void CallArgs::check(std::string_view function, std::initializer_list<const char*> names) const {
  if (positional.size() > names.size()) {
    throw ValueError{std::string(function) + "() takes at most " + std::to_string(names.size()) +
                     " argument(s), got " + std::to_string(positional.size())};
  }
  for (const auto& [k, v] : keyword) {
    bool known = false;
    std::size_t index = 0;
    for (const char* n : names) {
      if (k == n) {
        known = true;
        if (index < positional.size()) {
          throw ValueError{std::string(function) + "() got multiple values for argument '" + k + "'"};
        }
      }
      ++index;
    }
    if (!known) throw ValueError{std::string(function) + "() got an unexpected keyword argument '" + k + "'"};
  }
}

const Value* Scope::lookup(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it) {
      if (it->first == name) return &it->second;
    }
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

// --- bounds ----------------------------------------------------------------------------------------

void Interpreter::charge(std::size_t bytes) {
  work_ += bytes;
  if (work_ > options_.limits.max_work_bytes) {
    throw ValueError{"render exceeded its work bound (" + std::to_string(options_.limits.max_work_bytes) +
                     " bytes of strings and lists built)"};
  }
}

void Interpreter::count_iteration() {
  if (++iterations_ > options_.limits.max_loop_iterations) {
    throw ValueError{"render exceeded its bound of " + std::to_string(options_.limits.max_loop_iterations) +
                     " loop iterations"};
  }
}

void Interpreter::check_collection(std::size_t n) {
  if (n > options_.limits.max_collection_size) {
    throw ValueError{"collection of " + std::to_string(n) + " elements exceeds the bound of " +
                     std::to_string(options_.limits.max_collection_size)};
  }
  charge(n * sizeof(Value));
}

void Interpreter::append(Text& out, std::string_view text) {
  if (out.s.size() + text.size() > options_.limits.max_output_bytes) {
    throw ValueError{"rendered text exceeds the bound of " + std::to_string(options_.limits.max_output_bytes) +
                     " bytes"};
  }
  charge(text.size());
  out.s.append(text);
}

void Interpreter::append(Text& out, const Value& v) {
  const std::size_t at = out.s.size();
  if (v.is_string()) {
    append(out, std::string_view(v.s));
    append_spans(out.spans, v.spans, at);
    return;
  }
  const std::string text = to_str(v);
  append(out, std::string_view(text));
  if (holds_context_text(v)) add_span(out.spans, at, out.s.size());
}

void Interpreter::fail_at(const std::string& message, int line, int column) const {
  throw TemplateError(message, line, column);
}

// --- rendering -------------------------------------------------------------------------------------

Interpreter::~Interpreter() {
  std::vector<std::pair<Value, Value>> doomed;  // destroyed after every namespace was emptied
  for (const auto& weak : namespaces_) {
    if (auto dict = weak.lock()) {
      for (auto& item : dict->items) doomed.push_back(std::move(item));
      dict->items.clear();
    }
  }
}

Text Interpreter::render(const Program& program, const nlohmann::ordered_json& context,
                         const std::vector<std::string>& tracked) {
  auto globals = std::make_shared<Scope>();
  add_globals(*this, *globals);
  auto root = std::make_shared<Scope>();
  root->parent = globals;
  if (!context.is_null()) {
    if (!context.is_object()) throw TemplateError("the render context must be a JSON object", 0, 0);
    try {
      for (const auto& [k, v] : context.items()) {
        const bool context_text = std::find(tracked.begin(), tracked.end(), k) != tracked.end();
        root->set(k, from_json(v, 0, context_text));
      }
    } catch (const ValueError& e) {
      throw TemplateError(e.message, 0, 0);
    }
  }
  Text out;
  try {
    exec(program.body, root, out);
  } catch (const ValueError& e) {  // raised outside any statement (cannot happen, but never escape)
    throw TemplateError(e.message, 0, 0);
  }
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const ScopePtr& scope, Text& out) {
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s, scope, out);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, const ScopePtr& scope, Text& out) {
  struct Depth {
    explicit Depth(Interpreter& in) : in_(in) { ++in_.depth_; }
    ~Depth() { --in_.depth_; }
    Interpreter& in_;
  } depth(*this);
  try {
    if (depth_ > kMaxEvalDepth) throw ValueError{"template nesting too deep"};
    switch (s.kind) {
      case StmtKind::text: append(out, s.text); return Flow::normal;
      case StmtKind::output: append(out, eval(*s.expr, scope)); return Flow::normal;
      case StmtKind::if_:
        for (const auto& [cond, body] : s.branches) {
          if (truthy(eval(*cond, scope))) return exec(body, scope, out);
        }
        return exec(s.else_body, scope, out);
      case StmtKind::for_: exec_for(s, scope, out); return Flow::normal;
      case StmtKind::set: assign(*s.target, eval(*s.expr, scope), scope); return Flow::normal;
      case StmtKind::set_block:
      case StmtKind::filter_block: {
        Text captured;
        exec(s.body, scope, captured);
        Value v = Value::string(std::move(captured.s));
        v.spans = std::move(captured.spans);
        for (const auto& f : s.filters) {
          CallArgs args = eval_args(f->args, scope);
          try {
            v = apply_filter(*this, f->name, v, args);
          } catch (const ValueError& e) {
            fail_at(e.message, f->line, f->column);
          }
        }
        if (s.kind == StmtKind::set_block) assign(*s.target, std::move(v), scope);
        else append(out, v);
        return Flow::normal;
      }
      case StmtKind::macro: scope->set(s.name, make_macro(s, scope, nullptr, nullptr)); return Flow::normal;
      case StmtKind::call_block: {
        const Expr& call_expr = *s.expr;
        Value callee = eval(*call_expr.a, scope);
        CallArgs args = eval_args(call_expr.args, scope);
        args.keyword.emplace_back("caller", make_macro(s, scope, &s.body, scope));
        if (callee.is_undefined()) undefined_error(callee);
        append(out, call(callee, args));
        return Flow::normal;
      }
      case StmtKind::break_: return Flow::break_;
      case StmtKind::continue_: return Flow::continue_;
      case StmtKind::scope: return exec(s.body, scope, out);
    }
  } catch (const ValueError& e) {
    fail_at(e.message, s.line, s.column);
  }
  return Flow::normal;
}

void Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, Text& out) {
  const Value iterable = eval(*s.expr, scope);
  List items = iterate(iterable);
  if (s.cond) {
    List kept;
    for (auto& item : items) {
      count_iteration();
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      assign(*s.target, item, probe);
      if (truthy(eval(*s.cond, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto else_scope = std::make_shared<Scope>();
    else_scope->parent = scope;
    exec(s.else_body, else_scope, out);
    return;
  }
  const auto n = static_cast<std::int64_t>(items.size());
  for (std::int64_t k = 0; k < n; ++k) {
    count_iteration();
    auto iteration = std::make_shared<Scope>();
    iteration->parent = scope;
    assign(*s.target, items[static_cast<std::size_t>(k)], iteration);
    // The loop object: a fresh dict per iteration (keys are distinct, so no lookups while building it).
    Value loop = Value::make_dict();
    auto& d = loop.dict->items;
    d.reserve(12);
    auto add = [&d](const char* key, Value v) { d.emplace_back(Value::string(key), std::move(v)); };
    add("index", Value::integer(k + 1));
    add("index0", Value::integer(k));
    add("revindex", Value::integer(n - k));
    add("revindex0", Value::integer(n - k - 1));
    add("first", Value::boolean(k == 0));
    add("last", Value::boolean(k == n - 1));
    add("length", Value::integer(n));
    add("depth", Value::integer(1));
    add("depth0", Value::integer(0));
    if (k > 0) add("previtem", items[static_cast<std::size_t>(k - 1)]);
    if (k + 1 < n) add("nextitem", items[static_cast<std::size_t>(k + 1)]);
    add("cycle", Value::function("loop.cycle", [k](CallArgs& args) -> Value {
          if (args.positional.empty()) throw ValueError{"no items for cycling given"};
          return args.positional[static_cast<std::size_t>(k) % args.positional.size()];
        }));
    iteration->set("loop", std::move(loop));
    if (exec(s.body, iteration, out) == Flow::break_) break;
  }
}

void Interpreter::assign(const Expr& target, Value value, const ScopePtr& scope) {
  switch (target.kind) {
    case ExprKind::name: scope->set(target.name, std::move(value)); return;
    case ExprKind::tuple: {
      List items = iterate(value);
      if (items.size() != target.items.size()) {
        throw ValueError{items.size() > target.items.size()
                             ? "too many values to unpack (expected " + std::to_string(target.items.size()) + ")"
                             : "not enough values to unpack (expected " + std::to_string(target.items.size()) +
                                   ", got " + std::to_string(items.size()) + ")"};
      }
      for (std::size_t k = 0; k < items.size(); ++k) assign(*target.items[k], std::move(items[k]), scope);
      return;
    }
    case ExprKind::getattr: {
      const Value* ns = scope->lookup(target.a->name);
      if (ns == nullptr || ns->kind != Kind::dict || !ns->namespace_) {
        throw ValueError{"cannot assign attribute on non-namespace object"};
      }
      ns->dict->set(Value::string(target.name), std::move(value));
      return;
    }
    default: throw ValueError{"cannot assign to this expression"};
  }
}

Value Interpreter::make_macro(const Stmt& s, const ScopePtr& scope, const Body* caller_body,
                              const ScopePtr& caller_scope) {
  (void)caller_scope;
  std::weak_ptr<Scope> weak = scope;
  const Body* body = caller_body != nullptr ? caller_body : &s.body;
  const std::string name = caller_body != nullptr ? "caller" : s.name;
  Value macro = Value::function(name, [this, &s, weak, body, name](CallArgs& args) -> Value {
    ScopePtr parent = weak.lock();
    if (!parent) throw ValueError{"macro '" + name + "' called after its scope ended"};
    if (call_depth_ >= options_.limits.max_call_depth) {
      throw ValueError{"macro calls nested deeper than " + std::to_string(options_.limits.max_call_depth)};
    }
    struct CallDepth {
      explicit CallDepth(int& d) : d_(d) { ++d_; }
      ~CallDepth() { --d_; }
      int& d_;
    } guard(call_depth_);
    auto local = std::make_shared<Scope>();
    local->parent = parent;
    if (args.positional.size() > s.params.size()) {
      throw ValueError{"macro '" + name + "' takes not more than " + std::to_string(s.params.size()) +
                       " argument(s)"};
    }
    std::vector<bool> bound(s.params.size(), false);
    for (std::size_t k = 0; k < args.positional.size(); ++k) {
      local->set(s.params[k].name, args.positional[k]);
      bound[k] = true;
    }
    for (auto& [k, v] : args.keyword) {
      bool found = false;
      for (std::size_t p = 0; p < s.params.size(); ++p) {
        if (s.params[p].name == k) {
          if (bound[p]) throw ValueError{"macro '" + name + "' got multiple values for argument '" + k + "'"};
          local->set(k, v);
          bound[p] = true;
          found = true;
        }
      }
      if (!found) {
        if (k == "caller") local->set("caller", v);
        else throw ValueError{"macro '" + name + "' takes no keyword argument '" + k + "'"};
      }
    }
    for (std::size_t p = 0; p < s.params.size(); ++p) {
      if (bound[p]) continue;
      if (s.params[p].default_value) local->set(s.params[p].name, eval(*s.params[p].default_value, local));
      else local->set(s.params[p].name, Value::undefined(undefined_hint_name(s.params[p].name)));
    }
    Text out;
    exec(*body, local, out);
    Value result = Value::string(std::move(out.s));
    result.spans = std::move(out.spans);
    return result;
  });
  macro.fn->exact_spans = true;  // its output's spans are those of what it printed
  return macro;
}

// --- expressions -----------------------------------------------------------------------------------

CallArgs Interpreter::eval_args(const std::vector<Arg>& args, const ScopePtr& scope) {
  CallArgs out;
  out.interp = this;
  for (const auto& a : args) {
    if (a.name.empty()) out.positional.push_back(eval(*a.value, scope));
    else out.keyword.emplace_back(a.name, eval(*a.value, scope));
  }
  return out;
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  struct Depth {
    explicit Depth(Interpreter& in) : in_(in) { ++in_.depth_; }
    ~Depth() { --in_.depth_; }
    Interpreter& in_;
  } depth(*this);
  if (depth_ > kMaxEvalDepth) fail_at("template nesting too deep", e.line, e.column);
  try {
    Value v = eval_inner(e, scope);
    // Strings are values, copied wherever they flow: charging each result's bytes bounds the copying a
    // loop over a large string can cause.
    if (v.is_string()) charge(v.s.size());
    return v;
  } catch (const ValueError& err) {
    fail_at(err.message, e.line, e.column);
  }
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::literal: return e.literal;
    case ExprKind::name: {
      const Value* v = scope->lookup(e.name);
      return v != nullptr ? *v : Value::undefined(undefined_hint_name(e.name));
    }
    case ExprKind::list:
    case ExprKind::tuple: {
      List items;
      items.reserve(e.items.size());
      for (const auto& x : e.items) items.push_back(eval(*x, scope));
      return Value::make_list(std::move(items), e.kind == ExprKind::tuple);
    }
    case ExprKind::dict: {
      Value d = Value::make_dict();
      for (std::size_t k = 0; k + 1 < e.items.size(); k += 2) {
        Value key = eval(*e.items[k], scope);
        if (key.kind == Kind::list && !key.tuple) throw ValueError{"unhashable type: 'list'"};
        if (key.kind == Kind::dict) throw ValueError{"unhashable type: 'dict'"};
        d.dict->set(std::move(key), eval(*e.items[k + 1], scope));
      }
      return d;
    }
    case ExprKind::getattr: {
      const Value obj = eval(*e.a, scope);
      if (obj.is_undefined()) undefined_error(obj);
      return get_attr(obj, e.name);
    }
    case ExprKind::getitem: {
      const Value obj = eval(*e.a, scope);
      if (obj.is_undefined()) undefined_error(obj);
      return get_item(obj, eval(*e.b, scope));
    }
    case ExprKind::slice: {
      const Value obj = eval(*e.a, scope);
      if (obj.is_undefined()) undefined_error(obj);
      const Value start = e.b ? eval(*e.b, scope) : Value::none();
      const Value stop = e.c ? eval(*e.c, scope) : Value::none();
      const Value step = e.d ? eval(*e.d, scope) : Value::none();
      if (obj.kind == Kind::list && !obj.generator) {
        List out;
        for (auto k : slice_indices(static_cast<std::int64_t>(obj.list->size()), start, stop, step)) {
          out.push_back((*obj.list)[static_cast<std::size_t>(k)]);
        }
        check_collection(out.size());
        return Value::make_list(std::move(out), obj.tuple);
      }
      if (obj.is_string()) {
        const auto cps = utf8_decode(obj.s);
        // The byte offset of each code point, to carry context text over character by character.
        std::vector<std::size_t> offsets;
        if (!obj.spans.empty()) {
          offsets.reserve(cps.size() + 1);
          std::size_t at = 0;
          for (std::uint32_t cp : cps) {
            offsets.push_back(at);
            at += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
          }
          offsets.push_back(at);
        }
        Value out = Value::string({}, obj.markup);
        for (auto k : slice_indices(static_cast<std::int64_t>(cps.size()), start, stop, step)) {
          const std::size_t at = out.s.size();
          utf8_append(out.s, cps[static_cast<std::size_t>(k)]);
          const auto i = static_cast<std::size_t>(k);
          if (!offsets.empty() && overlaps(obj.spans, offsets[i], offsets[i + 1])) {
            add_span(out.spans, at, out.s.size());
          }
        }
        charge(out.s.size());
        return out;
      }
      return Value::undefined(std::string("'") + type_name(obj) + " object' is not subscriptable");
    }
    case ExprKind::call: {
      const Value callee = eval(*e.a, scope);
      CallArgs args = eval_args(e.args, scope);
      if (callee.is_undefined()) undefined_error(callee);
      return call(callee, args);
    }
    case ExprKind::filter: {
      const Value operand = eval(*e.a, scope);
      CallArgs args = eval_args(e.args, scope);
      return apply_filter(*this, e.name, operand, args);
    }
    case ExprKind::test: {
      if (!has_test(e.name)) throw ValueError{"no test named '" + e.name + "'"};
      const Value operand = eval(*e.a, scope);
      CallArgs args = eval_args(e.args, scope);
      const bool r = apply_test(*this, e.name, operand, args);
      return Value::boolean(e.negated ? !r : r);
    }
    case ExprKind::not_: return Value::boolean(!truthy(eval(*e.a, scope)));
    case ExprKind::neg:
    case ExprKind::pos: {
      const Value v = eval(*e.a, scope);
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number()) {
        throw ValueError{std::string("bad operand type for unary ") + (e.kind == ExprKind::neg ? "-" : "+") +
                         ": '" + type_name(v) + "'"};
      }
      if (e.kind == ExprKind::pos) return v.kind == Kind::boolean ? Value::integer(v.as_int()) : v;
      if (v.kind == Kind::floating) return Value::floating(-v.f);
      if (v.as_int() == std::numeric_limits<std::int64_t>::min()) throw ValueError{"integer overflow"};
      return Value::integer(-v.as_int());
    }
    case ExprKind::binary: {
      const Value a = eval(*e.a, scope);
      const Value b = eval(*e.b, scope);
      return eval_binary(e.name, a, b);
    }
    case ExprKind::and_: {
      Value a = eval(*e.a, scope);
      return truthy(a) ? eval(*e.b, scope) : a;
    }
    case ExprKind::or_: {
      Value a = eval(*e.a, scope);
      return truthy(a) ? a : eval(*e.b, scope);
    }
    case ExprKind::compare: {
      Value left = eval(*e.items[0], scope);
      for (std::size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.items[k + 1], scope);
        if (!eval_compare(e.ops[k], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::condexpr:
      if (truthy(eval(*e.b, scope))) return eval(*e.a, scope);
      if (e.c) return eval(*e.c, scope);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
  }
  return Value::undefined();
}

bool Interpreter::eval_compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  int c;
  try {
    c = compare(a, b);
  } catch (const ValueError&) {
    throw ValueError{"'" + op + "' not supported between instances of '" + type_name(a) + "' and '" +
                     type_name(b) + "'"};
  }
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    Text t;
    append(t, a);
    append(t, b);
    Value v = Value::string(std::move(t.s));
    v.spans = std::move(t.spans);
    return v;
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  auto unsupported = [&]() -> ValueError {
    return ValueError{"unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
                      type_name(b) + "'"};
  };
  const bool ints = a.is_integral() && b.is_integral();
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      std::int64_t r = 0;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) throw ValueError{"integer overflow"};
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      std::string s;
      const bool markup = a.markup || b.markup;
      s = markup && !a.markup ? html_escape(a.s) : a.s;
      const std::size_t split = s.size();
      s += markup && !b.markup ? html_escape(b.s) : b.s;
      if (s.size() > options_.limits.max_output_bytes) throw ValueError{"string exceeds the output bound"};
      charge(s.size());
      Value v = Value::string(std::move(s), markup);
      if (markup != a.markup || markup != b.markup) {
        if (!a.spans.empty() || !b.spans.empty()) mark_derived(v);  // escaped: offsets moved
      } else {
        v.spans = a.spans;
        append_spans(v.spans, b.spans, split);
      }
      return v;
    }
    if (a.kind == Kind::list && b.kind == Kind::list && a.tuple == b.tuple && !a.generator && !b.generator) {
      check_collection(a.list->size() + b.list->size());
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(out), a.tuple);
    }
    if (a.is_string()) {
      throw ValueError{std::string("can only concatenate str (not \"") + type_name(b) + "\") to str"};
    }
    if (a.kind == Kind::list) {
      throw ValueError{std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) +
                       "\") to " + type_name(a)};
    }
    throw unsupported();
  }
  if (op == "-") {
    if (ints) {
      std::int64_t r = 0;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) throw ValueError{"integer overflow"};
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() - b.as_double());
    throw unsupported();
  }
  if (op == "*") {
    if (ints) {
      std::int64_t r = 0;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) throw ValueError{"integer overflow"};
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() * b.as_double());
    auto sequence = [](const Value& x) { return x.is_string() || (x.kind == Kind::list && !x.generator); };
    const Value* seq = sequence(a) && b.is_integral() ? &a : sequence(b) && a.is_integral() ? &b : nullptr;
    if (seq == nullptr) throw unsupported();
    const std::int64_t n = std::max<std::int64_t>(0, (seq == &a ? b : a).as_int());
    if (seq->is_string()) {
      if (seq->s.size() * static_cast<std::size_t>(n) > options_.limits.max_output_bytes ||
          (n > 0 && static_cast<std::size_t>(n) > options_.limits.max_output_bytes)) {
        throw ValueError{"string repetition exceeds the output bound"};
      }
      Value v = Value::string({}, seq->markup);
      v.s.reserve(seq->s.size() * static_cast<std::size_t>(n));
      for (std::int64_t k = 0; k < n; ++k) {
        append_spans(v.spans, seq->spans, v.s.size());
        v.s += seq->s;
      }
      charge(v.s.size());
      return v;
    }
    if (static_cast<std::size_t>(n) > options_.limits.max_collection_size ||
        seq->list->size() * static_cast<std::size_t>(n) > options_.limits.max_collection_size) {
      throw ValueError{"list repetition exceeds the collection bound"};
    }
    check_collection(seq->list->size() * static_cast<std::size_t>(n));
    std::size_t item_bytes = 0;
    for (const auto& x : *seq->list) item_bytes += x.s.size();
    charge(item_bytes * static_cast<std::size_t>(n));  // before building: the copies are the cost
    List out;
    for (std::int64_t k = 0; k < n; ++k) out.insert(out.end(), seq->list->begin(), seq->list->end());
    return Value::make_list(std::move(out), seq->tuple);
  }
  if (op == "/") {
    if (!nums) throw unsupported();
    if (b.as_double() == 0.0) throw ValueError{"division by zero"};
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) {
      CallArgs format_args{b.kind == Kind::list && b.tuple ? *b.list : List{b}, {}, this};
      return apply_filter(*this, "format", a, format_args);
    }
    if (!nums) throw unsupported();
    if (ints) {
      const std::int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) throw ValueError{"integer division or modulo by zero"};
      if (x == std::numeric_limits<std::int64_t>::min() && y == -1) throw ValueError{"integer overflow"};
      std::int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::integer(op == "//" ? q : r);
    }
    const double x = a.as_double(), y = b.as_double();
    if (y == 0.0) throw ValueError{"float floor division by zero"};
    double r = std::fmod(x, y);
    if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
    if (op == "%") return Value::floating(r);
    // CPython's float_divmod: the floor of the exact quotient, corrected for rounding.
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0.0 && ((y < 0) != (mod < 0))) div -= 1.0;
    if (div != 0.0) {
      double floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
      return Value::floating(floordiv);
    }
    return Value::floating(std::copysign(0.0, x / y));
  }
  if (op == "**") {
    if (!nums) throw unsupported();
    if (ints && b.as_int() >= 0) {
      std::int64_t r = 1, base = a.as_int();
      for (std::int64_t e = b.as_int(); e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) throw ValueError{"integer overflow"};
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) throw ValueError{"integer overflow"};
      }
      return Value::integer(r);
    }
    if (a.as_double() == 0.0 && b.as_double() < 0) throw ValueError{"0.0 cannot be raised to a negative power"};
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  throw ValueError{"unknown operator " + op};
}

// --- lookups ---------------------------------------------------------------------------------------

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.kind == Kind::dict && obj.namespace_) {
    const Value* v = obj.dict->find(std::string_view(name));
    return v != nullptr ? *v : Value::undefined(undefined_hint_attr(obj, name));
  }
  Value method = bound_method(*this, obj, name);
  if (!method.is_undefined()) {
    method.fn->bound_to_context_text = holds_context_text(obj);
    return method;
  }
  if (obj.kind == Kind::dict) {
    const Value* v = obj.dict->find(std::string_view(name));
    if (v != nullptr) return *v;
  }
  return Value::undefined(undefined_hint_attr(obj, name));
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  switch (obj.kind) {
    case Kind::dict: {
      const Value* v = obj.dict->find(key);
      if (v != nullptr) return *v;
      break;
    }
    case Kind::list:
      if (key.is_integral() && !obj.generator) {
        std::int64_t i = key.as_int();
        const auto n = static_cast<std::int64_t>(obj.list->size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return (*obj.list)[static_cast<std::size_t>(i)];
        return Value::undefined(std::string("'") + type_name(obj) + " object' has no element " +
                                std::to_string(key.as_int()));
      }
      break;
    case Kind::string:
      if (key.is_integral()) {
        const auto cps = utf8_decode(obj.s);
        std::int64_t i = key.as_int();
        const auto n = static_cast<std::int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          Value c = Value::string({}, obj.markup);
          utf8_append(c.s, cps[static_cast<std::size_t>(i)]);
          if (!obj.spans.empty()) mark_derived(c);  // (one character: context text when the string holds any)
          return c;
        }
        return Value::undefined("'str object' has no element " + std::to_string(key.as_int()));
      }
      break;
    default: break;
  }
  if (key.is_string()) return get_attr(obj, key.s);
  return Value::undefined(std::string("'") + type_name(obj) + " object' has no element " + repr(key));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  args.interp = this;
  if (callee.is_undefined()) undefined_error(callee);
  if (callee.kind != Kind::function) throw ValueError{std::string("'") + type_name(callee) + "' object is not callable"};
  const bool from_context_text =
      !callee.fn->exact_spans && (callee.fn->bound_to_context_text || args_hold_context_text(args));
  Value result = callee.fn->call(args);
  if (from_context_text) mark_derived(result);
  return result;
}

List Interpreter::iterate(const Value& v) {
  switch (v.kind) {
    case Kind::undefined: return {};
    case Kind::list: {
      std::size_t bytes = v.list->size() * sizeof(Value);
      for (const auto& x : *v.list) bytes += x.s.size();
      charge(bytes);
      return *v.list;
    }
    case Kind::dict: {
      if (v.namespace_) break;
      List keys;
      keys.reserve(v.dict->items.size());
      for (const auto& [k, x] : v.dict->items) keys.push_back(k);
      return keys;
    }
    case Kind::string: {
      List chars;
      std::size_t at = 0;
      for (std::uint32_t cp : utf8_decode(v.s)) {
        Value c = Value::string({}, v.markup);
        utf8_append(c.s, cp);
        if (overlaps(v.spans, at, at + c.s.size())) add_span(c.spans, 0, c.s.size());
        at += c.s.size();
        chars.push_back(std::move(c));
      }
      check_collection(chars.size());
      return chars;
    }
    default: break;
  }
  throw ValueError{std::string("'") + type_name(v) + "' object is not iterable"};
}

}  // namespace pie::jinja
