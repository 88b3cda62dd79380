// Lark-style EBNF front-end, checked by behaviour through the reference recognizer, and its errors.
#include "pse/lark.h"

#include <gtest/gtest.h>

#include <string>

#include "reference_recognizer.h"

namespace pse {
namespace {

using pse::testing::accepts;

TEST(Lark, RulesTerminalsAndOperators) {
  const char* text = R"(// a comment
start: greeting ws name punct? tail*
     | "x" ~ 3
     | "y" ~ 1..2 "!"+
?greeting: "hello"i | HI
!name: WORD ("-" WORD)* -> person
HI: "hi"
WORD: ("a".."z")+
punct.2: "!" | "?"
tail: [ws] NUMBER
ws: " "
%import common.NUMBER
)";
  Grammar g = parse_lark(text);
  EXPECT_TRUE(accepts(g, "HeLLo bob"));
  EXPECT_TRUE(accepts(g, "hi mary-ann! 1 2.5 3e10"));
  EXPECT_TRUE(accepts(g, "hello bob?1"));
  EXPECT_TRUE(accepts(g, "xxx"));
  EXPECT_TRUE(accepts(g, "y!"));
  EXPECT_TRUE(accepts(g, "yy!!!"));
  EXPECT_FALSE(accepts(g, "HI bob"));  // HI is case-sensitive
  EXPECT_FALSE(accepts(g, "hello Bob"));
  EXPECT_FALSE(accepts(g, "xx"));
  EXPECT_FALSE(accepts(g, "xxxx"));
  EXPECT_FALSE(accepts(g, "yyy!"));
  EXPECT_FALSE(accepts(g, "y"));
  EXPECT_FALSE(accepts(g, "hello bob!!"));
}

TEST(Lark, JsonGrammar) {
  const char* text = R"(
start: ws value ws
?value: object
      | array
      | string
      | SIGNED_NUMBER      -> number
      | "true" | "false" | "null"
array  : "[" ws [value (ws "," ws value)*] ws "]"
object : "{" ws [pair (ws "," ws pair)*] ws "}"
pair   : string ws ":" ws value
string : ESCAPED_STRING
ws: WS?
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common (WS)
)";
  Grammar g = parse_lark(text);
  EXPECT_TRUE(accepts(g, R"({"a": [1, -2.5e3, true, null, "x\"y"], "b" : {}})"));
  EXPECT_TRUE(accepts(g, " [ ] "));
  std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_TRUE(accepts(g, deep));
  EXPECT_FALSE(accepts(g, R"({"a" 1})"));
  EXPECT_FALSE(accepts(g, R"(["unterminated])"));
  EXPECT_FALSE(accepts(g, "[1,]"));
  EXPECT_FALSE(accepts(g, "\"a\nb\""));  // ESCAPED_STRING excludes newlines
}

TEST(Lark, RegexTerminals) {
  const char* text = R"(start: IDENT "=" NUM ";" KW
IDENT: /[a-z_][a-z0-9_]*/
NUM: /\d+(\.\d+)?/
KW: /(?i)end/ | /e\/n/s | /x.y/s
)";
  Grammar g = parse_lark(text);
  EXPECT_TRUE(accepts(g, "foo_1=42;END"));
  EXPECT_TRUE(accepts(g, "x=4.5;eNd"));
  EXPECT_TRUE(accepts(g, "x=4;e/n"));
  EXPECT_TRUE(accepts(g, "x=4;x\ny"));
  EXPECT_FALSE(accepts(g, "1x=4;end"));
  EXPECT_FALSE(accepts(g, "x=4.;end"));
  Grammar py = parse_lark("start: /(?P<w>[a-z]+)!/i\n");  // Python's named-group spelling
  EXPECT_TRUE(accepts(py, "AbC!"));
}

