// CodePointDfa (pse/src/code_point_dfa.h) against independent oracles: RE2 full match for regexes, the
// plain conjunction of the parts for intersections, and the compiled grammar (the kGraph expression
// through the automaton and the matcher) plus the reference recognizer for dfa_to_expr.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <re2/re2.h>

#include "code_point_dfa.h"
#include "pse/compiler.h"
#include "pse/matcher.h"
#include "pse/regex.h"
#include "reference_recognizer.h"

namespace pse::detail {
namespace {

std::string utf8(const std::u32string& text) {
  std::string out;
  for (char32_t c : text) {
    const auto cp = static_cast<std::uint32_t>(c);
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

// Random strings over a few letters, digits, punctuation and non-ASCII code points, lengths 0..max_len.
std::vector<std::u32string> random_texts(std::size_t n, std::size_t max_len, std::uint32_t seed) {
  static const std::u32string alphabet = U"ab-z09._ @\u00E9\u4E2D\U0001F600";
  std::mt19937 rng(seed);
  std::vector<std::u32string> out;
  for (std::size_t i = 0; i < n; ++i) {
    std::u32string t;
    const std::size_t len = rng() % (max_len + 1);
    for (std::size_t k = 0; k < len; ++k) t += alphabet[rng() % alphabet.size()];
    out.push_back(t);
  }
  return out;
}

CodePointDfa regex_dfa(const std::string& pattern, std::size_t max_states = 4096) {
  Grammar g;
  const ExprId root = add_regex(g, pattern);
  auto dfa = dfa_from_expr(g, root, max_states);
  EXPECT_TRUE(dfa.has_value()) << pattern;
  return dfa.value_or(CodePointDfa{});
}

const std::vector<std::string> kPatterns = {
    "[a-z]+(-[a-z]+)*", "a*b?z", "(ab|a)*", "[0-9]{2,4}", "[^ab]*@.", "\u00E9|[\u4E00-\u9FFF]+", "(a|b|z){3}",
    "", "x?", "[\\s\\S]*ab[\\s\\S]*", "(0|9)+\\.(0|9)*", "(?:[a-b]{1,2}-){0,3}z"};

TEST(CodePointDfa, RegexAgreesWithRe2) {
  const auto texts = random_texts(3000, 7, 1);
  for (const std::string& pattern : kPatterns) {
    const CodePointDfa dfa = regex_dfa(pattern);
    const RE2 re("(?s)" + pattern);
    ASSERT_TRUE(re.ok()) << pattern;
    for (const auto& t : texts) {
      EXPECT_EQ(dfa.accepts(t), RE2::FullMatch(utf8(t), re)) << pattern << " on " << utf8(t);
    }
  }
}

TEST(CodePointDfa, MinimizeKeepsTheLanguageWithTheFewestStates) {
  const auto texts = random_texts(3000, 7, 2);
  for (const std::string& pattern : kPatterns) {
    const CodePointDfa dfa = regex_dfa(pattern);
    const CodePointDfa min = minimize(dfa);
    EXPECT_LE(min.n_states(), dfa.n_states()) << pattern;
    EXPECT_EQ(minimize(min).n_states(), min.n_states()) << pattern;  // nothing left to merge
    for (const auto& t : texts) EXPECT_EQ(min.accepts(t), dfa.accepts(t)) << pattern << " on " << utf8(t);
  }
  // Known minimal sizes: the subset construction keeps the states after "a" and after "c" in "ab|cb"
  // apart (each reads "b" in its own branch); two to four digits need a state per digit read.
  EXPECT_EQ(regex_dfa("ab|cb").n_states(), 4u);
  EXPECT_EQ(minimize(regex_dfa("ab|cb")).n_states(), 3u);
  EXPECT_EQ(minimize(regex_dfa("[0-9]{2,4}|x[0-9]{1,3}")).n_states(), 5u);
  EXPECT_EQ(minimize(CodePointDfa{}).n_states(), 0u);
}

TEST(CodePointDfa, IntersectionIsTheConjunction) {
  const auto texts = random_texts(4000, 8, 2);
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"[a-z]+(-[a-z]+)*", "[\\s\\S]*z[\\s\\S]*"}, {"(ab|a)*", "[\\s\\S]{0,4}"}, {"[^ab]*@.", "[\\s\\S]*\\.[\\s\\S]*"}};
  for (const auto& [p, q] : pairs) {
    const CodePointDfa a = regex_dfa(p), b = regex_dfa(q);
    const auto lengths = dfa_of_length(2, 5, 100);
    ASSERT_TRUE(lengths);
    const auto both = intersect({a, b, *lengths}, 4096);
    ASSERT_TRUE(both);
    for (const auto& t : texts) {
      const bool want = a.accepts(t) && b.accepts(t) && t.size() >= 2 && t.size() <= 5;
      EXPECT_EQ(both->accepts(t), want) << p << " & " << q << " on " << utf8(t);
    }
  }
  // Disjoint languages: the empty DFA.
  const auto none = intersect({regex_dfa("a+"), regex_dfa("b+")}, 4096);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(length_range(*none).has_value());
}

TEST(CodePointDfa, ComplementIsTheNegation) {
  const auto texts = random_texts(3000, 6, 5);
  for (const std::string& pattern : kPatterns) {
    const CodePointDfa dfa = regex_dfa(pattern);
    const auto other = complement(dfa, 4096);
    ASSERT_TRUE(other) << pattern;
    for (const auto& t : texts) EXPECT_NE(other->accepts(t), dfa.accepts(t)) << pattern << " on " << utf8(t);
  }
  const auto all = complement(CodePointDfa{}, 10);  // of the empty language: every string
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->accepts(U"") && all->accepts(U"\U0010FFFFx"));
  EXPECT_FALSE(complement(regex_dfa("[ab]{20}"), 10).has_value());
}

TEST(CodePointDfa, ExcludingAndLengths) {
  const auto ex = dfa_excluding({"ab", "a", "\u00E9z", ""}, 100);
  ASSERT_TRUE(ex);
  for (const auto& t : random_texts(2000, 3, 3)) {
    const bool listed = t == U"ab" || t == U"a" || t == U"\u00E9z" || t.empty();
    EXPECT_EQ(ex->accepts(t), !listed) << utf8(t);
  }
  const auto open = dfa_of_length(2, kUnbounded, 100);
  ASSERT_TRUE(open);
  EXPECT_FALSE(open->accepts(U"a"));
  EXPECT_TRUE(open->accepts(U"a\U0001F600bcdefgh"));
  EXPECT_FALSE(dfa_of_length(0, 5000, 4096).has_value());  // past the bound
  EXPECT_FALSE(dfa_of_length(3, 2, 100).has_value());      // min > max
  EXPECT_FALSE(dfa_excluding({std::string("\xFF")}, 100).has_value());
}

TEST(CodePointDfa, BoundsAreReported) {
  Grammar g;
  const ExprId big = add_regex(g, "[ab]{300}");
  EXPECT_FALSE(dfa_from_expr(g, big, 200).has_value());
  const ExprId ok = add_regex(g, "[ab]{100}");
  EXPECT_TRUE(dfa_from_expr(g, ok, 200).has_value());
  EXPECT_FALSE(intersect({regex_dfa("[\\s\\S]*"), *dfa_of_length(0, 300, 400)}, 200).has_value());
  // One DFA is only trimmed, under the same bound: 11 states reachable.
  EXPECT_FALSE(intersect({*dfa_of_length(0, 10, 20)}, 5).has_value());
  EXPECT_EQ(intersect({*dfa_of_length(0, 10, 20)}, 11)->n_states(), 11u);
}

// A product of one DFA keeps the states that reach acceptance, numbered breadth first from the start:
// the same DFA as a product of it with a DFA accepting everything.
TEST(CodePointDfa, IntersectionOfOneIsTheTrimmedDfa) {
  for (const char* pattern : {"ab|cb", "[0-9]{2,4}|x[0-9]{1,3}", "(a|b)*c(d|e)?", "\\d+(\\.\\d+)?"}) {
    const CodePointDfa dfa = regex_dfa(pattern);
    // The states but the start renumbered backwards, plus a state that never accepts (trimmed away).
    const auto n = static_cast<std::uint32_t>(dfa.n_states());
    auto renumber = [&](std::uint32_t s) { return s == 0 ? 0 : n - s; };
    CodePointDfa with_sink;
    with_sink.edges.resize(n + 1);
    with_sink.accepting.resize(n + 1, 0);
    for (std::uint32_t s = 0; s < n; ++s) {
      for (const auto& e : dfa.edges[s]) with_sink.edges[renumber(s)].push_back({e.lo, e.hi, renumber(e.target)});
      with_sink.accepting[renumber(s)] = dfa.accepting[s];
    }
    const std::uint32_t sink = n;
    with_sink.edges[sink].push_back({'z', 'z', sink});
    with_sink.edges[0].push_back({0x10FFFF, 0x10FFFF, sink});
    const auto alone = intersect({with_sink}, 4096);
    const auto product = intersect({with_sink, *dfa_of_length(0, kUnbounded, 4)}, 4096);
    ASSERT_TRUE(alone && product) << pattern;
    EXPECT_EQ(alone->n_states(), dfa.n_states()) << pattern;
    EXPECT_EQ(alone->accepting, product->accepting) << pattern;
    ASSERT_EQ(alone->edges.size(), product->edges.size()) << pattern;
    for (std::size_t s = 0; s < alone->edges.size(); ++s) {
      ASSERT_EQ(alone->edges[s].size(), product->edges[s].size()) << pattern << " state " << s;
      for (std::size_t i = 0; i < alone->edges[s].size(); ++i) {
        EXPECT_EQ(alone->edges[s][i].lo, product->edges[s][i].lo) << pattern;
        EXPECT_EQ(alone->edges[s][i].hi, product->edges[s][i].hi) << pattern;
        EXPECT_EQ(alone->edges[s][i].target, product->edges[s][i].target) << pattern;
      }
    }
  }
}

TEST(CodePointDfa, LengthRange) {
  EXPECT_EQ(length_range(regex_dfa("[0-9]{2,4}")), std::make_pair(2u, 4u));
  EXPECT_EQ(length_range(regex_dfa("ab|c")), std::make_pair(1u, 2u));
  EXPECT_EQ(length_range(regex_dfa("a+b")), std::make_pair(2u, kUnbounded));
  EXPECT_EQ(length_range(regex_dfa("")), std::make_pair(0u, 0u));
}

// The graph expression, compiled (automaton + matcher over a byte vocabulary) and through the reference
// recognizer, accepts exactly what the DFA accepts.
TEST(CodePointDfa, GraphExpressionMatchesTheDfa) {
  static const auto bytes = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
    return std::make_shared<const Vocabulary>(std::move(t), std::vector<TokenId>{}, std::vector<TokenId>{});
  }();
  const auto texts = random_texts(1500, 7, 4);
  for (const std::string& pattern : kPatterns) {
    const auto dfa = intersect({regex_dfa(pattern), *dfa_of_length(0, 6, 10)}, 4096);
    ASSERT_TRUE(dfa);
    if (dfa->empty()) continue;
    Grammar g;
    // Edges read their code points in brackets, so labels are multi-byte expressions.
    const ExprId body = dfa_to_expr(*dfa, g, [&](const std::vector<CharRange>& ranges) {
      return g.add_sequence({g.add_bytes("<"), g.add_char_class(ranges), g.add_bytes(">")});
    });
    g.set_root(g.add_rule("root", g.add_sequence({g.add_bytes("^"), body})));
    CompileOptions co;
    co.shared_tables = false;
    const auto compiled = compile_grammar(g, bytes, co);
    for (const auto& t : texts) {
      std::string text = "^";
      for (char32_t c : t) text += "<" + utf8(std::u32string(1, c)) + ">";
      Matcher m(compiled);
      const bool got = m.accept_bytes(text) && m.can_stop();
      EXPECT_EQ(got, dfa->accepts(t)) << pattern << " on " << text;
      if (t.size() <= 4) {
        EXPECT_EQ(pse::testing::accepts(g, text), dfa->accepts(t)) << pattern << " on " << text;
      }
    }
  }
}

