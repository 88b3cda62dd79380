// Lark-style EBNF front-end, checked by behaviour through the reference recognizer, and its errors;
// llguidance's special tokens and %json schemas also through the matcher.
#include "pse/lark.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "reference_recognizer.h"

namespace pse {
namespace {

using pse::testing::accepts;
using pse::testing::fast_mask;
using pse::testing::mask_has;
using pse::testing::special_vocabulary;
using pse::testing::SpecialVocabulary;

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

TEST(LarkJson, InlineSchemaAcceptsItsInstances) {
  const char* text = R"(start: "city=" body ";" | "n=" (
  %json {"type": "integer", "minimum": 1}
)
body: %json {
  "type": "object",
  "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
  "required": ["city"],
  "additionalProperties": false
}
)";
  Grammar g = parse_lark(text);
  EXPECT_TRUE(accepts(g, R"(city={"city": "Paris"};)"));
  EXPECT_TRUE(accepts(g, R"(city={"city":"x","n":3};)"));
  EXPECT_TRUE(accepts(g, "n=12"));
  EXPECT_FALSE(accepts(g, R"(city={"n": 3};)"));           // "city" is required
  EXPECT_FALSE(accepts(g, R"(city={"city": 5};)"));        // not a string
  EXPECT_FALSE(accepts(g, R"(city={"city": "x", "z": 1};)"));  // no other members
  EXPECT_FALSE(accepts(g, R"(city={"city": "x"})"));       // the rule goes on after the schema
  EXPECT_FALSE(accepts(g, "n=0"));
  EXPECT_FALSE(accepts(g, "n=1.5"));
}

TEST(LarkJson, BooleanSchemas) {
  Grammar g = parse_lark("start: \"<\" %json true \">\"\n");
  EXPECT_TRUE(accepts(g, R"(<[1, "a", {"b": null}]>)"));
  EXPECT_TRUE(accepts(g, "<7>"));
  EXPECT_FALSE(accepts(g, "<[1,>"));
  Grammar none = parse_lark("start: \"a\" | \"b\" %json false\n");
  EXPECT_TRUE(accepts(none, "a"));
  EXPECT_FALSE(accepts(none, "b1"));
  EXPECT_FALSE(accepts(none, "bnull"));
}

// Each %json gets rules of its own: two schemas whose converted rules share names stay apart.
TEST(LarkJson, TwoSchemasDoNotCollide) {
  Grammar g = parse_lark(
      "start: a \",\" b\n"
      "a: %json {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}}, \"required\": [\"x\"]}\n"
      "b: %json {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"string\"}}, \"required\": [\"x\"]}\n");
  EXPECT_TRUE(accepts(g, R"({"x": 1},{"x": "s"})"));
  EXPECT_FALSE(accepts(g, R"({"x": "s"},{"x": 1})"));
  EXPECT_FALSE(accepts(g, R"({"x": 1},{"x": 1})"));
  EXPECT_FALSE(accepts(g, R"({"x": "s"},{"x": "s"})"));
}

// Declared properties come in the order of "properties" (the schema is read as ordered JSON): here
// "b" before "a", which an alphabetical reading would reverse.
TEST(LarkJson, PropertyOrderIsKept) {
  Grammar g = parse_lark(R"(start: %json {
  "type": "object",
  "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}},
  "required": ["b", "a"],
  "additionalProperties": false
}
)");
  EXPECT_TRUE(accepts(g, R"({"b": 1, "a": 2})"));
  EXPECT_FALSE(accepts(g, R"({"a": 2, "b": 1})"));
}

// Braces and brackets inside JSON strings, escaped quotes included, do not end the schema early.
TEST(LarkJson, BracesInsideStringsDoNotEndTheSchema) {
  Grammar g = parse_lark(R"(start: %json {"const": "}{\"]"} "!"
)");
  EXPECT_TRUE(accepts(g, R"("}{\"]"!)"));
  EXPECT_FALSE(accepts(g, R"("}{"!)"));
}

