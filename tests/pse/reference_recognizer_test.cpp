// Tests of the test-only reference recognizer: it is the yardstick of every other pse test, so it is
// checked on small grammars whose languages are known by hand.
#include "reference_recognizer.h"

#include <gtest/gtest.h>

#include <string>

namespace pse::testing {
namespace {

Grammar one_rule(Grammar g, ExprId body) {
  g.set_root(g.add_rule("root", body));
  return g;
}

TEST(ReferenceRecognizer, BytesAndSequence) {
  Grammar g;
  ExprId body = g.add_sequence({g.add_bytes("ab"), g.add_bytes("c")});
  g = one_rule(std::move(g), body);
  EXPECT_TRUE(accepts(g, "abc"));
  EXPECT_FALSE(accepts(g, "ab"));
  EXPECT_FALSE(accepts(g, "abcd"));
  EXPECT_TRUE(is_viable_prefix(g, ""));
  EXPECT_TRUE(is_viable_prefix(g, "ab"));
  EXPECT_TRUE(is_viable_prefix(g, "abc"));
  EXPECT_FALSE(is_viable_prefix(g, "ac"));
}

TEST(ReferenceRecognizer, CharClassDecodesUtf8) {
  Grammar g;
  ExprId body = g.add_char_class({{0x4E00, 0x9FFF}});  // CJK ideographs
  g = one_rule(std::move(g), body);
  EXPECT_TRUE(accepts(g, "\xE4\xB8\x80"));  // U+4E00
  EXPECT_FALSE(accepts(g, "a"));
  EXPECT_TRUE(is_viable_prefix(g, "\xE4"));
  EXPECT_TRUE(is_viable_prefix(g, "\xE4\xB8"));
  EXPECT_FALSE(is_viable_prefix(g, "\xE3"));     // U+3000..U+3FFF: outside
  EXPECT_FALSE(is_viable_prefix(g, "\xE4\x41"));  // not a continuation byte
}

TEST(ReferenceRecognizer, NegatedClassExcludesSurrogatesAndOverlongs) {
  Grammar g;
  ExprId body = g.add_char_class({{'a', 'a'}}, /*negated=*/true);
  g = one_rule(std::move(g), body);
  EXPECT_FALSE(accepts(g, "a"));
  EXPECT_TRUE(accepts(g, "b"));
  EXPECT_TRUE(accepts(g, "\xF0\x9F\x98\x80"));  // U+1F600
  EXPECT_FALSE(accepts(g, "\xED\xA0\x80"));     // a surrogate, not a scalar value
  EXPECT_FALSE(accepts(g, "\xC1\xA1"));         // overlong 'a'
  EXPECT_FALSE(accepts(g, "\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(ReferenceRecognizer, RepeatBounds) {
  Grammar g;
  ExprId body = g.add_repeat(g.add_bytes("x"), 2, 4);
  g = one_rule(std::move(g), body);
  EXPECT_FALSE(accepts(g, "x"));
  EXPECT_TRUE(accepts(g, "xx"));
  EXPECT_TRUE(accepts(g, "xxxx"));
  EXPECT_FALSE(accepts(g, "xxxxx"));
  EXPECT_FALSE(is_viable_prefix(g, "xxxxx"));
  Grammar u;
  ExprId ub = u.add_repeat(u.add_char_class({{'0', '9'}}), 1, kUnbounded);
  u = one_rule(std::move(u), ub);
  EXPECT_FALSE(accepts(u, ""));
  EXPECT_TRUE(accepts(u, std::string(3000, '7')));
}

TEST(ReferenceRecognizer, RecursionAndEmptyRules) {
  // s ::= "(" s ")" s | ""   (balanced parentheses)
  Grammar g;
  RuleId s = g.declare_rule("s");
  ExprId body = g.add_choice({g.add_sequence({g.add_bytes("("), g.add_rule_ref(s), g.add_bytes(")"), g.add_rule_ref(s)}),
                              g.add_empty()});
  g.define_rule(s, body);
  g.set_root(s);
  EXPECT_TRUE(accepts(g, ""));
  EXPECT_TRUE(accepts(g, "(()())()"));
  EXPECT_FALSE(accepts(g, "(()"));
  EXPECT_TRUE(is_viable_prefix(g, "(()"));
  EXPECT_FALSE(is_viable_prefix(g, "())"));
  std::string deep = std::string(1000, '(') + std::string(1000, ')');
  EXPECT_TRUE(accepts(g, deep));
}

TEST(ReferenceRecognizer, DeadAlternativesAreNotViable) {
  Grammar g;
  ExprId dead = g.add_sequence({g.add_bytes("a"), g.add_char_class({})});
  ExprId body = g.add_choice({dead, g.add_bytes("bc")});
  g = one_rule(std::move(g), body);
  EXPECT_FALSE(is_viable_prefix(g, "a"));
  EXPECT_TRUE(is_viable_prefix(g, "b"));
  Grammar e;
  ExprId eb = e.add_char_class({});
  e = one_rule(std::move(e), eb);
  EXPECT_FALSE(is_viable_prefix(e, ""));
  EXPECT_FALSE(accepts(e, ""));
}

TEST(ReferenceRecognizer, UndefinedRuleThrows) {
  Grammar g;
  RuleId missing = g.declare_rule("missing");
  g.set_root(g.add_rule("root", g.add_rule_ref(missing)));
  EXPECT_THROW((void)accepts(g, ""), GrammarError);
}

}  // namespace
}  // namespace pse::testing