TEST(CodePointDfa, AddGraphValidates) {
  Grammar g;
  const ExprId a = g.add_bytes("a");
  EXPECT_THROW((void)g.add_graph(0, {}, {}, {}), GrammarError);
  EXPECT_THROW((void)g.add_graph(2, {{0, 2, 0}}, {1}, {a}), GrammarError);  // target past the states
  EXPECT_THROW((void)g.add_graph(2, {{0, 1, 1}}, {1}, {a}), GrammarError);  // label past the labels
  EXPECT_THROW((void)g.add_graph(2, {{0, 1, 0}}, {2}, {a}), GrammarError);  // accepting past the states
  EXPECT_THROW((void)g.add_graph(2, {{0, 1, 0}}, {1}, {a + 7}), GrammarError);  // no such expression
  const ExprId graph = g.add_graph(2, {{0, 1, 0}, {1, 0, 0}}, {1, 1, 0}, {a});  // (aa)*a | ... : odd counts
  EXPECT_EQ(g.expr(graph).accepting, (std::vector<std::uint32_t>{0, 1}));
  g.set_root(g.add_rule("root", graph));
  EXPECT_NE(g.to_string().find("graph(accepting 0 1; 0->1: \"a\"; 1->0: \"a\")"), std::string::npos) << g.to_string();
}

}  // namespace
}  // namespace pse::detail
