// GBNF (llama.cpp's grammar format) -> Grammar IR. Follows llama.cpp's grammar parser: names are
// [A-Za-z0-9_-]+; spaces, tabs and `#` comments separate items; a newline ends a rule except inside
// parentheses and after `::=` or `|`; every character (in literals and classes) is a Unicode code
// point, so "\xFF" is U+00FF; tokens `<[id]>`, `<name>` and `!<...>` read whole tokens (token_syntax.h). Groups become nested IR expressions and repetitions kRepeat (never
// unrolled).
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "char_sets.h"
#include "pse/gbnf.h"
#include "text_cursor.h"
#include "token_syntax.h"

namespace pse {
namespace {

constexpr int kMaxGroupDepth = 512;  // deeper nesting is an error, never a stack overflow
// Repetitions stacked on one item (`"a"*+` is ("a"*)+, as llama.cpp reads it): each nests the expression
// one level deeper, so they are bounded too.
constexpr int kMaxStackedRepetitions = 4;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : in_(text, "gbnf") {}

  Grammar parse(std::string_view root_rule) {
    skip_space(true);
    while (!in_.at_end()) {
      parse_rule();
      skip_space(true);
    }
    // Undefined rules, reported at their first reference.
    for (RuleId r = 0; r < g_.rules().size(); ++r) {
      if (!g_.rule(r).defined) {
        auto it = first_reference_.find(r);
        std::size_t at = it == first_reference_.end() ? 0 : it->second;
        in_.fail_at(at, "undefined rule '" + g_.rule(r).name + "' (referenced here)");
      }
    }
    RuleId root = g_.find_rule(root_rule);
    if (root == Grammar::kNoRule) {
      throw GrammarError("[gbnf] the root rule '" + std::string(root_rule) + "' is not defined");
    }
    g_.set_root(root);
    g_.validate();
    return std::move(g_);
  }

 private:
  // Skips blanks and comments; newlines too when `newlines` (inside parentheses, after ::= and |).
  void skip_space(bool newlines) {
    while (!in_.at_end()) {
      char c = in_.peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        in_.advance();
      } else if (c == '#') {
        while (!in_.at_end() && in_.peek() != '\n' && in_.peek() != '\r') in_.advance();
      } else {
        break;
      }
    }
  }

  std::string parse_name() { return in_.read_name(is_name_char, "a rule name"); }

  void parse_rule() {
    std::size_t name_pos = in_.pos();
    std::string name = parse_name();
    skip_space(false);
    if (!in_.starts_with("::=")) in_.expected("'::=' after the rule name '" + name + "'");
    in_.advance(3);
    skip_space(true);
    ExprId body = parse_alternates(0);
    RuleId rule = g_.declare_rule(name);
    if (g_.rule(rule).defined) in_.fail_at(name_pos, "rule '" + name + "' is defined twice");
    g_.define_rule(rule, body);
    // A rule ends at a newline or the end of the text.
    if (!in_.at_end() && in_.peek() != '\n' && in_.peek() != '\r') {
      in_.expected("a newline or the end of the text after the rule '" + name + "'");
    }
  }

  ExprId parse_alternates(int depth) {
    std::vector<ExprId> alternatives{parse_sequence(depth)};
    while (in_.eat('|')) {
      skip_space(true);
      alternatives.push_back(parse_sequence(depth));
    }
    return alternatives.size() == 1 ? alternatives[0] : g_.add_choice(std::move(alternatives));
  }

  // One character of a literal or class, escapes included. `quote` is the closing delimiter.
  std::uint32_t parse_char() {
    std::size_t start = in_.pos();
    if (in_.at_end()) in_.fail("unexpected end of the text");
    if (in_.peek() != '\\') return in_.next_code_point();
    in_.advance();
    char e = in_.peek();
    auto hex = [&](int n) -> std::uint32_t {
      std::uint64_t v = 0;
      if (!in_.read_hex_digits(n, v)) {
        in_.fail_at(start, "bad escape: \\" + std::string(1, e) + " needs " + std::to_string(n) +
                               " hex digits, got " + in_.describe_at(in_.pos()));
      }
      if (v > kMaxCodePoint) in_.fail_at(start, "bad escape: code point past U+10FFFF");
      if (v >= 0xD800 && v <= 0xDFFF)
        in_.fail_at(start, "bad escape: surrogate code points cannot appear in UTF-8 text");
      return static_cast<std::uint32_t>(v);
    };
    if (int n = hex_escape_digits(e)) {
      in_.advance();
      return hex(n);
    }
    if (std::optional<std::uint32_t> cp = simple_escape(e, "trn\\\"[]-")) {
      in_.advance();
      return *cp;
    }
    in_.fail_at(start, "bad escape \\" +
                           (in_.at_end() ? std::string() : in_.describe_at(in_.pos())) +
                           " (known: \\x \\u \\U \\t \\r \\n \\\\ \\\" \\[ \\] \\-)");
  }

