// Lark-style EBNF -> Grammar IR, the subset documented in docs/grammars.md. Rules and terminals
// both become IR rules (a pure context-free reading: no lexer, no maximal munch); /regex/ terminals
// go through add_regex (ECMA-262 syntax, plus Python's (?P<name>...) and leading (?i) / (?s)
// flags). llguidance's extensions: special tokens <name> / <[ids]> (token_syntax.h) and inline JSON
// Schemas `%json {...}`, both items of rules only. What cannot be expressed exactly (%ignore,
// %declare, templates, terminal priorities) is an error.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "char_sets.h"
#include "json_nesting.h"
#include "pse/json_schema.h"
#include "pse/lark.h"
#include "pse/regex.h"
#include "text_cursor.h"
#include "token_syntax.h"

namespace pse {
namespace {

constexpr int kMaxGroupDepth = 512;  // deeper nesting is an error, never a stack overflow
// All regex terminals together (each \p{L} is hundreds of ranges): 32 MiB of CharRange at most.
constexpr std::size_t kMaxClassRanges = 1 << 22;

// Lark's common.lark terminals, each restated as one self-contained definition in this syntax.
struct CommonTerminal {
  std::string_view name;
  std::string_view definition;
};
constexpr CommonTerminal kCommon[] = {
    {"DIGIT", R"(/[0-9]/)"},
    {"HEXDIGIT", R"(/[0-9a-fA-F]/)"},
    {"INT", R"(/[0-9]+/)"},
    {"SIGNED_INT", R"(/[+-]?[0-9]+/)"},
    {"DECIMAL", R"(/[0-9]+\.[0-9]*|\.[0-9]+/)"},
    {"FLOAT", R"(/[0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?/)"},
    {"SIGNED_FLOAT",
     R"(/[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)/)"},
    {"NUMBER", R"(/[0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+/)"},
    {"SIGNED_NUMBER",
     R"(/[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+)/)"},
    {"ESCAPED_STRING", R"(/"([^"\\\n]|\\[^\n])*"/)"},
    {"LETTER", R"(/[A-Za-z]/)"},
    {"UCASE_LETTER", R"(/[A-Z]/)"},
    {"LCASE_LETTER", R"(/[a-z]/)"},
    {"WORD", R"(/[A-Za-z]+/)"},
    {"CNAME", R"(/[A-Za-z_][A-Za-z0-9_]*/)"},
    {"WS_INLINE", R"(/[ \t]+/)"},
    {"WS", R"(/[ \t\f\r\n]+/)"},
    {"CR", R"(/\r/)"},
    {"LF", R"(/\n/)"},
    {"NEWLINE", R"(/(\r?\n)+/)"},
    {"SH_COMMENT", R"(/#[^\n]*/)"},
    {"CPP_COMMENT", R"(/\/\/[^\n]*/)"},
    {"C_COMMENT", R"(/\/\*([^*]|\*+[^*\/])*\*+\//)"},
    {"SQL_COMMENT", R"(/--[^\n]*/)"},
};

const CommonTerminal* find_common(std::string_view name) {
  for (const CommonTerminal& c : kCommon) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_lower(c) || is_upper(c) || is_digit(c) || c == '_'; }

// Terminal names are UPPERCASE ([_A-Z][_A-Z0-9]*), rule names lowercase ([_a-z][_a-z0-9]*).
bool is_terminal_name(std::string_view name) {
  bool letter = false;
  for (char c : name) {
    if (is_lower(c)) return false;
    letter = letter || is_upper(c);
  }
  return letter && !is_digit(name[0]);
}
bool is_rule_name(std::string_view name) {
  bool letter = false;
  for (char c : name) {
    if (is_upper(c)) return false;
    letter = letter || is_lower(c);
  }
  return letter && !is_digit(name[0]);
}

class LarkParser {
 public:
  LarkParser(Grammar& g, std::string_view text, std::string tag)
      : in_(text, std::move(tag)), g_(g) {}

  void parse_definitions() {
    skip_space(true);
    while (!in_.at_end()) {
      parse_statement();
      skip_space(true);
    }
  }

  // Parses the whole text as the body of one definition (the common terminals).
  ExprId parse_body(bool terminal) {
    in_terminal_ = terminal;
    skip_space(false);
    ExprId body = parse_expansions(0);
    skip_space(true);
    if (!in_.at_end()) in_.expected("the end of the definition");
    return body;
  }

  void finish(std::string_view start_rule) {
    for (RuleId r = 0; r < g_.rules().size(); ++r) {
      if (!g_.rule(r).defined) {
        auto it = first_reference_.find(r);
        in_.fail_at(it == first_reference_.end() ? 0 : it->second,
                    "undefined " +
                        std::string(is_terminal_name(g_.rule(r).name) ? "terminal" : "rule") +
                        " '" + g_.rule(r).name + "' (referenced here)");
      }
    }
    check_terminal_cycles();
    RuleId start = g_.find_rule(start_rule);
    if (start == Grammar::kNoRule) {
      throw GrammarError("[lark] the start rule '" + std::string(start_rule) + "' is not defined");
    }
    g_.set_root(start);
    g_.validate();
  }

 private:
  // Blanks and // comments; newlines too when `newlines` (inside brackets, between definitions).
  void skip_space(bool newlines) {
    while (!in_.at_end()) {
      char c = in_.peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        in_.advance();
      } else if (c == '/' && in_.peek(1) == '/') {
        while (!in_.at_end() && in_.peek() != '\n') in_.advance();
      } else if (c == '\\' &&
                 (in_.peek(1) == '\n' || (in_.peek(1) == '\r' && in_.peek(2) == '\n'))) {
        in_.advance(in_.peek(1) == '\n' ? 2 : 3);  // explicit line continuation
      } else {
        break;
      }
    }
  }

  // At depth 0 a definition continues on the next line only when that line starts with '|'.
  bool continues_on_next_line() {
    std::size_t save = in_.pos();
    skip_space(true);
    if (in_.peek() == '|') return true;
    in_.set_pos(save);
    return false;
  }

  std::string parse_name() { return in_.read_name(is_name_char, "a name"); }

  void parse_statement() {
    if (in_.peek() == '%') {
      parse_directive();
      return;
    }
    std::size_t def_pos = in_.pos();
    if (in_.peek() == '?' || in_.peek() == '!')
      in_.advance();  // tree shaping only: no effect on the language
    std::size_t name_pos = in_.pos();
    std::string name = parse_name();
    bool terminal = is_terminal_name(name);
    if (!terminal && !is_rule_name(name)) {
      in_.fail_at(
          name_pos,
          "'" + name + "' is neither a rule name (lowercase) nor a terminal name (UPPERCASE)");
    }
    if (in_.peek() == '{') in_.fail("templates (name{args}) are not supported");
    if (in_.peek() == '.') {
      std::size_t prio = in_.pos();
      in_.advance();
      if (in_.peek() == '-') in_.advance();
      if (!is_digit(in_.peek())) in_.expected("a priority number after '.'");
      while (is_digit(in_.peek())) in_.advance();
      if (terminal) {
        in_.fail_at(prio,
                    "terminal priorities are not supported: they steer Lark's lexer, and this "
                    "grammar is read without a lexer (every tokenization is allowed)");
      }
      // Rule priorities only choose among parses of the same text: no effect on the language.
    }
    skip_space(false);
    if (!in_.eat(':')) in_.expected("':' after the name '" + name + "'");
    skip_space(false);
    in_terminal_ = terminal;
    current_terminal_ = terminal ? name : std::string();
    if (terminal) terminal_order_.push_back(name);
    ExprId body = parse_expansions(0);
    in_terminal_ = false;
    RuleId rule = g_.declare_rule(name);
    if (g_.rule(rule).defined) in_.fail_at(def_pos, "'" + name + "' is defined twice");
    g_.define_rule(rule, body);
    end_of_statement(name);
  }

  void end_of_statement(const std::string& what) {
    skip_space(false);
    if (!in_.at_end() && in_.peek() != '\n' && in_.peek() != '\r') {
      in_.expected("a newline or the end of the text after '" + what + "'");
    }
  }

  void parse_directive() {
    std::size_t at = in_.pos();
    in_.advance();  // '%'
    std::string directive = parse_name();
    if (directive == "import") {
      parse_import();
      return;
    }
    if (directive == "ignore") {
      in_.fail_at(
          at,
          "%ignore is not supported: constrained output must say where whitespace and comments go; "
          "write them into the rules (e.g. WS?) where they are allowed");
    }
    if (directive == "json") {
      in_.fail_at(at,
                  "%json is not a statement: it is an item of a rule body, e.g. data: %json {...}");
    }
    if (directive == "llguidance") {
      skip_space(false);
      if (!in_.starts_with("{}"))
        in_.fail_at(at, "%llguidance options are not supported (only %llguidance {})");
      in_.advance(2);
      end_of_statement("%llguidance {}");
      return;
    }
    in_.fail_at(
        at, "the directive %" + directive + " is not supported (supported: %import common.NAME)");
  }

  // %import common.NAME [-> ALIAS] | %import common (NAME, NAME, ...)
  void parse_import() {
    skip_space(false);
    std::size_t module_pos = in_.pos();
    std::string module = parse_name();
    if (module != "common") {
      in_.fail_at(module_pos, "only the common module can be imported, got '" + module + "'");
    }
    if (in_.eat('.')) {
      std::size_t name_pos = in_.pos();
      std::string name = parse_name();
      skip_space(false);
      std::string alias = name;
      if (in_.starts_with("->")) {
        in_.advance(2);
        skip_space(false);
        alias = parse_name();
      }
      import_common(name, alias, name_pos);
    } else {
      skip_space(false);
      if (!in_.eat('(')) in_.expected("'.' or '(' after %import common");
      while (true) {
        skip_space(true);
        std::size_t name_pos = in_.pos();
        std::string name = parse_name();
        import_common(name, name, name_pos);
        skip_space(true);
        if (in_.eat(')')) break;
        if (!in_.eat(',')) in_.expected("',' or ')' in the import list");
      }
    }
    end_of_statement("%import");
  }

  void import_common(const std::string& name, const std::string& alias, std::size_t at) {
    const CommonTerminal* common = find_common(name);
    if (common == nullptr) {
      in_.fail_at(at, "common." + name +
                          " is not available (see docs/grammars.md for the common terminals)");
    }
    if (!is_terminal_name(alias))
      in_.fail_at(at, "the alias of a terminal must be a terminal name, got '" + alias + "'");
    RuleId rule = g_.declare_rule(alias);
    if (g_.rule(rule).defined) in_.fail_at(at, "'" + alias + "' is defined twice");
    LarkParser sub(g_, common->definition, "lark common." + name);
    g_.define_rule(rule, sub.parse_body(true));
  }

  ExprId parse_expansions(int depth) {
    std::vector<ExprId> alternatives;
    while (true) {
      alternatives.push_back(parse_alias(depth));
      if (depth == 0 && (in_.peek() == '\n' || in_.peek() == '\r') && !continues_on_next_line())
        break;
      if (!in_.eat('|')) break;
      skip_space(depth > 0);
    }
    return alternatives.size() == 1 ? alternatives[0] : g_.add_choice(std::move(alternatives));
  }

  ExprId parse_alias(int depth) {
    ExprId e = parse_expansion(depth);
    if (in_.starts_with("->")) {  // an alias only renames the tree node
      in_.advance(2);
      skip_space(false);
      parse_name();
      skip_space(depth > 0);
    }
    return e;
  }

  ExprId parse_expansion(int depth) {
    std::vector<ExprId> items;
    bool nested = depth > 0;
    while (!in_.at_end()) {
      char c = in_.peek();
      if (c == '|' || c == ')' || c == ']' || c == '\n' || c == '\r' ||
          (c == '-' && in_.peek(1) == '>'))
        break;
      ExprId atom = parse_atom(depth);
      skip_space(nested);
      items.push_back(parse_operators(atom, nested));
    }
    if (items.empty()) return g_.add_empty();
    return items.size() == 1 ? items[0] : g_.add_sequence(std::move(items));
  }

  std::uint32_t parse_count() { return in_.read_count("a number"); }

  // One postfix operator at most: stacked ones (x*+) would nest without bound; parentheses say it.
  ExprId parse_operators(ExprId atom, bool nested) {
    bool applied = false;
    while (true) {
      char c = in_.peek();
      std::size_t at = in_.pos();
      if (applied && (c == '?' || c == '*' || c == '+' || c == '~')) {
        in_.fail(std::string("'") + c +
                 "' cannot directly follow another operator; use parentheses");
      }
      applied = true;
      if (c == '?' || c == '*' || c == '+') {
        in_.advance();
        atom = g_.add_repeat(atom, c == '+' ? 1 : 0, c == '?' ? 1 : kUnbounded);
      } else if (c == '~') {
        in_.advance();
        skip_space(nested);
        std::uint32_t min = parse_count();
        std::uint32_t max = min;
        if (in_.starts_with("..")) {
          in_.advance(2);
          max = parse_count();
        }
        if (min > max) {
          in_.fail_at(at, "bad repetition ~ " + std::to_string(min) + ".." + std::to_string(max) +
                              ": the minimum is greater than the maximum");
        }
        atom = g_.add_repeat(atom, min, max);
      } else {
        return atom;
      }
      skip_space(nested);
    }
  }

  ExprId parse_atom(int depth) {
    std::size_t at = in_.pos();
    char c = in_.peek();
    if (c == '(' || c == '[') {
      if (depth + 1 > kMaxGroupDepth)
        in_.fail("groups nested deeper than " + std::to_string(kMaxGroupDepth) + " levels");
      in_.advance();
      skip_space(true);
      ExprId body = parse_expansions(depth + 1);
      char close = c == '(' ? ')' : ']';
      if (!in_.eat(close)) {
        in_.expected(std::string("'") + close + "' to close the " +
                     (c == '(' ? "group" : "optional") + " opened at " + in_.where(at));
      }
      return c == '[' ? g_.add_repeat(body, 0, 1) : body;
    }
    if (c == '"') return parse_string_or_range();
    if (c == '/') return parse_regex_terminal();
    if (is_name_char(c)) {
      std::string name = parse_name();
      if (in_.peek() == '{') in_.fail_at(at, "templates (name{args}) are not supported");
      if (!is_terminal_name(name) && !is_rule_name(name)) {
        in_.fail_at(at, "'" + name +
                            "' is neither a rule name (lowercase) nor a terminal name (UPPERCASE)");
      }
      if (in_terminal_ && !is_terminal_name(name)) {
        in_.fail_at(at, "terminal '" + current_terminal_ + "' cannot refer to the rule '" + name +
                            "' (terminals may only use terminals)");
      }
      RuleId rule = g_.declare_rule(name);
      first_reference_.emplace(rule, at);
      if (in_terminal_) terminal_edges_[current_terminal_].push_back({name, at});
      return g_.add_rule_ref(rule);
    }
    if (c == '<') {
      // A terminal is text (a regular language over bytes); a token is a step of the tokenizer.
      if (in_terminal_) {
        in_.fail("a token (<...>) cannot be used inside the terminal '" + current_terminal_ +
                 "' (terminals are text; use the token in a rule)");
      }
      return read_token_terminal(in_, g_, false);
    }
    if (c == '%' && in_.starts_with("%json") && !is_name_char(in_.peek(5))) {
      if (in_terminal_) {
        in_.fail("%json cannot be used inside the terminal '" + current_terminal_ +
                 "' (a terminal must be regular; use %json in a rule)");
      }
      return parse_json_schema(depth);
    }
    if (c == '%') in_.fail("directives must start a line");
    in_.expected("a string, a /regex/, a name, '(', '[', a token <...> or %json {...}");
  }

  // %json {...} | %json true | %json false: the JSON texts valid against the schema, spliced in as
  // the rules of json_schema_to_grammar renamed "%jsonN/..." (no Lark name holds '%' or '/').
  ExprId parse_json_schema(int depth) {
    std::size_t at = in_.pos();
    in_.advance(5);  // "%json"
    skip_space(depth > 0);
    std::size_t begin = in_.pos();
    if (in_.peek() == '{') {
      skip_json_object();
    } else if (in_.starts_with("true") || in_.starts_with("false")) {
      in_.advance(in_.peek() == 't' ? 4 : 5);
      if (is_name_char(in_.peek())) in_.set_pos(begin);
    }
    if (in_.pos() == begin) in_.expected("a JSON Schema after %json ({...}, true or false)");
    std::string_view slice = in_.text().substr(begin, in_.pos() - begin);
    nlohmann::ordered_json schema;
    try {
      // ordered: "properties" keep their order; bounded while read (json_nesting.h says why)
      schema = detail::parse_json_bounded<nlohmann::ordered_json>(slice, JsonSchemaOptions{}.max_nesting, "");
    } catch (const nlohmann::ordered_json::parse_error& e) {
      // e.byte counts the bytes read up to and including the offending one.
      std::size_t byte = e.byte == 0 ? 0 : std::min<std::size_t>(e.byte - 1, slice.size() - 1);
      std::string what = e.what();
      if (auto p = what.find(": "); p != std::string::npos) what = what.substr(p + 2);
      in_.fail_at(begin + byte, "the %json schema is not JSON: " + what);
    } catch (const LimitError& e) {
      throw LimitError("[lark] " + in_.where(at) + ": the %json schema " + e.what());
    }
    Grammar sub;
    try {
      sub = json_schema_to_grammar(schema);
    } catch (const SchemaError& e) {
      in_.fail_at(at, "in the %json schema: " + schema_message(e.what(), e.pointer()));
    } catch (const LimitError& e) {  // (a bound, not a malformed grammar: it stays a LimitError)
      throw LimitError("[lark] " + in_.where(at) + ": in the %json schema: " + schema_message(e.what(), ""));
    }
    return g_.embed(sub, "%json" + std::to_string(++n_json_) + "/");
  }

  // The schema error's message without its "[json_schema] " tag, led by the pointer of the schema
  // at fault when the message does not start with it already.
  static std::string schema_message(std::string what, const std::string& pointer) {
    constexpr std::string_view kTag = "[json_schema] ";
    if (what.starts_with(kTag)) what.erase(0, kTag.size());
    if (!pointer.empty() && !what.starts_with(pointer)) what = pointer + ": " + what;
    return what;
  }

  // Moves the cursor past the JSON object at the cursor, to just after its matching '}': brackets
  // are counted outside strings only, and a string ends at its first unescaped '"'. The slice is
  // then parsed as JSON, which reports anything else that is wrong.
  void skip_json_object() {
    std::size_t open = in_.pos();
    std::size_t n_open = 0;
    do {
      if (in_.at_end()) {
        in_.fail_at(open, "unterminated %json schema: expected '}' to close the '{' opened here");
      }
      char c = in_.peek();
      if (c == '"') {
        std::size_t quote = in_.pos();
        in_.advance();
        while (in_.peek() != '"') {
          // JSON strings hold no raw newline: stopping there points at the likely mistake.
          if (in_.at_end() || in_.peek() == '\n') {
            in_.fail_at(quote, "unterminated string in the %json schema: expected '\"'");
          }
          in_.advance(in_.peek() == '\\' ? 2 : 1);
        }
      } else if (c == '{' || c == '[') {
        ++n_open;
      } else if (c == '}' || c == ']') {
        --n_open;
      }
      in_.advance();
    } while (n_open > 0);
  }

  // One character of a "..." literal: Python string escapes.
  std::uint32_t parse_string_char(std::size_t open) {
    if (in_.at_end() || in_.peek() == '\n')
      in_.fail_at(open, "unterminated string literal: expected '\"'");
    if (in_.peek() != '\\') return in_.next_code_point();
    std::size_t start = in_.pos();
    in_.advance();
    char e = in_.peek();
    auto hex = [&](int n) -> std::uint32_t {
      std::uint64_t v = 0;
      if (!in_.read_hex_digits(n, v))
        in_.fail_at(start, std::string("bad escape: \\") + e + " needs " + std::to_string(n) +
                               " hex digits");
      if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF))
        in_.fail_at(start, "bad escape: not a Unicode scalar value");
      return static_cast<std::uint32_t>(v);
    };
    if (int n = hex_escape_digits(e)) {
      in_.advance();
      return hex(n);
    }
    if (std::optional<std::uint32_t> cp = simple_escape(e, "ntrfv0\\\"'")) {
      in_.advance();
      return *cp;
    }
    in_.fail_at(start, "bad escape \\" +
                           (in_.at_end() ? std::string() : in_.describe_at(in_.pos())) +
                           " in a string");
  }