TEST(Lark, ImportAliasesAndLists) {
  Grammar g = parse_lark(
      "start: NUM \" \" CNAME \" \" HEXDIGIT\n"
      "%import common.SIGNED_INT -> NUM\n%import common (CNAME,\n  HEXDIGIT)\n");
  EXPECT_TRUE(accepts(g, "-12 _x9 f"));
  EXPECT_FALSE(accepts(g, "1.5 x f"));
  EXPECT_EQ(g.find_rule("SIGNED_INT"), Grammar::kNoRule);  // only the alias is defined
}

TEST(Lark, CommonTerminalLanguages) {
  struct C {
    const char* name;
    std::vector<std::string> yes, no;
  };
  const std::vector<C> cases = {
      {"INT", {"0", "123"}, {"", "-1", "1.0"}},
      {"SIGNED_INT", {"-1", "+2", "3"}, {"--1", ""}},
      {"DECIMAL", {"1.", "1.5", ".5"}, {"1", "."}},
      {"FLOAT", {"1e5", "1.5", ".5E-3", "2.e+1"}, {"1", "e5"}},
      {"NUMBER", {"1", "1.5", "1e5"}, {"-1", "a"}},
      {"SIGNED_NUMBER", {"-1", "+1.5", "1e5"}, {"+-1"}},
      {"ESCAPED_STRING",
       {"\"\"", "\"a\\\"b\"", "\"\\\\\""},
       {"\"", "\"a\"b\"", "\"\\\"", "\"a\nb\""}},
      {"CNAME", {"_a1", "Foo"}, {"1a", ""}},
      {"WORD", {"Hello"}, {"a1"}},
      {"WS", {" \t\n\r\f"}, {""}},
      {"WS_INLINE", {" \t"}, {"\n"}},
      {"NEWLINE", {"\n", "\r\n\n"}, {"\r"}},
      {"HEXDIGIT", {"f", "A", "9"}, {"g"}},
      {"SH_COMMENT", {"# hi"}, {"# a\nb"}},
      {"CPP_COMMENT", {"// hi"}, {"/ hi"}},
      {"C_COMMENT", {"/* a */", "/**/", "/* a * b **/"}, {"/* a */ */", "/* a"}},
      {"SQL_COMMENT", {"-- x"}, {"- x"}},
      {"LETTER", {"a", "Z"}, {"1"}},
  };
  for (const C& c : cases) {
    Grammar g = parse_lark(std::string("start: ") + c.name + "\n%import common." + c.name + "\n");
    for (const auto& y : c.yes)
      EXPECT_TRUE(accepts(g, y)) << c.name << " should accept '" << y << "'";
    for (const auto& n : c.no)
      EXPECT_FALSE(accepts(g, n)) << c.name << " should reject '" << n << "'";
  }
}

TEST(Lark, CaseInsensitiveStringsAndRanges) {
  Grammar g = parse_lark("start: \"select\"i \" \" (\"a\"..\"c\")~2 \"\\u00e9\"i\n");
  EXPECT_TRUE(accepts(g, "SeLeCt ab\xC3\x89"));
  EXPECT_TRUE(accepts(g, "select cc\xC3\xA9"));
  EXPECT_FALSE(accepts(g, "select ad\xC3\xA9"));
  EXPECT_FALSE(accepts(g, "select a\xC3\xA9"));
}

TEST(Lark, CustomStartAndRecursion) {
  Grammar g = parse_lark("expr: \"(\" expr \")\" | atom\natom: \"x\"\n", "expr");
  EXPECT_TRUE(accepts(g, "((x))"));
  EXPECT_FALSE(accepts(g, "((x)"));
}

TEST(Lark, MultiLineGroupsAndContinuations) {
  Grammar g = parse_lark("start: (\n  \"a\"\n  | \"b\"\n)\n  | \"c\" \\\n    \"d\"\n");
  EXPECT_TRUE(accepts(g, "a"));
  EXPECT_TRUE(accepts(g, "b"));
  EXPECT_TRUE(accepts(g, "cd"));
  EXPECT_FALSE(accepts(g, "c"));
}