  ExprId parse_literal() {
    std::size_t open = in_.pos();
    in_.advance();  // '"'
    std::string bytes;
    while (in_.peek() != '"') {
      if (in_.at_end()) in_.fail_at(open, "unterminated string literal: expected '\"'");
      charset::append_utf8(bytes, parse_char());
    }
    in_.advance();
    return g_.add_bytes(std::move(bytes));
  }

  ExprId parse_class() {
    std::size_t open = in_.pos();
    in_.advance();  // '['
    bool negated = in_.eat('^');
    std::vector<CharRange> ranges;
    while (in_.peek() != ']') {
      if (in_.at_end()) in_.fail_at(open, "unterminated character class: expected ']'");
      std::size_t lo_pos = in_.pos();
      std::uint32_t lo = parse_char();
      std::uint32_t hi = lo;
      if (in_.peek() == '-' && in_.peek(1) != ']' && !in_.at_end()) {
        in_.advance();
        if (in_.at_end()) in_.fail_at(open, "unterminated character class: expected ']'");
        hi = parse_char();
        if (lo > hi) {
          in_.fail_at(lo_pos, "bad range in character class: start " + describe_cp(lo) +
                                  " is after end " + describe_cp(hi));
        }
      }
      ranges.push_back({lo, hi});
    }
    in_.advance();  // ']'
    return g_.add_char_class(std::move(ranges), negated);
  }

  static std::string describe_cp(std::uint32_t cp) {
    if (cp >= 0x21 && cp < 0x7F) return std::string("'") + static_cast<char>(cp) + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
    return buf;
  }

  std::uint32_t parse_count() { return in_.read_count("an integer in {m,n}"); }

  ExprId parse_sequence(int depth) {
    std::vector<ExprId> items;
    bool nested = depth > 0;
    int stacked = 0;  // repetitions applied to the last item so far
    while (!in_.at_end()) {
      char c = in_.peek();
      std::size_t at = in_.pos();
      if (c == '"') {
        items.push_back(parse_literal());
      } else if (c == '[') {
        items.push_back(parse_class());
      } else if (is_name_char(c)) {
        std::string name = parse_name();
        RuleId rule = g_.declare_rule(name);
        first_reference_.emplace(rule, at);
        items.push_back(g_.add_rule_ref(rule));
      } else if (c == '(') {
        if (depth + 1 > kMaxGroupDepth)
          in_.fail("groups nested deeper than " + std::to_string(kMaxGroupDepth) + " levels");
        in_.advance();
        skip_space(true);
        ExprId group = parse_alternates(depth + 1);
        if (!in_.eat(')')) {
          in_.expected("')' to close the group opened at " + in_.where(at));
        }
        items.push_back(group);
      } else if (c == '.') {
        in_.advance();
        items.push_back(g_.add_char_class({}, true));
      } else if (c == '<' || (c == '!' && in_.peek(1) == '<')) {
        const bool negated = in_.eat('!');
        items.push_back(read_token_terminal(in_, g_, negated));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) in_.fail(std::string("'") + c + "' has no preceding item to repeat");
        if (stacked == kMaxStackedRepetitions) {
          in_.fail(std::string("'") + c + "': more than " + std::to_string(kMaxStackedRepetitions) +
                   " repetitions in a row on one item; use parentheses");
        }
        std::uint32_t min = 0, max = kUnbounded;
        in_.advance();
        if (c == '+') {
          min = 1;
        } else if (c == '?') {
          max = 1;
        } else if (c == '{') {
          skip_space(nested);
          min = parse_count();
          skip_space(nested);
          if (in_.eat('}')) {
            max = min;
          } else if (in_.eat(',')) {
            skip_space(nested);
            if (is_digit(in_.peek())) {
              max = parse_count();
              skip_space(nested);
            }
            if (!in_.eat('}')) in_.expected("'}' to close {m,n}");
          } else {
            in_.expected("',' or '}' in {m,n}");
          }
          if (min > max)
            in_.fail_at(at, "bad repetition {" + std::to_string(min) + "," + std::to_string(max) +
                                "}: min is greater than max");
        }
        items.back() = g_.add_repeat(items.back(), min, max);
        ++stacked;
        skip_space(nested);
        continue;
      } else {
        break;
      }
      stacked = 0;
      skip_space(nested);
    }
    // Inside a group the caller reports a missing ')'.
    if (!in_.at_end() && !nested) {
      char c = in_.peek();
      bool ok_end = c == '|' || c == '\n' || c == '\r';
      if (!ok_end) {
        if (c == ')') in_.fail("unmatched ')'");
        in_.expected(
            "a literal, a character class, a rule name, '(', '.', a token <...>, a repetition, '|' or "
            "the end of the rule");
      }
    }
    if (items.empty()) return g_.add_empty();
    return items.size() == 1 ? items[0] : g_.add_sequence(std::move(items));
  }

  TextCursor in_;
  Grammar g_;
  std::unordered_map<RuleId, std::size_t> first_reference_;  // rule -> byte offset of its first use
};

}  // namespace

Grammar parse_gbnf(std::string_view text, std::string_view root_rule) {
  return GbnfParser(text).parse(root_rule);
}

}  // namespace pse