  ExprId literal_expr(const std::vector<std::uint32_t>& cps, bool ignore_case) {
    if (!ignore_case) {
      std::string bytes;
      for (std::uint32_t cp : cps) charset::append_utf8(bytes, cp);
      return g_.add_bytes(std::move(bytes));
    }
    std::vector<ExprId> items;
    std::string run;
    for (std::uint32_t cp : cps) {
      std::vector<std::uint32_t> variants = charset::case_variants(cp);
      if (variants.size() == 1) {
        charset::append_utf8(run, cp);
        continue;
      }
      if (!run.empty()) items.push_back(g_.add_bytes(std::move(run))), run.clear();
      std::vector<CharRange> ranges;
      for (std::uint32_t v : variants) ranges.push_back({v, v});
      items.push_back(g_.add_char_class(std::move(ranges)));
    }
    if (!run.empty() || items.empty()) items.push_back(g_.add_bytes(std::move(run)));
    return items.size() == 1 ? items[0] : g_.add_sequence(std::move(items));
  }

  ExprId parse_string_or_range() {
    std::size_t open = in_.pos();
    std::vector<std::uint32_t> cps = read_string();
    if (in_.starts_with("..")) {
      in_.advance(2);
      std::size_t hi_pos = in_.pos();
      if (in_.peek() != '"') in_.expected("a string after '..'");
      std::vector<std::uint32_t> hi = read_string();
      if (cps.size() != 1)
        in_.fail_at(open, "a range \"a\"..\"z\" needs single characters on both sides");
      if (hi.size() != 1)
        in_.fail_at(hi_pos, "a range \"a\"..\"z\" needs single characters on both sides");
      if (cps[0] > hi[0]) in_.fail_at(open, "bad range: the start is after the end");
      return g_.add_char_class({{cps[0], hi[0]}});
    }
    bool ignore_case = false;
    if (in_.peek() == 'i' && !is_name_char(in_.peek(1))) {
      in_.advance();
      ignore_case = true;
    }
    return literal_expr(cps, ignore_case);
  }

