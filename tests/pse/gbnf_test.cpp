// GBNF front-end, checked by behaviour through the reference recognizer: every grammar in
// shared/data/grammars with accept and reject cases, the syntax features, and every error path.
#include "pse/gbnf.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "reference_recognizer.h"
#include "shared_data.h"

namespace pse {
namespace {

using pse::testing::accepts;

std::string read_grammar(const std::string& name) {
  std::ifstream f(orchard::testing::shared_data("grammars/" + name), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Expectation {
  std::string file;
  std::vector<std::string> yes;
  std::vector<std::string> no;
};

std::string nested_arrays(int depth) {
  return "{\"a\": " + std::string(depth, '[') + "1" + std::string(depth, ']') + "}";
}

TEST(Gbnf, SharedGrammarsAcceptAndReject) {
  ORCHARD_REQUIRE_SHARED_DATA("grammars/json.gbnf");
  const std::vector<Expectation>
      expectations =
          {
              {"arithmetic.gbnf",
               {"1+2=3\n", "x*(y+1)=z\n", "a=b\nc=d\n", "( a )=b\n"},
               {"1+2=3", "=3\n", "1++2=3\n", "A=1\n", ""}},
              {"c.gbnf",
               {"", "int main(){return 0;}", "float f(int x){x = x+1;return x;}",
                "int g(){while(a<b){a = a+1;}if(a==b){return 1;}else{return 2;}}",
                "int h(){// note\n}", "char c(){/* a * b */}"},
               {"int main(){return 0}", "main(){}", "int main(){return 0;};",
                "int main(){/* open}"}},
              {"chess.gbnf",
               {"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 Nf6\n2. c4 e6\n3. Nc3 Bb4\n",
                "1. e4 e5\n2. O-O O-O-O\n", "1. e4 e5\n2. exd5 Qxd5+\n",
                "1. e4 e5\n2. e8=Q Kxe8#\n"},
               {"1. e4 e5\n", "1. e9 e5\n2. Nf3 Nc6\n", "1. e4 e5\n2. Nf3\n",
                "2. e4 e5\n2. e4 e5\n"}},
              {"english.gbnf",
               {"Hello, world!", "one\ttwo\nthree", "a", "[x] {y} \\z ~"},
               {"", "Hello  world", "h\xC3\xA9llo", "trailing ", " leading"}},
              {"japanese.gbnf",
               {"\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF",  // こんにちは
                "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
                "\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A",  // 日本語 カタカナ
                "\xE3\x81\x82\xE3\x80\x82"},                         // あ。
               {"hello", "\xE3\x81\x82 ", "", "\xE3\x81\x82  \xE3\x81\x82",
                "\xE3\x81"}},  // truncated UTF-8
              {"json.gbnf",
               {"{}", "{\"a\": 1}",
                "{\"a\": [1, 2.5, true, null, \"x\\n\\u00e9\"], \"b\": {\"c\": -0.5e+3}}",
                "{\n  \"k\": \"v\"\n}", nested_arrays(100), "{\"s\": \"\xE6\x97\xA5\"}"},
               {"[]", "{\"a\" 1}", "{\"a\": [1,]}", "{'a': 1}", "{\"a\": 01}", "{\"a\": \"\x01\"}",
                nested_arrays(100) + "]", "{\"a\": \"\\x\"}"}},
              {"json_arr.gbnf",
               {"[\n]", "[\n1,\n2]", "[\n{\"a\": [true]},\n\"s\"]"},
               {"[1]", "[\n1,2]", "[\n]\n"}},
              {"list.gbnf",
               {"- a\n", "- a\n- b c\n", "- \xE6\x97\xA5\n"},
               {"", "- \n", "- a", "* a\n", "- a\r\n", "- a\xE2\x80\xA8z\n"}},
          };
  for (const Expectation& e : expectations) {
    std::string text = read_grammar(e.file);
    ASSERT_FALSE(text.empty()) << e.file;
    Grammar g = parse_gbnf(text);
    for (const std::string& y : e.yes)
      EXPECT_TRUE(accepts(g, y)) << e.file << " should accept:\n" << y;
    for (const std::string& n : e.no)
      EXPECT_FALSE(accepts(g, n)) << e.file << " should reject:\n" << n;
  }
}

TEST(Gbnf, SyntaxFeatures) {
  const char* text = R"(# a comment line
root ::= greeting ( "," ws name )? rep any neg esc   # trailing comment
greeting ::= "hi" | "hello" |
  "hey"
name ::= (
    [A-Z] [a-z]*   # comments inside a group
  | "anon"
)
ws ::= [ \t]*
rep ::= "x"{2} "y"{1,} "z"{0,2}
any ::= .
neg ::= [^a-c0-9]
esc ::= "\x41\u00e9\U0001F600\t\"\\" [\[\]\-]
)";
  Grammar g = parse_gbnf(text);
  EXPECT_TRUE(accepts(g, "hi, Bobxxyz!d\x41\xC3\xA9\xF0\x9F\x98\x80\t\"\\]"));
  EXPECT_TRUE(accepts(g,
                      "heyxxyyyzz\n\xE6\x97\xA5"
                      "A\xC3\xA9\xF0\x9F\x98\x80\t\"\\-"));
  EXPECT_FALSE(accepts(g, "heyxyzz\nzA\xC3\xA9\xF0\x9F\x98\x80\t\"\\-"));    // x{2}
  EXPECT_FALSE(accepts(g, "heyxxyzzz\nzA\xC3\xA9\xF0\x9F\x98\x80\t\"\\-"));  // z{0,2}
  EXPECT_FALSE(accepts(g, "heyxxy\nbA\xC3\xA9\xF0\x9F\x98\x80\t\"\\-"));     // [^a-c0-9]
  EXPECT_TRUE(accepts(g, "hello,anonxxy..A\xC3\xA9\xF0\x9F\x98\x80\t\"\\["));
}

TEST(Gbnf, LiteralRepetitionAppliesToTheWholeLiteral) {
  Grammar g = parse_gbnf("root ::= \"ab\"* \"c\"\n");
  EXPECT_TRUE(accepts(g, "ababc"));
  EXPECT_FALSE(accepts(g, "abbc"));
}

TEST(Gbnf, CustomRootAndRecursion) {
  Grammar g = parse_gbnf("expr ::= \"(\" expr \")\" | \"x\"\nunused ::= \"u\"\n", "expr");
  EXPECT_TRUE(accepts(g, "((x))"));
  EXPECT_FALSE(accepts(g, "((x)"));
  EXPECT_FALSE(accepts(g, "u"));
}

// As llama.cpp reads them: each repetition applies to the item with the ones before it.
TEST(Gbnf, StackedRepetitions) {
  const Grammar g = parse_gbnf("root ::= \"ab\"?* \"c\" [a-z]{2}+ \"!\"{1,2}?\n");
  for (const char* yes : {"cxy", "abcxy", "abababcwxyz!", "cxy!!"}) EXPECT_TRUE(accepts(g, yes)) << yes;
  for (const char* no : {"c", "aabcxy", "cxyz", "cxy!!!", "abcx"}) EXPECT_FALSE(accepts(g, no)) << no;
}

TEST(Gbnf, LargeRepetitionStaysCompact) {
  Grammar g = parse_gbnf("root ::= [a-z]{1,1000} \"!\"{3000}\n");
  EXPECT_LT(g.exprs().size(), 10u);
  EXPECT_TRUE(accepts(g, std::string(1000, 'q') + std::string(3000, '!')));
  EXPECT_FALSE(accepts(g, std::string(1001, 'q') + std::string(3000, '!')));
}

TEST(Gbnf, CrLfLineEndings) {
  Grammar g = parse_gbnf("root ::= a b\r\na ::= \"a\"\r\nb ::= \"b\"\r\n");
  EXPECT_TRUE(accepts(g, "ab"));
}

void expect_error(const std::string& text, std::size_t line, std::size_t column,
                  std::string_view fragment) {
  try {
    parse_gbnf(text);
    ADD_FAILURE() << "should be rejected:\n" << text;
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_EQ(e.column(), column) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[gbnf]", 0), 0u) << e.what();
  }
}

TEST(Gbnf, Errors) {
  expect_error("root ::= \"abc", 1, 10, "unterminated string literal");
  expect_error("root ::= \"a\\qb\"", 1, 12, "bad escape \\'q'");
  expect_error("root ::= \"\\x4\"", 1, 11, "2 hex digits");
  expect_error("root ::= \"\\uD800\"", 1, 11, "surrogate");
  expect_error("root ::= [z-a]", 1, 11, "bad range");
  expect_error("root ::= [abc", 1, 10, "unterminated character class");
  expect_error("root ::= \"a\"\n\nrest ::= foo bar\nfoo ::= \"f\"\n", 3, 14,
               "undefined rule 'bar'");
  expect_error("root ::= \"a\" @", 1, 14, "expected a literal");
  expect_error("root = \"a\"", 1, 6, "expected '::='");
  expect_error("root ::= (\"a\" \"b\"\nx ::= \"c\"\n", 2, 3,
               "expected ')' to close the group opened at line 1, column 10");
  expect_error("root ::= \"a\")", 1, 13, "unmatched ')'");
  expect_error("root ::= * \"a\"", 1, 10, "no preceding item");
  expect_error("root ::= \"a\"{3,2}", 1, 13, "min is greater than max");
  expect_error("root ::= \"a\"*+?*{2}", 1, 17, "more than 4 repetitions in a row on one item");
  expect_error("root ::= \"a\"{x}", 1, 14, "expected an integer");
  expect_error("root ::= \"a\"{2,3", 1, 17, "expected '}'");
  expect_error("root ::= \"a\"\nroot ::= \"b\"\n", 2, 1, "defined twice");
  expect_error("::= \"a\"", 1, 1, "expected a rule name");
  expect_error("root ::= \"\xE6\x97\xA5\" @", 1, 14, "expected");  // columns count characters
  expect_error("root ::= \"\xFF\"", 1, 11, "invalid UTF-8");
}

// Tokens (llama.cpp's `<[id]>`, `<name>`, `!<...>`, and llguidance's forms inside the brackets); their
// matching is tested in token_terminal_test.cpp.
TEST(Gbnf, TokenTerminalSyntax) {
  const Grammar g = parse_gbnf("root ::= <think> !</think>* <[7]> <[1-3,9]> <[^4]> <[*]> !<[5,6]>+\n");
  EXPECT_EQ(g.to_string(), "root ::= <think> !</think>* <[7]> <[1-3,9]> !<[4]> <[*]> !<[5-6]>+\n");
  EXPECT_NE(parse_gbnf("root ::= <[7]>\n").hash(), parse_gbnf("root ::= <[8]>\n").hash());
  EXPECT_NE(parse_gbnf("root ::= <[7]>\n").hash(), parse_gbnf("root ::= !<[7]>\n").hash());
  expect_error("root ::= <abc", 1, 10, "unterminated token");
  expect_error("root ::= <a\nb>", 1, 10, "unterminated token");
  expect_error("root ::= <>", 1, 10, "empty token name");
  expect_error("root ::= <[]>", 1, 12, "expected a token id");
  expect_error("root ::= <[5-3]>", 1, 12, "the first id is greater than the last");
  expect_error("root ::= <[99999999999]>", 1, 12, "token id is too large");
  expect_error("root ::= <[5", 1, 13, "expected ',' or ']'");
  expect_error("root ::= <[5]", 1, 14, "expected '>'");
  expect_error("root ::= !<[*]>", 1, 11, "reads no token");
  expect_error("root ::= !<[^5]>", 1, 13, "'^' inside a negated token");
  expect_error("root ::= ! <[5]>", 1, 10, "expected a literal");
}

TEST(Gbnf, MissingRootIsAnError) {
  try {
    parse_gbnf("start ::= \"a\"\n");
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("'root'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_gbnf(""), GrammarError);
}

TEST(Gbnf, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  EXPECT_THROW(parse_gbnf(deep), GrammarError);
  std::string ok = "root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')');
  EXPECT_TRUE(accepts(parse_gbnf(ok), "a"));
}

TEST(Gbnf, OversizedTextIsALimitError) {
  std::string big = "root ::= \"" + std::string(9u << 20, 'a') + "\"";
  EXPECT_THROW(parse_gbnf(big), LimitError);
}

}  // namespace
}  // namespace pse
