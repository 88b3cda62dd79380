// Grammar building blocks for tool calls and reasoning.
#include "tools/grammar_parts.h"

#include <utf8.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <vector>

namespace pie::tools_detail {

using pse::CharRange;
using pse::ExprId;
using pse::Grammar;
using pse::RuleId;

ExprId add_whitespace(Grammar& g, std::uint32_t max_run) {
  if (max_run == 0) return g.add_empty();
  return g.add_repeat(g.add_char_class({{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}}), 0, max_run);
}

std::u32string decode_utf8(std::string_view s) {
  // utf8cpp also rejects overlong forms and surrogates, which a marker must not contain either.
  if (auto bad = utf8::find_invalid(s.begin(), s.end()); bad != s.end()) {
    throw pse::GrammarError("[tool_grammar] marker is not valid UTF-8 at byte " +
                            std::to_string(bad - s.begin()));
  }
  std::u32string out;
  utf8::unchecked::utf8to32(s.begin(), s.end(), std::back_inserter(out));
  return out;
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  utf8::unchecked::utf32to8(text.begin(), text.end(), std::back_inserter(out));
  return out;
}

namespace {

ExprId any_char_but(Grammar& g, std::vector<char32_t> excluded) {
  std::vector<CharRange> ranges;
  for (char32_t c : excluded)
    ranges.push_back({static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c)});
  return g.add_char_class(std::move(ranges), /*negated=*/true);
}

ExprId literal(Grammar& g, std::u32string_view cps) { return g.add_bytes(encode_utf8(cps)); }

// Strings over the alphabet without `c0` that do not start with `rest` (whose characters differ
// from c0): a proper prefix of rest, or rest[0..j) then a character other than rest[j] (and c0),
// then anything without c0. Nested so the size is linear in the marker.
ExprId not_starting_with(Grammar& g, char32_t c0, std::u32string_view rest) {
  const ExprId tail = g.add_repeat(any_char_but(g, {c0}), 0, pse::kUnbounded);
  ExprId inner = g.add_empty();  // after a full `rest`: nothing (that would be the marker)
  for (std::size_t j = rest.size(); j-- > 0;) {
    const ExprId branch = g.add_sequence({any_char_but(g, {c0, rest[j]}), tail});
    // Here rest[0..j) was read: stop, diverge now, or read rest[j] and go on (unless that completes
    // it).
    std::vector<ExprId> options = {g.add_empty(), branch};
    if (j + 1 < rest.size())
      options.push_back(g.add_sequence({literal(g, rest.substr(j, 1)), inner}));
    inner = g.add_choice(std::move(options));
  }
  return inner;
}

// The KMP automaton of `m` as right-linear rules: state i = i characters of m matched.
ExprId kmp_text_without(Grammar& g, const std::u32string& m, const std::string& prefix) {
  const std::size_t n = m.size();
  std::vector<std::size_t> fail(n, 0);
  for (std::size_t i = 1, k = 0; i < n; ++i) {
    while (k > 0 && m[i] != m[k]) k = fail[k - 1];
    if (m[i] == m[k]) ++k;
    fail[i] = k;
  }
  auto step = [&](std::size_t state, char32_t c) {
    while (state > 0 && m[state] != c) state = fail[state - 1];
    return m[state] == c ? state + 1 : 0;
  };
  std::vector<char32_t> alphabet(m.begin(), m.end());
  std::sort(alphabet.begin(), alphabet.end());
  alphabet.erase(std::unique(alphabet.begin(), alphabet.end()), alphabet.end());
  std::vector<RuleId> rules(n);
  for (std::size_t i = 0; i < n; ++i)
    rules[i] = g.declare_rule(prefix + "text_" + std::to_string(i));
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<ExprId> options = {
        g.add_empty(), g.add_sequence({any_char_but(g, alphabet), g.add_rule_ref(rules[0])})};
    for (char32_t c : alphabet) {
      const std::size_t next = step(i, c);
      if (next == n) continue;  // would complete the marker
      options.push_back(
          g.add_sequence({literal(g, std::u32string(1, c)), g.add_rule_ref(rules[next])}));
    }
    g.define_rule(rules[i], g.add_choice(std::move(options)));
  }
  return g.add_rule_ref(rules[0]);
}

}  // namespace

ExprId add_text_without(Grammar& g, std::string_view marker, const std::string& rule_prefix) {
  const std::u32string m = decode_utf8(marker);
  if (m.empty()) throw pse::GrammarError("[tool_grammar] text_without: empty marker");
  const char32_t c0 = m[0];
  const ExprId head = g.add_repeat(any_char_but(g, {c0}), 0, pse::kUnbounded);
  if (m.size() == 1) return head;
  if (std::find(m.begin() + 1, m.end(), c0) != m.end()) return kmp_text_without(g, m, rule_prefix);
  // Every occurrence of the marker starts at a c0, and c0 does not recur inside it: the text is a
  // run without c0, then segments "c0 S" where S has no c0 and does not start with the marker's
  // rest.
  const ExprId segment =
      g.add_sequence({literal(g, m.substr(0, 1)), not_starting_with(g, c0, m.substr(1))});
  return g.add_sequence({head, g.add_repeat(segment, 0, pse::kUnbounded)});
}

ExprId add_text_not_starting_with(Grammar& g, std::string_view prefix) {
  const std::u32string p = decode_utf8(prefix);
  if (p.empty()) throw pse::GrammarError("[tool_grammar] text_not_starting_with: empty prefix");
  const ExprId any = g.add_repeat(g.add_char_class({}, /*negated=*/true), 0, pse::kUnbounded);
  // A proper prefix of p, or p[0..j) then a character other than p[j], then anything.
  ExprId inner = g.add_empty();
  for (std::size_t j = p.size(); j-- > 0;) {
    std::vector<ExprId> options = {g.add_empty(), g.add_sequence({any_char_but(g, {p[j]}), any})};
    if (j + 1 < p.size()) options.push_back(g.add_sequence({literal(g, p.substr(j, 1)), inner}));
    inner = g.add_choice(std::move(options));
  }
  return inner;
}

}  // namespace pie::tools_detail