  std::vector<std::uint32_t> read_string() {
    std::size_t open = in_.pos();
    in_.advance();  // '"'
    std::vector<std::uint32_t> cps;
    while (in_.peek() != '"' || in_.at_end()) cps.push_back(parse_string_char(open));
    in_.advance();
    return cps;
  }

  ExprId parse_regex_terminal() {
    std::size_t open = in_.pos();
    in_.advance();  // '/'
    std::size_t body_start = in_.pos();
    while (true) {
      if (in_.at_end() || in_.peek() == '\n') in_.fail_at(open, "unterminated regex: expected '/'");
      if (in_.peek() == '\\') {
        in_.advance();
        if (in_.at_end()) in_.fail_at(open, "unterminated regex: expected '/'");
        in_.advance();
        continue;
      }
      if (in_.peek() == '/') break;
      in_.advance();
    }
    std::string pattern(in_.text().substr(body_start, in_.pos() - body_start));
    in_.advance();  // '/'
    RegexOptions options;
    while (is_lower(in_.peek())) {
      char f = in_.peek();
      if (f == 'i') {
        options.case_insensitive = true;
      } else if (f == 's') {
        options.dot_all = true;
      } else {
        in_.fail(std::string("the regex flag '") + f + "' is not supported (supported: i, s)");
      }
      in_.advance();
    }
    // Python's global inline flags at the very start: (?i), (?s), (?is).
    std::size_t offset = 0;
    if (pattern.starts_with("(?")) {
      std::size_t k = 2;
      while (k < pattern.size() && (pattern[k] == 'i' || pattern[k] == 's')) ++k;
      if (k > 2 && k < pattern.size() && pattern[k] == ')') {
        for (std::size_t j = 2; j < k; ++j)
          (pattern[j] == 'i' ? options.case_insensitive : options.dot_all) = true;
        offset = k + 1;
      }
    }
    // ECMA's unescaped '/' is fine; Lark's "\/" becomes the identity escape "\/" (also fine).
    try {
      std::size_t before = g_.exprs().size();
      ExprId id = add_regex(g_, std::string_view(pattern).substr(offset), options);
      for (std::size_t e = before; e < g_.exprs().size(); ++e)
        n_ranges_ += g_.expr(e).ranges.size();
      if (n_ranges_ > kMaxClassRanges) {
        throw LimitError("[lark] " + in_.where(open) + ": the regex terminals need more than " +
                         std::to_string(kMaxClassRanges) + " character-class ranges in all");
      }
      return id;
    } catch (const GrammarError& e) {
      std::size_t col_in_pattern = e.column() == 0 ? 1 : e.column();
      // Map the pattern column (in characters) back to a byte offset in the text.
      std::size_t byte = body_start + offset;
      std::size_t end = in_.pos() - 1;  // the closing '/'
      for (std::size_t n = 1; n < col_in_pattern && byte < end; ++n) {
        ++byte;
        while (byte < end && (static_cast<unsigned char>(in_.text()[byte]) & 0xC0) == 0x80) ++byte;
      }
      std::string what = e.what();
      if (auto p = what.find(": "); p != std::string::npos) what = what.substr(p + 2);
      in_.fail_at(byte, "in /" + pattern + "/: " + what);
    }
  }