TEST(LarkJson, Errors) {
  // Malformed JSON: at the offending character of the schema, with nlohmann's description.
  expect_error("start: %json {\"type\": \"object\",}\n", 1, 32, "the %json schema is not JSON");
  expect_error("start: %json {\"type\": \"object\",}\n", 1, 32, "expected string literal");
  expect_error("start: body\nbody: %json {\n  \"type\": \"object\",\n  \"properties\": {\"a\": tru}\n}\n", 4, 26,
               "invalid literal");
  // The end of the text before the matching '}': at the '{'.
  expect_error("start: %json {\"type\": \"object\"\nfoo: \"a\"\n", 1, 14, "unterminated %json schema");
  expect_error("start: %json {\"type\n", 1, 15, "unterminated string in the %json schema");
  expect_error("start: %json\n", 1, 13, "expected a JSON Schema after %json");
  expect_error("start: %json [1]\n", 1, 14, "expected a JSON Schema after %json");
  expect_error("start: %json trueish\n", 1, 14, "expected a JSON Schema after %json");
  // A schema the converter rejects: at the %json, with the pointer of the schema at fault.
  expect_error("start: \"a\" %json {\"properties\": {\"age\": {\"minimum\": \"ten\"}}}\n", 1, 12,
               "in the %json schema: /properties/age");
  expect_error("start: \"a\" %json {\"properties\": {\"age\": {\"minimum\": \"ten\"}}}\n", 1, 12, "minimum");
  // A conversion bound stays a LimitError, placed at the %json.
  std::string deep = "{}";
  for (int i = 0; i < 300; ++i) deep = "{\"items\": " + deep + "}";
  try {
    parse_lark("start: %json " + deep + "\n");
    ADD_FAILURE() << "a schema nested 300 deep should pass the converter's bound";
  } catch (const LimitError& e) {
    EXPECT_NE(std::string(e.what()).find("[lark] line 1, column 8: in the %json schema: "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("nesting deeper than 200"), std::string::npos) << e.what();
  }
  // A value nested far deeper than any schema (a const of 20,000 arrays) is a LimitError before any
  // recursive walk of it (it overflowed the stack once).
  const std::string deep_value = std::string(20000, '[') + std::string(20000, ']');
  try {
    parse_lark("start: %json {\"const\": " + deep_value + "}\n");
    ADD_FAILURE() << "a const nested 20,000 deep should pass the converter's nesting bound";
  } catch (const LimitError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 1000 levels deep"), std::string::npos) << e.what();
  }
  // Text far deeper still is refused while it is read, with its place (the parser itself recursed).
  const std::string deeper = std::string(300000, '[') + std::string(300000, ']');
  try {
    parse_lark("start: %json {\"default\": " + deeper + "}\n");
    ADD_FAILURE() << "a value nested 300,000 deep should be refused while it is read";
  } catch (const LimitError& e) {
    EXPECT_NE(std::string(e.what()).find("[lark] line 1, column 8: the %json schema nests arrays and objects more "
                                         "than 1000 levels deep"),
              std::string::npos)
        << e.what();
  }
  expect_error("start: A\nA: \"x\" %json {}\n", 2, 8, "%json cannot be used inside the terminal 'A'");
  expect_error("%json {}\nstart: \"a\"\n", 1, 1, "%json is not a statement");
  expect_error("start: \"a\" %jsonx {}\n", 1, 12, "directives must start a line");
}

TEST(LarkTokens, ParseIntoTokenTerminals) {
  Grammar g = parse_lark("start: <[5]> \"a\" | <think> \"b\"\n");
  const std::string ir = g.to_string();
  EXPECT_NE(ir.find("<[5]>"), std::string::npos) << ir;
  EXPECT_NE(ir.find("<think>"), std::string::npos) << ir;
  Grammar forms = parse_lark(
      "start: <|eot_id|> | <[1,5-9]> | <[^1,5-9]> | <[*]> | x\n"
      "x: (<[128000-128255]> \"y\")+ <think>~2\n");
  const std::string all = forms.to_string();
  for (const char* t : {"<|eot_id|>", "<[1,5-9]>", "!<[1,5-9]>", "<[*]>", "<[128000-128255]>", "<think>"})
    EXPECT_NE(all.find(t), std::string::npos) << t << " in " << all;
  // Names are not looked up by the parser: any name parses.
  EXPECT_NO_THROW(parse_lark("start: <|no such token|>\n"));
}

TEST(LarkTokens, Errors) {
  expect_error("start: A\nA: \"a\" <think>\n", 2, 8, "a token (<...>) cannot be used inside the terminal 'A'");
  expect_error("start: A\nA: (\"a\" | <[5]>)\n", 2, 11, "cannot be used inside the terminal 'A'");
  expect_error("start: <[5-3]>\n", 1, 10, "bad token id range 5-3");
  expect_error("start: <think\n", 1, 8, "unterminated token");
  expect_error("start: <>\n", 1, 8, "empty token name");
  expect_error("start: <[5]\n", 1, 12, "'>' to close the token");
  expect_error("start: <[a]>\n", 1, 10, "expected a token id");
}

// Single bytes and pairs over a small alphabet, then the special tokens <think>, </think>,
// <|python_tag|>, <|eom_id|> and the end of sequence <|eot_id|>.
struct LlamaLikeVocabulary {
  std::shared_ptr<const Vocabulary> vocab;
  TokenId think = 0, end_think = 0, python_tag = 0, eom = 0, eot = 0;
};

LlamaLikeVocabulary llama_like_vocabulary() {
  const SpecialVocabulary s =
      special_vocabulary("ay{}\":", {}, {"<think>", "</think>", "<|python_tag|>", "<|eom_id|>"}, "<|eot_id|>");
  LlamaLikeVocabulary v;
  v.vocab = s.vocab;
  v.think = s.special[0], v.end_think = s.special[1], v.python_tag = s.special[2], v.eom = s.special[3];
  v.eot = s.eos;
  return v;
}

bool accept_text(Matcher& m, std::string_view text) {
  for (const char c : text)
    if (!m.accept_token(static_cast<TokenId>(static_cast<unsigned char>(c)))) return false;
  return true;
}

TEST(LarkTokens, MatcherReadsNamedAndNumberedTokens) {
  const LlamaLikeVocabulary v = llama_like_vocabulary();
  const std::string text = "start: <think> THOUGHT </think> (\"yes\" | \"no\") | <[" + std::to_string(v.eom) +
                           "]> \"!\"\nTHOUGHT: /[a-z ]*/\n";
  Matcher m(compile_grammar(parse_lark(text), v.vocab));
  std::vector<std::uint32_t> mask = fast_mask(m);
  EXPECT_TRUE(mask_has(mask, v.think));
  EXPECT_TRUE(mask_has(mask, v.eom));
  EXPECT_FALSE(mask_has(mask, v.end_think));
  EXPECT_FALSE(mask_has(mask, v.python_tag));
  EXPECT_FALSE(mask_has(mask, static_cast<TokenId>('y')));  // text only after a token
  EXPECT_FALSE(m.accept_token(v.end_think));
  ASSERT_TRUE(m.accept_token(v.think));
  mask = fast_mask(m);
  EXPECT_TRUE(mask_has(mask, static_cast<TokenId>('a')));
  EXPECT_TRUE(mask_has(mask, v.end_think));
  EXPECT_FALSE(mask_has(mask, static_cast<TokenId>('A')));
  EXPECT_FALSE(mask_has(mask, v.think));
  ASSERT_TRUE(accept_text(m, "hm ok"));
  ASSERT_TRUE(m.accept_token(v.end_think));
  mask = fast_mask(m);
  EXPECT_TRUE(mask_has(mask, static_cast<TokenId>('y')));
  EXPECT_FALSE(mask_has(mask, static_cast<TokenId>('a')));
  EXPECT_FALSE(mask_has(mask, v.end_think));
  EXPECT_FALSE(m.can_stop());
  ASSERT_TRUE(accept_text(m, "yes"));
  EXPECT_TRUE(m.can_stop());
  // The other alternative: the token named by id, then text.
  Matcher by_id(compile_grammar(parse_lark(text), v.vocab));
  ASSERT_TRUE(by_id.accept_token(v.eom));
  EXPECT_FALSE(by_id.can_stop());
  ASSERT_TRUE(accept_text(by_id, "!"));
  EXPECT_TRUE(by_id.can_stop());
}

// llguidance's tool-call example: free text, or <|python_tag|> then a JSON object valid against the
// inline schema, then <|eom_id|>.
TEST(LarkTokens, ToolCallWithInlineSchemaThroughTheMatcher) {
  const LlamaLikeVocabulary v = llama_like_vocabulary();
  const char* text = R"(start: TEXT | fun_call
TEXT: /[^{](.|\n)*/
fun_call: <|python_tag|> json_body <|eom_id|>
json_body: %json {
  "type": "object",
  "properties": {"city": {"type": "string"}},
  "required": ["city"]
}
)";
  const CompiledGrammar cg = compile_grammar(parse_lark(text), v.vocab);
  Matcher m(cg);
  std::vector<std::uint32_t> mask = fast_mask(m);
  EXPECT_TRUE(mask_has(mask, v.python_tag));
  EXPECT_TRUE(mask_has(mask, static_cast<TokenId>('a')));
  EXPECT_FALSE(mask_has(mask, static_cast<TokenId>('{')));  // TEXT does not start with '{'
  EXPECT_FALSE(mask_has(mask, v.eom));
  EXPECT_FALSE(mask_has(mask, v.think));
  // Free text: never a special token inside it.
  Matcher free = m.fork();
  ASSERT_TRUE(accept_text(free, "hi"));
  EXPECT_TRUE(free.can_stop());
  mask = fast_mask(free);
  EXPECT_FALSE(mask_has(mask, v.python_tag));
  EXPECT_FALSE(mask_has(mask, v.eom));
  // The call.
  ASSERT_TRUE(m.accept_token(v.python_tag));
  mask = fast_mask(m);
  EXPECT_TRUE(mask_has(mask, static_cast<TokenId>('{')));
  EXPECT_FALSE(mask_has(mask, static_cast<TokenId>('a')));
  EXPECT_FALSE(mask_has(mask, v.eom));
  EXPECT_FALSE(mask_has(mask, v.python_tag));
  ASSERT_TRUE(accept_text(m, "{"));
  Matcher empty = m.fork();
  EXPECT_FALSE(empty.accept_token(static_cast<TokenId>('}')));  // "city" is required
  ASSERT_TRUE(accept_text(m, "\"city\": "));
  Matcher wrong = m.fork();
  EXPECT_FALSE(wrong.accept_token(static_cast<TokenId>('5')));  // a string, not a number
  ASSERT_TRUE(accept_text(m, "\"Paris\""));
  EXPECT_FALSE(mask_has(fast_mask(m), v.eom));  // the object is not closed yet
  ASSERT_TRUE(accept_text(m, "}"));
  mask = fast_mask(m);
  EXPECT_TRUE(mask_has(mask, v.eom));
  EXPECT_FALSE(mask_has(mask, v.eot));
  EXPECT_FALSE(m.can_stop());
  ASSERT_TRUE(m.accept_token(v.eom));
  EXPECT_TRUE(m.can_stop());
  EXPECT_TRUE(m.must_stop());
  EXPECT_TRUE(m.accept_token(v.eot));
  EXPECT_TRUE(m.is_terminated());
}

}  // namespace
}  // namespace pse