TEST(Lark, LlguidanceEmptyOptionsHeader) {
  Grammar g = parse_lark("%llguidance {}\nstart: \"a\"\n");
  EXPECT_TRUE(accepts(g, "a"));
}

void expect_error(const std::string& text, std::size_t line, std::size_t column,
                  std::string_view fragment) {
  try {
    parse_lark(text);
    ADD_FAILURE() << "should be rejected:\n" << text;
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_EQ(e.column(), column) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[lark]", 0), 0u) << e.what();
  }
}

TEST(Lark, Errors) {
  expect_error("start: WS\n%import common.WS\n%ignore WS\n", 3, 1, "%ignore is not supported");
  expect_error("start: \"a\"\n%declare X\n", 2, 1, "%declare is not supported");
  expect_error("start: \"a\"\n%import other.X\n", 2, 9, "only the common module");
  expect_error("start: X\n%import common.NOPE\n", 2, 16, "common.NOPE is not available");
  expect_error("start: \"a\" b\n", 1, 12, "undefined rule 'b'");
  expect_error("start: \"a\" B\n", 1, 12, "undefined terminal 'B'");
  expect_error("start: A\nA: \"a\" b\nb: \"b\"\n", 2, 8, "cannot refer to the rule 'b'");
  expect_error("start: A\nA: \"a\" B?\nB: A\n", 3, 4, "recursive");
  expect_error("start: A\nA.2: \"a\"\n", 2, 2, "terminal priorities are not supported");
  expect_error("start: sep{x}\n", 1, 8, "templates");
  expect_error("start: \"abc\n", 1, 8, "unterminated string literal");
  expect_error("start: \"a\\qb\"\n", 1, 10, "bad escape");
  expect_error("start: \"z\"..\"a\"\n", 1, 8, "bad range");
  expect_error("start: \"ab\"..\"z\"\n", 1, 8, "single characters");
  expect_error("start: \"a\" ~ 3..2\n", 1, 12, "minimum is greater");
  expect_error("start: \"a\"*?\n", 1, 12, "cannot directly follow another operator");
  expect_error("start: /ab(c/\n", 1, 11, "expected ')'");
  expect_error("start: /a(?=b)/\n", 1, 10, "lookahead");
  expect_error("start: /abc\n", 1, 8, "unterminated regex");
  expect_error("start: /a/x\n", 1, 11, "regex flag 'x'");
  expect_error("start: (\"a\" \"b\"\n", 2, 1, "expected ')'");
  expect_error("start: [\"a\"\n", 2, 1, "expected ']'");
  expect_error("start \"a\"\n", 1, 7, "expected ':'");
  expect_error("start: \"a\"\nstart: \"b\"\n", 2, 1, "defined twice");
  expect_error("start: <[128000]>\n", 1, 8, "special tokens");
  expect_error("start: \"a\" @\n", 1, 12, "expected a string");
  expect_error("Start: \"a\"\n", 1, 1, "neither a rule name");
  expect_error("start: Foo\n", 1, 8, "neither a rule name");
}

TEST(Lark, MissingStartIsAnError) {
  try {
    parse_lark("begin: \"a\"\n");
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("'start'"), std::string::npos) << e.what();
  }
}

TEST(Lark, DeepNestingIsAnErrorNotACrash) {
  std::string deep =
      "start: " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')') + "\n";
  EXPECT_THROW(parse_lark(deep), GrammarError);
  std::string chain = "start: T0\n";
  for (int i = 0; i < 3000; ++i)
    chain += "T" + std::to_string(i) + ": T" + std::to_string(i + 1) + "\n";
  chain += "T3000: \"z\"\n";
  EXPECT_TRUE(accepts(parse_lark(chain), "z"));
}

}  // namespace
}  // namespace pse
