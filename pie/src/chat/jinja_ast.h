// The syntax tree of a parsed template: expressions and statements, each with its place in the source.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace pie::jinja {

enum class ExprKind : std::uint8_t {
  literal,    // literal
  name,       // name
  list,       // items
  tuple,      // items
  dict,       // items: key, value, key, value, ...
  getattr,    // a.name
  getitem,    // a[b]
  slice,      // a[b:c:d], each of b, c, d optional
  call,       // a(args)
  filter,     // a | name(args); a is null inside {% filter %} and {% set x | f %}
  test,       // a is [not] name(args)  (negated)
  not_,       // not a
  neg,        // -a
  pos,        // +a
  binary,     // a name b, name one of + - * / // % ** ~
  and_,       // a and b
  or_,        // a or b
  compare,    // items[0] ops[0] items[1] ops[1] items[2] ...
  condexpr,   // a if b else c (c optional)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arg {
  std::string name;  // empty for a positional argument
  ExprPtr value;
};

struct Expr {
  ExprKind kind = ExprKind::literal;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;
  std::vector<Arg> args;
  ExprPtr a, b, c, d;
  bool negated = false;
};

enum class StmtKind : std::uint8_t {
  text,          // text
  output,        // {{ expr }}
  if_,           // branches (cond, body); else_body
  for_,          // target in expr [if cond] body [else else_body]
  set,           // target = expr
  set_block,     // {% set target | filters %} body {% endset %}
  macro,         // name(params) body
  call_block,    // {% call(params) expr %} body
  filter_block,  // {% filter filters %} body
  break_,
  continue_,
  scope,         // body (transparent: {% generation %})
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // null: no default
};

struct Stmt {
  StmtKind kind = StmtKind::text;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<Param> params;
  std::vector<ExprPtr> filters;  // filter expressions whose operand (a) is null
};

struct Program {
  Body body;
};

}  // namespace pie::jinja
