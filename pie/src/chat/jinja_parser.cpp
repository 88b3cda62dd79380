#include "chat/jinja_parser.h"

#include <initializer_list>

#include "chat/jinja_lexer.h"
#include "pie/chat_template.h"

namespace pie::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  std::shared_ptr<Program> run() {
    auto program = std::make_shared<Program>();
    program->body = parse_body({});
    if (cur().type != TokenType::eof) fail("unexpected tag", cur());
    return program;
  }

 private:
  // --- token helpers -------------------------------------------------------------------------------
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(std::size_t n = 1) const { return t_[std::min(pos_ + n, t_.size() - 1)]; }
  void advance() { if (pos_ + 1 < t_.size()) ++pos_; }
  bool is_op(const char* op) const { return cur().type == TokenType::op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::name && cur().text == name; }
  bool skip_op(const char* op) { if (is_op(op)) { advance(); return true; } return false; }
  bool skip_name(const char* name) { if (is_name(name)) { advance(); return true; } return false; }

  [[noreturn]] static void fail(const std::string& message, const Token& at) {
    throw TemplateError(message, at.line, at.column);
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::data: return "template data";
      case TokenType::var_begin: return "'{{'";
      case TokenType::var_end: return "'}}'";
      case TokenType::block_begin: return "'{%'";
      case TokenType::block_end: return "'%}'";
      case TokenType::name: return "'" + t.text + "'";
      case TokenType::string: return "string";
      case TokenType::integer: return "integer";
      case TokenType::floating: return "float";
      case TokenType::op: return "'" + t.text + "'";
      case TokenType::eof: return "end of template";
    }
    return "token";
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()), cur());
  }
  void expect(TokenType type, const char* what) {
    if (cur().type != type) fail(std::string("expected ") + what + ", got " + describe(cur()), cur());
    advance();
  }
  std::string expect_name() {
    if (cur().type != TokenType::name) fail("expected a name, got " + describe(cur()), cur());
    std::string n = cur().text;
    advance();
    return n;
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) fail("template nesting too deep", p_.cur());
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  // --- statements ----------------------------------------------------------------------------------
  // Parses until a block tag whose name is in `ends` (left unconsumed: cur() is that name) or the end.
  Body parse_body(std::initializer_list<const char*> ends) {
    DepthGuard guard(*this);
    Body body;
    for (;;) {
      const Token& tok = cur();
      if (tok.type == TokenType::eof) {
        if (ends.size() != 0) {
          std::string want;
          for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
          fail("unexpected end of template, expected " + want, tok);
        }
        return body;
      }
      if (tok.type == TokenType::data) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::text;
        s->text = tok.text;
        s->line = tok.line;
        s->column = tok.column;
        body.push_back(std::move(s));
        advance();
      } else if (tok.type == TokenType::var_begin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::output;
        s->line = tok.line;
        s->column = tok.column;
        advance();
        s->expr = parse_tuple(true);
        expect(TokenType::var_end, "'}}'");
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::block_begin) {
        const Token& name = peek();
        if (name.type != TokenType::name) fail("expected a tag name, got " + describe(name), name);
        for (const char* e : ends) {
          if (name.text == e) {
            advance();
            return body;
          }
        }
        advance();
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(tok), tok);
      }
    }
  }

  void end_tag(const char* name) {
    // cur() is the end tag's name (parse_body stopped on it)
    if (!skip_name(name)) fail(std::string("expected '") + name + "'", cur());
    expect(TokenType::block_end, "'%}'");
  }

  StmtPtr parse_statement() {
    const Token tag = cur();
    auto s = std::make_unique<Stmt>();
    s->line = tag.line;
    s->column = tag.column;
    const std::string& n = tag.text;
    advance();
    if (n == "if") {
      s->kind = StmtKind::if_;
      for (;;) {
        ExprPtr cond = parse_tuple(false);
        expect(TokenType::block_end, "'%}'");
        Body body = parse_body({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(cond), std::move(body));
        if (skip_name("elif")) continue;
        if (skip_name("else")) {
          expect(TokenType::block_end, "'%}'");
          s->else_body = parse_body({"endif"});
        }
        end_tag("endif");
        break;
      }
    } else if (n == "for") {
      s->kind = StmtKind::for_;
      s->target = parse_assign_target(false);
      if (!skip_name("in")) fail("expected 'in', got " + describe(cur()), cur());
      s->expr = parse_tuple(false, true);
      if (skip_name("if")) s->cond = parse_tuple(false);
      if (is_name("recursive")) fail("recursive loops are not supported", cur());
      expect(TokenType::block_end, "'%}'");
      ++loop_depth_;
      s->body = parse_body({"endfor", "else"});
      --loop_depth_;
      if (skip_name("else")) {
        expect(TokenType::block_end, "'%}'");
        s->else_body = parse_body({"endfor"});
      }
      end_tag("endfor");
    } else if (n == "set") {
      s->target = parse_assign_target(true);
      if (skip_op("=")) {
        s->kind = StmtKind::set;
        s->expr = parse_tuple(true);
        expect(TokenType::block_end, "'%}'");
      } else {
        s->kind = StmtKind::set_block;
        if (s->target->kind != ExprKind::name && s->target->kind != ExprKind::getattr)
          fail("a block set assigns one name", tag);
        while (skip_op("|")) s->filters.push_back(parse_filter(nullptr));
        expect(TokenType::block_end, "'%}'");
        s->body = parse_body({"endset"});
        end_tag("endset");
      }
    } else if (n == "macro") {
      s->kind = StmtKind::macro;
      s->name = expect_name();
      parse_params(s->params, true);
      expect(TokenType::block_end, "'%}'");
      const int saved = loop_depth_;
      loop_depth_ = 0;
      s->body = parse_body({"endmacro"});
      loop_depth_ = saved;
      end_tag("endmacro");
    } else if (n == "call") {
      s->kind = StmtKind::call_block;
      if (is_op("(")) parse_params(s->params, false);
      s->expr = parse_expression(true);
      if (s->expr->kind != ExprKind::call) fail("expected a call", tag);
      expect(TokenType::block_end, "'%}'");
      const int saved = loop_depth_;
      loop_depth_ = 0;
      s->body = parse_body({"endcall"});
      loop_depth_ = saved;
      end_tag("endcall");
    } else if (n == "filter") {
      s->kind = StmtKind::filter_block;
      do {
        s->filters.push_back(parse_filter(nullptr));
      } while (skip_op("|"));
      expect(TokenType::block_end, "'%}'");
      s->body = parse_body({"endfilter"});
      end_tag("endfilter");
    } else if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail("'" + n + "' outside of a loop", tag);
      s->kind = n == "break" ? StmtKind::break_ : StmtKind::continue_;
      expect(TokenType::block_end, "'%}'");
    } else if (n == "generation") {
      s->kind = StmtKind::scope;
      expect(TokenType::block_end, "'%}'");
      s->body = parse_body({"endgeneration"});
      end_tag("endgeneration");
    } else {
      fail("unknown tag '" + n + "'", tag);
    }
    return s;
  }

  // (a, b=default, ...) of a macro or a call block.
  void parse_params(std::vector<Param>& params, bool macro) {
    const Token& at = cur();
    if (!skip_op("(")) {
      if (macro) fail("expected '(' after the macro name", at);
      return;
    }
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      else if (!params.empty() && params.back().default_value)
        fail("non-default argument follows default argument", cur());
      params.push_back(std::move(p));
    }
    expect_op(")");
  }

  // A for/set target: a name, a tuple of names, or (in set) namespace.attribute.
  ExprPtr parse_assign_target(bool with_namespace) {
    const Token& at = cur();
    auto one = [&]() -> ExprPtr {
      const Token& t = cur();
      if (t.type != TokenType::name) fail("expected a name to assign to, got " + describe(t), t);
      auto e = node(ExprKind::name, t);
      e->name = t.text;
      advance();
      if (with_namespace && is_op(".")) {
        advance();
        auto g = node(ExprKind::getattr, t);
        g->a = std::move(e);
        g->name = expect_name();
        return g;
      }
      return e;
    };
    bool paren = skip_op("(");
    std::vector<ExprPtr> items;
    items.push_back(one());
    bool comma = false;
    while (skip_op(",")) {
      comma = true;
      if (is_op(")") || is_op("=") || is_name("in") || cur().type == TokenType::block_end) break;
      items.push_back(one());
    }
    if (paren) expect_op(")");
    if (!comma && items.size() == 1) return std::move(items[0]);
    auto tuple = node(ExprKind::tuple, at);
    tuple->items = std::move(items);
    for (const auto& i : tuple->items) {
      if (i->kind != ExprKind::name) fail("cannot assign to an attribute inside a tuple", at);
    }
    return tuple;
  }

  // --- expressions ---------------------------------------------------------------------------------
  bool at_tuple_end(bool for_iter) const {
    if (cur().type == TokenType::var_end || cur().type == TokenType::block_end || cur().type == TokenType::eof)
      return true;
    if (is_op(")") || is_op("=")) return true;
    if (for_iter && (is_name("if") || is_name("recursive"))) return true;
    return false;
  }

  // a, b, c -> tuple; a -> a. for_iter: `if` ends the tuple (for x in a, b if c).
  ExprPtr parse_tuple(bool with_condexpr, bool for_iter = false, bool explicit_parens = false) {
    const Token& at = cur();
    std::vector<ExprPtr> items;
    bool comma = false;
    for (;;) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
      }
      if (at_tuple_end(for_iter)) break;
      items.push_back(with_condexpr ? parse_expression(true) : parse_or());
    }
    if (items.empty() && !explicit_parens) fail("expected an expression, got " + describe(cur()), cur());
    if (items.size() == 1 && !comma) return std::move(items[0]);
    auto tuple = node(ExprKind::tuple, at);
    tuple->items = std::move(items);
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const Token& at = cur();
      advance();
      auto c = node(ExprKind::condexpr, at);
      c->b = parse_or();
      if (skip_name("else")) c->c = parse_condexpr();
      c->a = std::move(expr);
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      auto e = node(ExprKind::or_, cur());
      advance();
      e->a = std::move(left);
      e->b = parse_and();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      auto e = node(ExprKind::and_, cur());
      advance();
      e->a = std::move(left);
      e->b = parse_not();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = node(ExprKind::not_, cur());
      advance();
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    std::vector<ExprPtr> items;
    std::vector<std::string> ops;
    for (;;) {
      std::string op;
      if (cur().type == TokenType::op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::name && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      ops.push_back(op);
      items.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = node(ExprKind::compare, at);
    e->items.push_back(std::move(first));
    for (auto& i : items) e->items.push_back(std::move(i));
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, const Token& at) {
    auto e = node(ExprKind::binary, at);
    e->name = op;
    e->a = std::move(left);
    e->b = std::move(right);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token at = cur();
      advance();
      left = binary(at.text, std::move(left), parse_concat(), at);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token at = cur();
      advance();
      left = binary("~", std::move(left), parse_math2(), at);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token at = cur();
      advance();
      left = binary(at.text, std::move(left), parse_pow(), at);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token at = cur();
      advance();
      left = binary("**", std::move(left), parse_unary(true), at);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? ExprKind::neg : ExprKind::pos, cur());
      advance();
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case TokenType::name: {
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          auto e = node(ExprKind::literal, t);
          e->literal = Value::boolean(t.text[0] == 't' || t.text[0] == 'T');
          advance();
          return e;
        }
        if (t.text == "none" || t.text == "None") {
          auto e = node(ExprKind::literal, t);
          e->literal = Value::none();
          advance();
          return e;
        }
        auto e = node(ExprKind::name, t);
        e->name = t.text;
        advance();
        return e;
      }
      case TokenType::string: {
        auto e = node(ExprKind::literal, t);
        std::string s;
        while (cur().type == TokenType::string) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        e->literal = Value::string(std::move(s));
        return e;
      }
      case TokenType::integer: {
        auto e = node(ExprKind::literal, t);
        e->literal = Value::integer(t.i);
        advance();
        return e;
      }
      case TokenType::floating: {
        auto e = node(ExprKind::literal, t);
        e->literal = Value::floating(t.f);
        advance();
        return e;
      }
      case TokenType::op: {
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, false, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto e = node(ExprKind::list, t);
          advance();
          while (!is_op("]")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("]")) break;
            e->items.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          auto e = node(ExprKind::dict, t);
          advance();
          while (!is_op("}")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("}")) break;
            e->items.push_back(parse_expression(true));
            expect_op(":");
            e->items.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      }
      default: break;
    }
    fail("unexpected " + describe(t), t);
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        advance();
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token at = cur();
    if (skip_op(".")) {
      const Token& t = cur();
      if (t.type == TokenType::name) {
        auto e = node(ExprKind::getattr, at);
        e->a = std::move(obj);
        e->name = t.text;
        advance();
        return e;
      }
      if (t.type == TokenType::integer) {
        auto e = node(ExprKind::getitem, at);
        e->a = std::move(obj);
        e->b = node(ExprKind::literal, t);
        e->b->literal = Value::integer(t.i);
        advance();
        return e;
      }
      fail("expected a name or number after '.', got " + describe(t), t);
    }
    expect_op("[");
    ExprPtr start, stop, step;
    bool is_slice = false;
    if (!is_op(":")) start = parse_expression(true);
    if (skip_op(":")) {
      is_slice = true;
      if (!is_op("]") && !is_op(":")) stop = parse_expression(true);
      if (skip_op(":")) {
        if (!is_op("]")) step = parse_expression(true);
      }
    }
    expect_op("]");
    if (!is_slice) {
      auto e = node(ExprKind::getitem, at);
      e->a = std::move(obj);
      e->b = std::move(start);
      return e;
    }
    auto e = node(ExprKind::slice, at);
    e->a = std::move(obj);
    e->b = std::move(start);
    e->c = std::move(stop);
    e->d = std::move(step);
    return e;
  }

  void parse_args(std::vector<Arg>& args) {
    expect_op("(");
    bool keyword_seen = false;
    while (!is_op(")")) {
      if (!args.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs are not supported", cur());
      Arg a;
      if (cur().type == TokenType::name && peek().type == TokenType::op && peek().text == "=") {
        a.name = cur().text;
        advance();
        advance();
        keyword_seen = true;
      } else if (keyword_seen) {
        fail("positional argument follows keyword argument", cur());
      }
      a.value = parse_expression(true);
      args.push_back(std::move(a));
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::call, cur());
    e->a = std::move(callee);
    parse_args(e->args);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().type == TokenType::name) {
      advance();
      n += "." + cur().text;
      advance();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr operand) {
    auto e = node(ExprKind::filter, cur());
    e->name = dotted_name();
    e->a = std::move(operand);
    if (is_op("(")) parse_args(e->args);
    return e;
  }

  ExprPtr parse_test(ExprPtr operand) {
    auto e = node(ExprKind::test, cur());
    advance();  // is
    if (skip_name("not")) e->negated = true;
    e->name = dotted_name();
    e->a = std::move(operand);
    const Token& t = cur();
    if (is_op("(")) {
      parse_args(e->args);
    } else if ((t.type == TokenType::name || t.type == TokenType::string || t.type == TokenType::integer ||
                t.type == TokenType::floating || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with is", t);
      Arg a;
      a.value = parse_postfix(parse_primary());
      e->args.push_back(std::move(a));
    }
    return e;
  }

  std::vector<Token> t_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::shared_ptr<Program> parse(const std::string& source) { return Parser(tokenize(source)).run(); }

}  // namespace pie::jinja
