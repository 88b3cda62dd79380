// The regex front-end, checked by behaviour: the languages it builds are run through the reference
// recognizer and compared with RE2 on random strings; every error path expects its column.
#include "pse/regex.h"

#include <gtest/gtest.h>
#include <re2/re2.h>

#include <random>
#include <string>
#include <vector>

#include "reference_recognizer.h"

namespace pse {
namespace {

using pse::testing::accepts;

bool full(std::string_view pattern, std::string_view text, RegexOptions options = {}) {
  return accepts(parse_regex(pattern, options), text);
}

bool search(std::string_view pattern, std::string_view text) {
  RegexOptions o;
  o.full_match = false;
  return accepts(parse_regex(pattern, o), text);
}

struct Case {
  const char* pattern;
  std::vector<std::string> yes;
  std::vector<std::string> no;
};

TEST(Regex, BasicLanguages) {
  const std::vector<Case> cases = {
      {"abc", {"abc"}, {"", "ab", "abcd", "ABC"}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"[a-c]+x?", {"a", "abcx", "ccc"}, {"", "x", "abxx", "d"}},
      {"[^a-c]", {"d", "\n", "\xC3\xA9"}, {"a", "b", "", "dd"}},
      {"a{3}", {"aaa"}, {"aa", "aaaa"}},
      {"a{2,}", {"aa", "aaaaaa"}, {"a"}},
      {"a{1,3}?b", {"ab", "aaab"}, {"b", "aaaab"}},
      {"(?:ab)*", {"", "ab", "abab"}, {"a", "aba"}},
      {"(?<year>\\d{4})-(\\d\\d)", {"2024-01"}, {"24-01", "2024-1"}},
      {"\\w+\\s\\W", {"a_9 !", "x\t-"}, {"a b", " !"}},
      {"\\D\\S", {"ab"}, {"1b", "a "}},
      {"\\t\\n\\r\\f\\v\\0", {std::string("\t\n\r\f\v\0", 6)}, {"tnrfv0"}},
      {"\\x41\\u0042\\u{1F600}\\cJ", {"AB\xF0\x9F\x98\x80\n"}, {"AB"}},
      {"\\uD83D\\uDE00", {"\xF0\x9F\x98\x80"}, {""}},
      {"[\\-a\\]]+", {"-a]"}, {"b"}},
      {"[a-]", {"a", "-"}, {"b"}},
      {"[\\b]", {"\b"}, {"b"}},
      {"[\\d\\s]", {"5", " "}, {"a"}},
      {"[^\\W\\d]", {"a", "_"}, {"1", "-"}},
      {"[]", {}, {"", "a"}},
      {"[^]", {"a", "\n"}, {"", "ab"}},
      {"a.c",
       {"abc",
        "a\xC3\xA9"
        "c"},
       {"a\nc", "a\rc",
        "a\xE2\x80\xA8"
        "c"}},
      {"a{,2}", {"a{,2}"}, {"a", "aa"}},  // not a quantifier: literal braces (Annex B)
      {"x{", {"x{"}, {"x"}},
      {"\\.\\*\\/\\-", {".*/-"}, {"a*/-"}},
      {"^ab$", {"ab"}, {"abc"}},
      {"^a|b$", {"a", "b"}, {"ab"}},
      {"", {""}, {"a"}},
      {"()", {""}, {"a"}},
      {"a{0}", {""}, {"a"}},
  };
  for (const Case& c : cases) {
    for (const std::string& y : c.yes)
      EXPECT_TRUE(full(c.pattern, y)) << c.pattern << " should accept '" << y << "'";
    for (const std::string& n : c.no)
      EXPECT_FALSE(full(c.pattern, n)) << c.pattern << " should reject '" << n << "'";
  }
}

TEST(Regex, UnicodeProperties) {
  EXPECT_TRUE(full("\\p{Lu}+", "ABC\xC3\x89"));  // ABCÉ
  EXPECT_FALSE(full("\\p{Lu}", "a"));
  EXPECT_TRUE(full("\\p{Uppercase_Letter}\\p{gc=Ll}\\p{General_Category=Nd}", "Ab7"));
  EXPECT_TRUE(full("\\p{L}", "\xE6\x97\xA5"));  // 日
  EXPECT_TRUE(full("\\P{L}", "1"));
  EXPECT_FALSE(full("\\P{L}", "x"));
  EXPECT_TRUE(full("\\p{Script=Greek}+", "\xCE\xB1\xCE\xB2"));  // αβ
  EXPECT_FALSE(full("\\p{sc=Grek}", "a"));
  EXPECT_TRUE(full("\\p{sc=Cyrillic}", "\xD0\x96"));          // Ж
  EXPECT_TRUE(full("\\p{Script=Han}", "\xE6\x97\xA5"));       // 日
  EXPECT_TRUE(full("\\p{Script=Hiragana}", "\xE3\x81\x82"));  // あ
  EXPECT_TRUE(full("\\p{Script=Katakana}", "\xE3\x82\xA2"));  // ア
  EXPECT_TRUE(full("\\p{Script=Arabic}", "\xD8\xB9"));        // ع
  EXPECT_TRUE(full("\\p{Script=Hebrew}", "\xD7\x90"));        // א
  EXPECT_TRUE(full("\\p{Script=Latin}", "z"));
  EXPECT_FALSE(full("\\p{Script=Latin}", "1"));
  EXPECT_TRUE(full("[\\p{N}\\p{P}]+", "1,2"));
  EXPECT_TRUE(full("[^\\p{L}]", "-"));
  EXPECT_TRUE(full("\\p{ASCII}\\p{Any}", "a\xF0\x9F\x98\x80"));
  EXPECT_TRUE(full("\\p{Assigned}", "\xF3\xB0\x80\x80"));  // U+F0000: private use, assigned
  EXPECT_FALSE(full("\\p{Assigned}", "\xCD\xB8"));         // U+0378: unassigned
}

TEST(Regex, CaseInsensitive) {
  RegexOptions i;
  i.case_insensitive = true;
  EXPECT_TRUE(full("abc", "AbC", i));
  EXPECT_TRUE(full("[a-c]+", "ABCabc", i));
  EXPECT_TRUE(full("k", "\xE2\x84\xAA", i));     // U+212A KELVIN SIGN folds to k
  EXPECT_TRUE(full("\xC3\xA9", "\xC3\x89", i));  // é / É
  EXPECT_FALSE(full("[^a]", "A", i));
  EXPECT_TRUE(full("\\w", "\xE2\x84\xAA", i));  // u-mode \w with i
  EXPECT_TRUE(full("x(?i:ab)y", "xABy"));
  EXPECT_FALSE(full("x(?i:ab)y", "XABy"));
  EXPECT_FALSE(full("(?-i:a)b", "Ab", i));
  EXPECT_TRUE(full("(?-i:a)b", "aB", i));
}

TEST(Regex, DotAll) {
  RegexOptions s;
  s.dot_all = true;
  EXPECT_TRUE(full("a.c", "a\nc", s));
  EXPECT_TRUE(full("(?s:.)", "\n"));
}

TEST(Regex, SearchSemantics) {
  EXPECT_TRUE(search("b", "abc"));
  EXPECT_TRUE(search("b", "b"));
  EXPECT_FALSE(search("b", "ac"));
  EXPECT_TRUE(search("^a", "abc"));
  EXPECT_FALSE(search("^a", "bac"));
  EXPECT_TRUE(search("c$", "abc"));
  EXPECT_FALSE(search("c$", "acb"));
  EXPECT_TRUE(search("^abc$", "abc"));
  EXPECT_FALSE(search("^abc$", "abcd"));
  EXPECT_TRUE(search("^a|c$", "xxc"));
  EXPECT_TRUE(search("^a|c$", "axx"));
  EXPECT_FALSE(search("^a|c$", "xax"));
  EXPECT_TRUE(search("", "anything\n"));
  EXPECT_TRUE(search("^$", ""));
  EXPECT_FALSE(search("^$", "x"));
  EXPECT_TRUE(search("x", "\n\nx\n"));
  // Anchors inside groups without alternatives or quantifiers anchor their top-level alternative.
  EXPECT_TRUE(search("(^ab$)", "ab"));
  EXPECT_FALSE(search("(^ab$)", "xab"));
  EXPECT_TRUE(search("(^gs://(.+))|(^http://(.+))", "http://x"));
  EXPECT_FALSE(search("(^gs://(.+))|(^http://(.+))", "see http://x"));
  EXPECT_TRUE(search("^$|(^(?:\\S+\\s+){0,3}\\S+$)", ""));
  EXPECT_TRUE(search("^$|(^(?:\\S+\\s+){0,3}\\S+$)", "a b c"));
  EXPECT_FALSE(search("^$|(^(?:\\S+\\s+){0,3}\\S+$)", "a b c d e"));
  EXPECT_TRUE(search("(^[^5]*$)|7", "1234"));
  EXPECT_TRUE(search("(^[^5]*$)|7", "5x7"));
  EXPECT_FALSE(search("(^[^5]*$)|7", "5"));
  EXPECT_TRUE(search("((^a))b", "abz"));
  EXPECT_FALSE(search("((^a))b", "zab"));
}

TEST(Regex, LargeRepetitionStaysCompact) {
  Grammar g = parse_regex("[a-z]{1,1000}x{5000}");
  EXPECT_LT(g.exprs().size(), 16u);
  std::string ok(999, 'q');
  ok += std::string(5000, 'x');
  EXPECT_TRUE(accepts(g, ok));
}

TEST(Regex, AddRegexAppendsAndLeavesGrammarUnchangedOnError) {
  Grammar g;
  ExprId word = add_regex(g, "[a-z]+");
  ExprId num = add_regex(g, "[0-9]+");
  g.set_root(g.add_rule("root", g.add_sequence({word, g.add_bytes("="), num})));
  EXPECT_TRUE(accepts(g, "abc=12"));
  EXPECT_FALSE(accepts(g, "abc=x"));
  std::size_t before = g.exprs().size();
  std::uint64_t hash = g.hash();
  EXPECT_THROW(add_regex(g, "ab(c"), GrammarError);
  EXPECT_EQ(g.exprs().size(), before);
  EXPECT_EQ(g.hash(), hash);
}

void expect_error(std::string_view pattern, std::size_t column, std::string_view fragment) {
  try {
    parse_regex(pattern);
    ADD_FAILURE() << "pattern /" << pattern << "/ should be rejected";
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.column(), column) << "pattern /" << pattern << "/: " << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[regex]", 0), 0u) << e.what();
  }
}

TEST(Regex, Errors) {
  expect_error("(a)\\1", 4, "backreference \\1");
  expect_error("(?<n>a)\\k<n>", 8, "named backreference");
  expect_error("a(?=b)", 2, "lookahead");
  expect_error("a(?!b)", 2, "lookahead");
  expect_error("(?<=a)b", 1, "lookbehind");
  expect_error("(?<!a)b", 1, "lookbehind");
  expect_error("a\\bc", 2, "word boundary \\b");
  expect_error("a\\B", 2, "word boundary \\B");
  expect_error("ab(c", 3, "expected ')'");
  expect_error("ab)c", 3, "unmatched ')'");
  expect_error("[abc", 1, "unterminated character class");
  expect_error("[z-a]", 2, "range out of order");
  expect_error("[\\d-z]", 2, "range end");
  expect_error("*a", 1, "nothing to repeat");
  expect_error("a**", 3, "nothing to repeat");
  expect_error("a{2}{3}", 5, "nothing to repeat");
  expect_error("a{3,2}", 2, "numbers out of order");
  expect_error("a^b", 2, "'^'");
  expect_error("(^a|b)", 2, "inside a group with alternatives");
  expect_error("(a|^b)", 4, "'^'");
  expect_error("(a$|b)", 3, "'$'");
  expect_error("(a|b$)", 5, "inside a group with alternatives");
  expect_error("(^a)*", 5, "quantifier cannot apply to a group");
  expect_error("(a$)+", 3, "'$'");
  expect_error("a(^b)", 3, "'^'");
  expect_error("(?:^|\\n)x", 4, "'^'");
  expect_error("a$b", 2, "'$'");
  expect_error("^*a", 2, "nothing to repeat");
  expect_error("\\xZZ", 1, "\\x");
  expect_error("\\u12", 1, "\\u");
  expect_error("\\u{110000}", 1, "U+10FFFF");
  expect_error("\\uD800", 1, "lone surrogate");
  expect_error("\\p{Nope}", 1, "Nope");
  expect_error("\\p{Latin}", 1, "Script=Latin");
  expect_error("\\p{scx=Latn}", 1, "Script_Extensions");
  expect_error("\\a", 1, "unknown escape \\a");
  expect_error("\\z", 1, "unknown escape \\z");
  expect_error("ab\\", 3, "lone '\\'");
  expect_error("\\01", 1, "octal");
  expect_error("(?x:a)", 1, "unknown group syntax '(?x'");
  expect_error("(?ix:a)", 4, "unknown modifier");
  expect_error("(?i)a", 4, "inline flags");
  expect_error("(?m:a)", 3, "multiline");
  expect_error("(?<1a>x)", 4, "digit");
  expect_error("\xC3\xA9\xC3(", 2, "UTF-8");
  // Columns count characters, not bytes.
  expect_error("\xC3\xA9\xC3\xA9(?=x)", 3, "lookahead");
}

TEST(Regex, DeepNestingIsAnErrorNotACrash) {
  std::string deep = std::string(30000, '(') + "a" + std::string(30000, ')');
  expect_error(deep, 257, "nested deeper");
  std::string ok = std::string(200, '(') + "a" + std::string(200, ')');
  EXPECT_TRUE(full(ok, "a"));
}

TEST(Regex, ManyAnchorsAndPropertiesStayCheap) {
  // Linear-time anchor checks and cached property sets: these finish in milliseconds.
  RegexOptions search;
  search.full_match = false;
  EXPECT_TRUE(accepts(parse_regex("a" + std::string(60000, '$'), search), "xa"));
  RegexOptions i;
  i.case_insensitive = true;
  std::string props;
  for (int k = 0; k < 2000; ++k) props += k % 2 ? "\\p{L}" : "\\W";
  EXPECT_NO_THROW(parse_regex(props, i));
  std::string many;
  for (int k = 0; k < 10000; ++k) many += "\\p{L}";  // ~650 ranges each: over the budget
  EXPECT_THROW(parse_regex(many), LimitError);
}

TEST(Regex, OversizedPatternIsALimitError) {
  EXPECT_THROW(parse_regex(std::string((1 << 20) + 1, 'a')), LimitError);
  EXPECT_NO_THROW(parse_regex(std::string(1 << 20, 'a')));
}

// Patterns in the common subset of ECMA-262 and RE2 syntax, over an alphabet avoiding the places
// where the two differ (\v in \s, \r and U+2028 for `.`).
TEST(Regex, AgreesWithRe2OnRandomStrings) {
  const std::vector<std::string> patterns = {
      "[a-c]+",
      "a*b?c{2,3}",
      "(ab|ba)*a?",
      "[^ab]*b",
      "\\d{1,3}(\\.\\d+)?",
      "\\w+@\\w+\\.com",
      "(a|b|)+c",
      "[a-z0-9_-]{2,4}",
      "x?y?z?",
      "(?:a{2})+",
      "[\\s,]*a[\\s,]*",
      "\\D\\W?",
      "(a|ab)(c|bcd)(d*)",
      "[^\\d\\s]+",
      "(xy|x|y){0,4}",
      "é+[à-ï]?",
      "a.c|\\.",
      "(?i)ab[c-e]",
      "[A-Fa-f0-9]{4}",
      "-?(0|[1-9][0-9]*)",
      "\\x41\\x{62}?",
      "(a+|b+)*c",
      "[.\\-]b|c\\.",
      "(?:(?:a|b)(?:c|d)){1,2}",
      "^a+|b+$",
      "(^x[yz]*$)|z",
      "^(?:ab|c)d?$",
      "((^a))b|c",
  };
  const std::string alphabet = "abcdxyzAB0129.-_@, \t\xC3\xA9\xC3\xA0\xC3\xAF";
  std::vector<std::string> symbols;
  for (std::size_t i = 0; i < alphabet.size();) {
    std::size_t len = (static_cast<unsigned char>(alphabet[i]) >= 0xC0) ? 2 : 1;
    symbols.push_back(alphabet.substr(i, len));
    i += len;
  }
  std::mt19937 rng(1234);
  int n_checked = 0, n_accepted = 0;
  for (const std::string& re2_pattern : patterns) {
    // ECMA spelling of the two RE2-only forms used above.
    std::string ecma = re2_pattern;
    RegexOptions options;
    if (ecma.rfind("(?i)", 0) == 0) {
      ecma = ecma.substr(4);
      options.case_insensitive = true;
    }
    for (std::size_t p; (p = ecma.find("\\x{")) != std::string::npos;) ecma.replace(p, 3, "\\u{");
    RE2 re(re2_pattern);
    ASSERT_TRUE(re.ok()) << re2_pattern;
    Grammar g = parse_regex(ecma, options);
    RegexOptions search_options = options;
    search_options.full_match = false;
    Grammar gs = parse_regex(ecma, search_options);
    for (int t = 0; t < 250; ++t) {
      std::string s;
      int len = static_cast<int>(rng() % 9);
      for (int k = 0; k < len; ++k) s += symbols[rng() % symbols.size()];
      bool expected = RE2::FullMatch(s, re);
      ASSERT_EQ(accepts(g, s), expected) << "/" << re2_pattern << "/ on '" << s << "'";
      if (t % 5 == 0) {
        ASSERT_EQ(accepts(gs, s), RE2::PartialMatch(s, re))
            << "search /" << re2_pattern << "/ on '" << s << "'";
      }
      ++n_checked;
      n_accepted += expected ? 1 : 0;
    }
  }
  EXPECT_GT(n_accepted, 100) << "too few positive cases to mean anything";
  EXPECT_EQ(n_checked, 7000);
}

}  // namespace
}  // namespace pse