  // Lark forbids recursive terminals; so do we (a terminal must be a regular language). Iterative
  // depth-first search, so that a long chain of terminals cannot overflow the stack.
  void check_terminal_cycles() {
    std::unordered_map<std::string, int> state;  // 0 new, 1 on the path, 2 done
    for (const std::string& root : terminal_order_) {
      if (state[root] != 0) continue;
      std::vector<std::pair<std::string, std::size_t>> stack{{root, 0}};  // (terminal, next edge)
      state[root] = 1;
      while (!stack.empty()) {
        auto& [name, next] = stack.back();
        auto it = terminal_edges_.find(name);
        if (it == terminal_edges_.end() || next >= it->second.size()) {
          state[name] = 2;
          stack.pop_back();
          continue;
        }
        const auto& [to, at] = it->second[next++];
        int& s = state[to];
        if (s == 1)
          in_.fail_at(
              at, "terminal '" + to + "' is recursive (terminals must not refer to themselves)");
        if (s == 0) {
          s = 1;
          stack.push_back({to, 0});
        }
      }
    }
  }

  TextCursor in_;
  Grammar& g_;
  bool in_terminal_ = false;
  std::string current_terminal_;
  std::vector<std::string> terminal_order_;  // in definition order, so errors are deterministic
  std::size_t n_json_ = 0;    // %json schemas spliced in so far (their rules' prefix)
  std::size_t n_ranges_ = 0;  // character-class ranges added by regex terminals
  std::unordered_map<RuleId, std::size_t> first_reference_;
  std::unordered_map<std::string, std::vector<std::pair<std::string, std::size_t>>> terminal_edges_;
};

}  // namespace

Grammar parse_lark(std::string_view text, std::string_view start_rule) {
  Grammar g;
  LarkParser parser(g, text, "lark");
  parser.parse_definitions();
  parser.finish(start_rule);
  return g;
}

}  // namespace pse
