// ECMA-262 regex (the JSON Schema `pattern` dialect, u-flag semantics) -> Grammar IR expressions.
// Annex B leniencies that do not change meaning are accepted: a `{` or `}` that is not a quantifier
// is a literal, and any ASCII punctuation may be escaped. Everything that cannot be expressed
// exactly (backreferences, lookaround, \b, anchors in the middle) is a GrammarError naming it and
// its column.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "char_sets.h"
#include "pse/regex.h"

namespace pse {
namespace {

// Generated patterns (the JSON Schema formats) run to tens of kilobytes; memory is bounded
// separately by the class-range budget, and every check is linear, so a large bound is safe.
constexpr std::size_t kMaxPatternBytes = 1 << 20;  // 1 MiB
constexpr std::size_t kMaxClassRanges = 1 << 20;   // 8 MiB of CharRange per pattern
constexpr int kMaxGroupDepth = 256;  // deeper nesting is an error, never a stack overflow

struct Flags {
  bool ignore_case = false;
  bool dot_all = false;
};

// A class atom: a single code point, or a set (\d, \p{..}) that cannot be a range end.
struct ClassAtom {
  bool is_set = false;
  std::uint32_t cp = 0;
  charset::Ranges set;
};

std::string quote_pattern(std::string_view pattern) {
  constexpr std::size_t kShown = 60;
  if (pattern.size() <= kShown) return "/" + std::string(pattern) + "/";
  std::size_t cut = kShown;
  while (cut > 0 && (static_cast<unsigned char>(pattern[cut]) & 0xC0) == 0x80)
    --cut;  // whole chars
  return "/" + std::string(pattern.substr(0, cut)) + ".../";
}

std::string describe(std::uint32_t cp) {
  if (cp >= 0x20 && cp < 0x7F) return std::string("'") + static_cast<char>(cp) + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  return buf;
}

bool is_ascii_alnum(std::uint32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

int hex_value(std::uint32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
  return -1;
}

class RegexParser {
 public:
  RegexParser(Grammar& grammar, std::string_view pattern, const RegexOptions& options)
      : g_(grammar), pattern_(pattern), options_(options) {
    if (pattern.size() > kMaxPatternBytes) {
      throw LimitError("[regex] pattern of " + std::to_string(pattern.size()) +
                       " bytes is over the limit of " + std::to_string(kMaxPatternBytes) +
                       " bytes");
    }
    for (std::size_t pos = 0; pos < pattern.size();) {
      std::uint32_t cp = 0;
      std::size_t len = charset::decode_utf8(pattern, pos, cp);
      if (len == 0) {
        throw GrammarError(
            "[regex] " + quote_pattern(pattern_) + " column " + std::to_string(cps_.size() + 1) +
                ": the pattern is not valid UTF-8 (byte offset " + std::to_string(pos) + ")",
            1, cps_.size() + 1);
      }
      cps_.push_back(cp);
      pos += len;
    }
  }

  ExprId parse() {
    Flags flags{options_.case_insensitive, options_.dot_all};
    std::vector<ExprId> alternatives;
    while (true) {
      anchored_start_ = anchored_end_ = false;
      at_alternative_start_ = true;
      ExprId body = parse_alternative(0, flags);
      alternatives.push_back(wrap_top_level(body));
      if (at_end()) break;
      if (peek() == ')') fail(pos_, "unmatched ')'");
      ++pos_;  // '|'
    }
    return alternatives.size() == 1 ? alternatives[0] : g_.add_choice(std::move(alternatives));
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    std::size_t column = at + 1;
    throw GrammarError(
        "[regex] " + quote_pattern(pattern_) + " column " + std::to_string(column) + ": " + what, 1,
        column);
  }

  bool at_end() const { return pos_ >= cps_.size(); }
  std::uint32_t peek(std::size_t ahead = 0) const {
    return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : 0xFFFFFFFFu;
  }
  bool eat(std::uint32_t c) {
    if (peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void note_anchor(std::size_t at) {
    anchor_positions_.push_back(at);
    ++n_anchors_;
  }

  ExprId any_char() { return g_.add_char_class({}, true); }

  // Adds a class, charging its ranges to the pattern's budget.
  ExprId add_class(charset::Ranges ranges, bool negated, std::size_t at) {
    n_ranges_ += ranges.size();
    if (n_ranges_ > kMaxClassRanges) {
      throw LimitError("[regex] " + quote_pattern(pattern_) + " column " + std::to_string(at + 1) +
                       ": the pattern's character classes need more than " +
                       std::to_string(kMaxClassRanges) + " ranges");
    }
    return g_.add_char_class(std::move(ranges), negated);
  }

  // full_match=false: an unanchored side may be preceded / followed by anything (JSON Schema
  // search).
  ExprId wrap_top_level(ExprId body) {
    if (options_.full_match) return body;
    std::vector<ExprId> seq;
    if (!anchored_start_) seq.push_back(g_.add_repeat(any_char(), 0, kUnbounded));
    seq.push_back(body);
    if (!anchored_end_) seq.push_back(g_.add_repeat(any_char(), 0, kUnbounded));
    return seq.size() == 1 ? body : g_.add_sequence(std::move(seq));
  }

  // True when, from `from` at group depth `depth`, only `$` and unquantified `)` follow up to the
  // end of the pattern or a top-level `|`: the `$` ends its top-level alternative.
  bool only_end_follows(std::size_t from, int depth) {
    if (end_tail_.empty()) compute_end_tail();
    const EndTail& t = end_tail_[from];
    if (t.kind == EndTail::kEnd) return true;
    return t.kind == EndTail::kBar && static_cast<std::size_t>(depth) == t.closes;
  }

  // For each position, what a scan over `$` and unquantified `)` meets first: the end of the
  // pattern, a `|` (after `closes` parentheses), or anything else. One backward pass, so that a
  // pattern of many `$` costs linear time.
  struct EndTail {
    enum Kind : std::uint8_t { kFail, kEnd, kBar } kind = kEnd;
    std::size_t closes = 0;
  };
  void compute_end_tail() {
    end_tail_.assign(cps_.size() + 1, EndTail{});
    for (std::size_t i = cps_.size(); i-- > 0;) {
      std::uint32_t c = cps_[i];
      EndTail& t = end_tail_[i];
      if (c == '|') {
        t = {EndTail::kBar, 0};
      } else if (c == '$') {
        t = end_tail_[i + 1];
      } else if (c == ')') {
        std::uint32_t n = i + 1 < cps_.size() ? cps_[i + 1] : 0;
        bool quantified =
            n == '*' || n == '+' || n == '?' || (n == '{' && quantifier_braces_at(i + 1));
        t = end_tail_[i + 1];
        if (quantified) t.kind = EndTail::kFail;
        ++t.closes;
      } else {
        t.kind = EndTail::kFail;
      }
    }
  }

  ExprId parse_disjunction(int depth, const Flags& flags, std::size_t& n_alternatives) {
    std::vector<ExprId> alternatives;
    while (true) {
      alternatives.push_back(parse_alternative(depth, flags));
      if (!eat('|')) break;
      at_alternative_start_ = false;  // a `^` after a nested `|` would anchor one branch only
    }
    n_alternatives = alternatives.size();
    return alternatives.size() == 1 ? alternatives[0] : g_.add_choice(std::move(alternatives));
  }

  ExprId literal_expr(std::uint32_t cp, const Flags& flags) {
    if (flags.ignore_case) {
      std::vector<std::uint32_t> variants = charset::case_variants(cp);
      if (variants.size() > 1) {
        std::vector<CharRange> ranges;
        for (std::uint32_t v : variants) ranges.push_back({v, v});
        return g_.add_char_class(std::move(ranges));
      }
    }
    std::string bytes;
    charset::append_utf8(bytes, cp);
    return g_.add_bytes(std::move(bytes));
  }

  ExprId parse_alternative(int depth, const Flags& flags) {
    std::vector<ExprId> items;
    std::string literal;  // adjacent unquantified literal characters, merged into one kBytes
    auto flush = [&] {
      if (!literal.empty()) {
        items.push_back(g_.add_bytes(std::move(literal)));
        literal.clear();
      }
    };
    while (!at_end() && peek() != '|' && peek() != ')') {
      std::size_t start = pos_;
      std::uint32_t c = peek();
      if (c == '^') {
        if (!at_alternative_start_) {
          fail(start,
               "'^' is only supported at the start of the pattern or of a top-level alternative "
               "(possibly inside groups without '|' or a quantifier)");
        }
        ++pos_;
        anchored_start_ = true;
        note_anchor(start);
        check_no_quantifier("'^'");
        continue;
      }
      if (c == '$') {
        if (!only_end_follows(pos_ + 1, depth)) {
          fail(start,
               "'$' is only supported at the end of the pattern or of a top-level alternative "
               "(possibly inside groups without '|' or a quantifier)");
        }
        ++pos_;
        anchored_end_ = true;
        note_anchor(start);
        check_no_quantifier("'$'");
        continue;
      }
      if (c != '(')
        at_alternative_start_ = false;  // a group clears it once its body consumes something
      bool is_literal = false;
      std::uint32_t literal_cp = 0;
      std::size_t anchors_before = n_anchors_;
      ExprId atom = parse_atom(depth, flags, is_literal, literal_cp);
      std::uint32_t min = 0, max = 0;
      std::size_t quantifier_pos = pos_;
      if (parse_quantifier(min, max)) {
        if (n_anchors_ > anchors_before) {
          fail(quantifier_pos, "a quantifier cannot apply to a group that contains '^' or '$'");
        }
        if (is_literal) atom = literal_expr(literal_cp, flags);
        flush();
        items.push_back(g_.add_repeat(atom, min, max));
      } else if (is_literal &&
                 !(flags.ignore_case && charset::case_variants(literal_cp).size() > 1)) {
        charset::append_utf8(literal, literal_cp);
      } else {
        if (is_literal) atom = literal_expr(literal_cp, flags);
        flush();
        items.push_back(atom);
      }
    }
    flush();
    if (items.empty()) return g_.add_empty();
    return items.size() == 1 ? items[0] : g_.add_sequence(std::move(items));
  }

  void check_no_quantifier(const char* what) {
    std::uint32_t c = peek();
    if (c == '*' || c == '+' || c == '?' || (c == '{' && quantifier_braces_at(pos_))) {
      fail(pos_,
           std::string("nothing to repeat: a quantifier cannot follow the assertion ") + what);
    }
  }

  // Reads decimal digits at pos_; false when there are none. Fails on overflow.
  bool read_number(std::uint32_t& out) {
    if (at_end() || peek() < '0' || peek() > '9') return false;
    std::size_t start = pos_;
    std::uint64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v >= kUnbounded) fail(start, "repetition count is too large (the limit is 4294967294)");
      ++pos_;
    }
    out = static_cast<std::uint32_t>(v);
    return true;
  }

  // Whether cps_[at] starts a well-formed {n}, {n,} or {n,m}.
  bool quantifier_braces_at(std::size_t at) const {
    std::size_t i = at + 1;
    auto digits = [&] {
      std::size_t s = i;
      while (i < cps_.size() && cps_[i] >= '0' && cps_[i] <= '9') ++i;
      return i > s;
    };
    if (!digits()) return false;
    if (i < cps_.size() && cps_[i] == ',') {
      ++i;
      digits();
    }
    return i < cps_.size() && cps_[i] == '}';
  }

  bool parse_quantifier(std::uint32_t& min, std::uint32_t& max) {
    std::size_t start = pos_;
    std::uint32_t c = peek();
    if (c == '*') {
      ++pos_, min = 0, max = kUnbounded;
    } else if (c == '+') {
      ++pos_, min = 1, max = kUnbounded;
    } else if (c == '?') {
      ++pos_, min = 0, max = 1;
    } else if (c == '{' && quantifier_braces_at(pos_)) {
      ++pos_;
      read_number(min);
      max = min;
      if (eat(',')) {
        if (!read_number(max)) max = kUnbounded;
      }
      ++pos_;  // '}'
      if (min > max) {
        fail(start, "numbers out of order in {" + std::to_string(min) + "," + std::to_string(max) +
                        "} quantifier");
      }
    } else {
      return false;
    }
    eat('?');  // lazy: the same language
    std::uint32_t n = peek();
    if (n == '*' || n == '+' || n == '?' || (n == '{' && quantifier_braces_at(pos_))) {
      fail(pos_, "nothing to repeat: a quantifier cannot follow another quantifier");
    }
    return true;
  }

  ExprId parse_atom(int depth, const Flags& flags, bool& is_literal, std::uint32_t& literal_cp) {
    std::size_t start = pos_;
    std::uint32_t c = peek();
    switch (c) {
      case '.':
        ++pos_;
        if (flags.dot_all) return any_char();
        return g_.add_char_class(charset::line_terminators(), true);
      case '(':
        return parse_group(depth, flags);
      case '[':
        return parse_class(flags);
      case '\\':
        return parse_escape(flags, is_literal, literal_cp);
      case '*':
      case '+':
      case '?':
        fail(start, std::string("nothing to repeat before '") + static_cast<char>(c) + "'");
      case '{':
        if (quantifier_braces_at(pos_)) fail(start, "nothing to repeat before '{'");
        break;
      default:
        break;
    }
    ++pos_;
    is_literal = true;
    literal_cp = c;
    return 0;
  }

  ExprId parse_group(int depth, const Flags& outer) {
    std::size_t open = pos_;
    if (depth + 1 > kMaxGroupDepth) {
      fail(open, "groups nested deeper than " + std::to_string(kMaxGroupDepth) + " levels");
    }
    ++pos_;  // '('
    Flags flags = outer;
    if (eat('?')) {
      std::uint32_t c = peek();
      if (c == ':') {
        ++pos_;
      } else if (c == '=' || c == '!') {
        fail(open, std::string("lookahead (?") + static_cast<char>(c) +
                       "...) is not supported (a grammar cannot look ahead without consuming)");
      } else if (c == '<' && (peek(1) == '=' || peek(1) == '!')) {
        fail(open,
             std::string("lookbehind (?<") + static_cast<char>(peek(1)) + "...) is not supported");
      } else if (c == '<' || (c == 'P' && peek(1) == '<')) {
        pos_ += c == 'P' ? 2 : 1;
        std::size_t name_start = pos_;
        while (!at_end() && peek() != '>') {
          std::uint32_t n = peek();
          if (!(is_ascii_alnum(n) || n == '_' || n == '$' || n >= 0x80)) {
            fail(pos_, "invalid character " + describe(n) + " in a group name");
          }
          ++pos_;
        }
        if (at_end()) fail(name_start, "unterminated group name: expected '>'");
        if (pos_ == name_start) fail(name_start, "empty group name");
        if (cps_[name_start] >= '0' && cps_[name_start] <= '9')
          fail(name_start, "a group name cannot start with a digit");
        ++pos_;  // '>'
      } else if (c == 'i' || c == 's' || c == 'm' || c == '-') {
        parse_modifiers(flags);
      } else {
        std::string shown =
            at_end() ? std::string("")
                     : (c >= 0x20 && c < 0x7F ? std::string(1, static_cast<char>(c)) : describe(c));
        fail(open, "unknown group syntax '(?" + shown + "'");
      }
    }
    std::size_t anchors_before = n_anchors_;
    std::size_t n_alternatives = 0;
    ExprId body = parse_disjunction(depth + 1, flags, n_alternatives);
    if (!eat(')'))
      fail(open, "expected ')' to close the group opened at column " + std::to_string(open + 1));
    if (n_anchors_ > anchors_before && n_alternatives > 1) {
      fail(anchor_positions_[anchors_before],
           "'^' and '$' are not supported inside a group with alternatives ('|')");
    }
    return body;
  }

  // (?i:...), (?s:...), (?-i:...) (ES2025 modifiers). `m` is rejected: multiline anchors mean
  // line starts inside the text, which the anchor rules here do not express.
  void parse_modifiers(Flags& flags) {
    bool on = true;
    while (!at_end() && peek() != ':') {
      std::uint32_t c = peek();
      if (c == '-' && on) {
        on = false;
      } else if (c == 'i') {
        flags.ignore_case = on;
      } else if (c == 's') {
        flags.dot_all = on;
      } else if (c == 'm') {
        fail(pos_, "the m (multiline) modifier is not supported");
      } else if (c == ')') {
        fail(pos_, "inline flags (?flags) without ':' are not supported; write (?flags:...)");
      } else {
        fail(pos_, "unknown modifier " + describe(c) + " in (?...:)");
      }
      ++pos_;
    }
    if (!eat(':')) fail(pos_, "expected ':' after the modifiers");
  }

  // Reads \u escapes (after "\u"): XXXX, a surrogate pair \uD83D\uDE00, or {X..}.
  std::uint32_t parse_unicode_escape(std::size_t esc_start) {
    if (eat('{')) {
      std::uint64_t v = 0;
      std::size_t digits = 0;
      while (!at_end() && hex_value(peek()) >= 0) {
        v = v * 16 + static_cast<std::uint64_t>(hex_value(peek()));
        if (v > kMaxCodePoint) fail(esc_start, "\\u{...} code point is past U+10FFFF");
        ++pos_, ++digits;
      }
      if (digits == 0 || !eat('}'))
        fail(esc_start, "malformed \\u{...} escape: expected hex digits and '}'");
      return static_cast<std::uint32_t>(v);
    }
    auto four = [&](std::size_t at) -> std::uint32_t {
      std::uint32_t v = 0;
      for (int i = 0; i < 4; ++i) {
        int h = pos_ < cps_.size() ? hex_value(peek()) : -1;
        if (h < 0) fail(at, "malformed \\u escape: expected 4 hex digits");
        v = v * 16 + static_cast<std::uint32_t>(h);
        ++pos_;
      }
      return v;
    };
    std::uint32_t v = four(esc_start);
    if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
      std::size_t save = pos_;
      pos_ += 2;
      bool ok = true;
      std::uint32_t lo = 0;
      for (int i = 0; i < 4; ++i) {
        int h = hex_value(peek());
        if (h < 0) {
          ok = false;
          break;
        }
        lo = lo * 16 + static_cast<std::uint32_t>(h);
        ++pos_;
      }
      if (ok && lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
      pos_ = save;
    }
    return v;
  }

  // Character escapes common to atoms and classes; returns false when `c` is not one.
  bool character_escape(std::uint32_t c, std::size_t esc_start, bool in_class, std::uint32_t& cp) {
    switch (c) {
      case 't':
        cp = '\t';
        return true;
      case 'n':
        cp = '\n';
        return true;
      case 'r':
        cp = '\r';
        return true;
      case 'f':
        cp = '\f';
        return true;
      case 'v':
        cp = '\v';
        return true;
      case '0':
        if (peek() >= '0' && peek() <= '9')
          fail(esc_start, "octal escapes (\\0 followed by a digit) are not supported");
        cp = 0;
        return true;
      case 'c': {
        std::uint32_t l = peek();
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')))
          fail(esc_start, "\\c must be followed by a letter");
        ++pos_;
        cp = l % 32;
        return true;
      }
      case 'x': {
        int h1 = hex_value(peek());
        int h2 = hex_value(peek(1));
        if (h1 < 0 || h2 < 0) fail(esc_start, "malformed \\x escape: expected 2 hex digits");
        pos_ += 2;
        cp = static_cast<std::uint32_t>(h1 * 16 + h2);
        return true;
      }
      case 'u':
        cp = parse_unicode_escape(esc_start);
        if (cp >= 0xD800 && cp <= 0xDFFF && !in_class) {
          fail(esc_start, "lone surrogate " + describe(cp) + " cannot appear in UTF-8 text");
        }
        return true;
      default:
        if (!is_ascii_alnum(c) && c != '_') {  // identity escape: syntax characters and punctuation
          cp = c;
          return true;
        }
        return false;
    }
  }

  // \d \D \w \W \s \S \p{..} \P{..}; returns false when `c` is not a class escape.
  bool class_escape(std::uint32_t c, std::size_t esc_start, const Flags& flags,
                    charset::Ranges& out) {
    switch (c) {
      case 'd':
        out = charset::digit();
        return true;
      case 'D':
        out = charset::complement(charset::digit());
        return true;
      case 's':
        out = charset::space();
        return true;
      case 'S':
        out = charset::complement(charset::space());
        return true;
      case 'w':
        out = flags.ignore_case ? cached_set("w/i") : charset::word();
        return true;
      case 'W':
        out = flags.ignore_case ? cached_set("W/i") : charset::complement(charset::word());
        return true;
      case 'p':
      case 'P': {
        if (!eat('{'))
          fail(esc_start,
               std::string("\\") + static_cast<char>(c) + " must be followed by {property}");
        std::string body;
        while (!at_end() && peek() != '}') {
          std::uint32_t b = peek();
          if (!(is_ascii_alnum(b) || b == '_' || b == '='))
            fail(pos_, "invalid character " + describe(b) + " in \\p{...}");
          body.push_back(static_cast<char>(b));
          ++pos_;
        }
        if (!eat('}')) fail(esc_start, "unterminated \\p{...}: expected '}'");
        std::string key =
            std::string(1, static_cast<char>(c)) + body + (flags.ignore_case ? "/i" : "");
        if (auto it = set_cache_.find(key); it != set_cache_.end()) {
          out = it->second;
          return true;
        }
        std::string error;
        std::optional<charset::Ranges> set = charset::unicode_property(body, error);
        if (!set) fail(esc_start, error);
        // With i, \p{Lu} matches what its case closure matches (u-mode Canonicalize).
        charset::Ranges r = flags.ignore_case ? charset::case_closure(*set) : std::move(*set);
        out = c == 'P' ? charset::complement(charset::normalize(std::move(r))) : std::move(r);
        set_cache_.emplace(std::move(key), out);
        return true;
      }
      default:
        return false;
    }
  }

  // \w and \W under the i flag, computed once per pattern.
  const charset::Ranges& cached_set(const std::string& key) {
    auto it = set_cache_.find(key);
    if (it != set_cache_.end()) return it->second;
    charset::Ranges closed = charset::case_closure(charset::word());
    charset::Ranges value = key == "W/i" ? charset::complement(closed) : closed;
    return set_cache_.emplace(key, std::move(value)).first->second;
  }

  [[noreturn]] void unsupported_escape(std::uint32_t c, std::size_t esc_start) {
    if (c >= '1' && c <= '9') {
      fail(esc_start, "backreference \\" + std::string(1, static_cast<char>(c)) +
                          " is not supported (a grammar cannot refer back to matched text)");
    }
    if (c == 'k') fail(esc_start, "named backreference \\k is not supported");
    if (c == 'b' || c == 'B') {
      fail(esc_start, std::string("word boundary \\") + static_cast<char>(c) + " is not supported");
    }
    if (c == 0xFFFFFFFFu) fail(esc_start, "the pattern ends with a lone '\\'");
    fail(esc_start,
         "unknown escape \\" + (c < 0x80 ? std::string(1, static_cast<char>(c)) : describe(c)));
  }

  ExprId parse_escape(const Flags& flags, bool& is_literal, std::uint32_t& literal_cp) {
    std::size_t esc_start = pos_;
    ++pos_;  // '\'
    std::uint32_t c = peek();
    if (c != 0xFFFFFFFFu) ++pos_;
    charset::Ranges set;
    if (class_escape(c, esc_start, flags, set)) return add_class(std::move(set), false, esc_start);
    std::uint32_t cp = 0;
    if (c != 0xFFFFFFFFu && character_escape(c, esc_start, false, cp)) {
      is_literal = true;
      literal_cp = cp;
      return 0;
    }
    unsupported_escape(c, esc_start);
  }

  ClassAtom parse_class_atom(const Flags& flags) {
    ClassAtom atom;
    std::size_t start = pos_;
    std::uint32_t c = peek();
    ++pos_;
    if (c != '\\') {
      atom.cp = c;
      return atom;
    }
    std::uint32_t e = peek();
    if (e == 0xFFFFFFFFu) fail(start, "the pattern ends inside a character class escape");
    ++pos_;
    if (class_escape(e, start, flags, atom.set)) {
      atom.is_set = true;
      return atom;
    }
    if (e == 'b') {
      atom.cp = 0x08;  // backspace inside a class
      return atom;
    }
    if (e == '-') {
      atom.cp = '-';
      return atom;
    }
    if (character_escape(e, start, true, atom.cp)) return atom;
    unsupported_escape(e, start);
  }

  ExprId parse_class(const Flags& flags) {
    std::size_t open = pos_;
    ++pos_;  // '['
    bool negated = eat('^');
    charset::Ranges ranges;
    while (true) {
      if (at_end()) fail(open, "unterminated character class: expected ']'");
      if (peek() == ']') {
        ++pos_;
        break;
      }
      std::size_t atom_start = pos_;
      ClassAtom lo = parse_class_atom(flags);
      if (peek() == '-' && peek(1) != ']' && peek(1) != 0xFFFFFFFFu) {
        ++pos_;  // '-'
        std::size_t hi_start = pos_;
        ClassAtom hi = parse_class_atom(flags);
        if (lo.is_set || hi.is_set) {
          fail(lo.is_set ? atom_start : hi_start,
               "a class escape like \\d cannot be a range end in a character class");
        }
        if (lo.cp > hi.cp) {
          fail(atom_start,
               "range out of order in character class: " + describe(lo.cp) + "-" + describe(hi.cp));
        }
        ranges.push_back({lo.cp, hi.cp});
      } else if (lo.is_set) {
        ranges.insert(ranges.end(), lo.set.begin(), lo.set.end());
      } else {
        ranges.push_back({lo.cp, lo.cp});
      }
    }
    if (flags.ignore_case) ranges = charset::case_closure(ranges);
    return add_class(std::move(ranges), negated, open);
  }

  Grammar& g_;
  std::string_view pattern_;
  RegexOptions options_;
  std::vector<std::uint32_t> cps_;  // the pattern, decoded
  std::size_t pos_ = 0;
  bool anchored_start_ = false;
  bool anchored_end_ = false;
  bool at_alternative_start_ = true;
  std::vector<EndTail> end_tail_;
  std::unordered_map<std::string, charset::Ranges>
      set_cache_;              // \p{..} and \w/i sets, by spelling  // computed at the first `$`
  std::size_t n_ranges_ = 0;   // character-class ranges added so far
  std::size_t n_anchors_ = 0;  // anchors seen so far
  std::vector<std::size_t> anchor_positions_;  // their positions, for errors found later
};

}  // namespace

ExprId add_regex(Grammar& grammar, std::string_view pattern, const RegexOptions& options) {
  // Build into a scratch grammar, then append: a throw leaves `grammar` unchanged, at a cost
  // proportional to the pattern rather than to the grammar. Regexes never refer to rules.
  Grammar scratch;
  ExprId root = RegexParser(scratch, pattern, options).parse();
  std::vector<ExprId> map(scratch.exprs().size());
  for (ExprId i = 0; i < scratch.exprs().size(); ++i) {
    const Expr& e = scratch.expr(i);
    std::vector<ExprId> children;
    for (ExprId c : e.children) children.push_back(map[c]);
    switch (e.kind) {
      case ExprKind::kEmpty:
        map[i] = grammar.add_empty();
        break;
      case ExprKind::kBytes:
        map[i] = grammar.add_bytes(e.bytes);
        break;
      case ExprKind::kCharClass:
        map[i] = grammar.add_char_class(e.ranges, e.negated);
        break;
      case ExprKind::kSequence:
        map[i] = grammar.add_sequence(std::move(children));
        break;
      case ExprKind::kChoice:
        map[i] = grammar.add_choice(std::move(children));
        break;
      case ExprKind::kRepeat:
        map[i] = grammar.add_repeat(children.at(0), e.min, e.max);
        break;
      case ExprKind::kGraph:
        map[i] = grammar.add_graph(e.graph_states, e.edges, e.accepting, std::move(children));
        break;
      case ExprKind::kRuleRef:
      case ExprKind::kToken:
        throw GrammarError("[regex] internal: a regex produced a rule reference or a token");
    }
  }
  return map[root];
}

Grammar parse_regex(std::string_view pattern, const RegexOptions& options) {
  Grammar grammar;
  ExprId body = RegexParser(grammar, pattern, options).parse();
  grammar.set_root(grammar.add_rule("root", body));
  return grammar;
}

}  // namespace pse
