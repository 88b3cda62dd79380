// The grammar IR: builders, class normalization, rules, validation, rendering and the content hash.
#include "pse/grammar.h"

#include <gtest/gtest.h>

#include <string>

namespace pse {
namespace {

TEST(Grammar, CharClassIsSortedAndMerged) {
  Grammar g;
  ExprId c = g.add_char_class({{'x', 'z'}, {'a', 'c'}, {'b', 'f'}, {'g', 'g'}, {'0', '9'}});
  const Expr& e = g.expr(c);
  EXPECT_EQ(e.kind, ExprKind::kCharClass);
  ASSERT_EQ(e.ranges.size(), 3u);
  EXPECT_EQ(e.ranges[0], (CharRange{'0', '9'}));
  EXPECT_EQ(e.ranges[1], (CharRange{'a', 'g'}));  // [a-c] [b-f] [g] merge, adjacency included
  EXPECT_EQ(e.ranges[2], (CharRange{'x', 'z'}));
  EXPECT_FALSE(e.negated);
}

TEST(Grammar, CharClassDropsSurrogatesAndMergesAcrossThem) {
  Grammar g;
  const Expr& only = g.expr(g.add_char_class({{0xD800, 0xDFFF}}));
  EXPECT_TRUE(only.ranges.empty());
  const Expr& across = g.expr(g.add_char_class({{0xD000, 0xD900}, {0xDF00, 0xE000}}));
  ASSERT_EQ(across.ranges.size(), 1u);
  EXPECT_EQ(across.ranges[0], (CharRange{0xD000, 0xE000}));
}

TEST(Grammar, CharClassRejectsBadRanges) {
  Grammar g;
  EXPECT_THROW(g.add_char_class({{'z', 'a'}}), GrammarError);
  EXPECT_THROW(g.add_char_class({{0, 0x110000}}), GrammarError);
  EXPECT_TRUE(g.exprs().empty());  // nothing added on a throw
}

TEST(Grammar, BuildersRejectUnknownChildren) {
  Grammar g;
  ExprId a = g.add_bytes("a");
  EXPECT_THROW(g.add_sequence({a, 7}), GrammarError);
  EXPECT_THROW(g.add_choice({9}), GrammarError);
  EXPECT_THROW(g.add_repeat(5, 0, 1), GrammarError);
  EXPECT_THROW(g.add_repeat(a, 3, 2), GrammarError);
  EXPECT_THROW(g.add_rule_ref(0), GrammarError);
  EXPECT_EQ(g.exprs().size(), 1u);
  ExprId r = g.add_repeat(a, 1, 1000);
  EXPECT_EQ(g.expr(r).children.size(), 1u);
  EXPECT_EQ(g.expr(r).max, 1000u);
}

TEST(Grammar, RulesDeclareDefineFind) {
  Grammar g;
  RuleId item = g.declare_rule("item");
  EXPECT_EQ(g.declare_rule("item"), item);  // redeclaring returns the same id
  RuleId root = g.add_rule("root", g.add_repeat(g.add_rule_ref(item), 0, kUnbounded));
  g.define_rule(item, g.add_bytes("x"));
  EXPECT_THROW(g.define_rule(item, g.add_bytes("y")), GrammarError);
  EXPECT_THROW(g.declare_rule(""), GrammarError);
  EXPECT_EQ(g.find_rule("item"), item);
  EXPECT_EQ(g.find_rule("root"), root);
  EXPECT_EQ(g.find_rule("nope"), Grammar::kNoRule);
  g.set_root(root);
  EXPECT_NO_THROW(g.validate());
  EXPECT_THROW(g.set_root(42), GrammarError);
}

TEST(Grammar, ValidateNamesUndefinedRuleAndReferrer) {
  Grammar g;
  RuleId missing = g.declare_rule("value");
  RuleId root = g.add_rule("root", g.add_sequence({g.add_bytes("["), g.add_rule_ref(missing)}));
  try {
    g.validate();
    FAIL() << "validate without a root must throw";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("no root"), std::string::npos) << e.what();
  }
  g.set_root(root);
  try {
    g.validate();
    FAIL() << "undefined rule must throw";
  } catch (const GrammarError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'value'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'root'"), std::string::npos) << msg;
  }
}

TEST(Grammar, ValidateUndefinedRoot) {
  Grammar g;
  g.set_root(g.declare_rule("root"));
  EXPECT_THROW(g.validate(), GrammarError);
}

Grammar small_grammar(const std::string& literal) {
  Grammar g;
  RuleId ws =
      g.add_rule("ws", g.add_repeat(g.add_char_class({{' ', ' '}, {'\t', '\t'}}), 0, kUnbounded));
  RuleId root =
      g.add_rule("root", g.add_sequence({g.add_bytes(literal), g.add_rule_ref(ws),
                                         g.add_choice({g.add_bytes("a"), g.add_empty()})}));
  g.set_root(root);
  return g;
}

TEST(Grammar, HashIsStableAndContentSensitive) {
  Grammar a = small_grammar("key");
  Grammar b = small_grammar("key");
  Grammar c = small_grammar("kez");
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a.hash(), c.hash());
  Grammar copy = a;
  EXPECT_EQ(copy.hash(), a.hash());
  copy.add_empty();
  EXPECT_NE(copy.hash(), a.hash());
  // The hash is a fixed function of content, the same on every run and platform.
  Grammar empty;
  EXPECT_EQ(empty.hash(), Grammar().hash());
  Grammar neg1, neg2;
  neg1.add_char_class({{'a', 'b'}}, true);
  neg2.add_char_class({{'a', 'b'}}, false);
  EXPECT_NE(neg1.hash(), neg2.hash());
}

// The hash keys caches that may outlive a process: it must not depend on the platform, the run or
// the standard library. Changing the serialization is allowed but must be deliberate (update
// these).
TEST(Grammar, HashIsAFixedFunction) {
  EXPECT_EQ(small_grammar("key").hash(), 0xF8762B1527D4E16Cull);
  EXPECT_EQ(Grammar().hash(), 0xBC7C93CED0D0D9A7ull);
}

TEST(Grammar, CopyKeepsRuleLookup) {
  Grammar a = small_grammar("k");
  Grammar b = a;
  EXPECT_EQ(b.find_rule("ws"), a.find_rule("ws"));
  EXPECT_NO_THROW(b.validate());
}

TEST(Grammar, ToStringRendersRules) {
  Grammar g = small_grammar("k\"\n");
  std::string text = g.to_string();
  EXPECT_EQ(text.rfind("root ::= ", 0), 0u) << text;  // root first
  EXPECT_NE(text.find("\"k\\\"\\n\""), std::string::npos) << text;
  EXPECT_NE(text.find("ws ::= [\\x09 ]*"), std::string::npos) << text;
  EXPECT_NE(text.find("(\"a\" | \"\")"), std::string::npos) << text;
}

}  // namespace
}  // namespace pse
