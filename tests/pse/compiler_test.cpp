#include "pse/compiler.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "automaton.h"
#include "compiled_grammar_impl.h"
#include "engine_test_util.h"
#include "pse/gbnf.h"
#include "pse/json_schema.h"
#include "pse/thread_pool.h"
#include "token_table_sets.h"
#include "vocabulary_index.h"

namespace pse::testing {
namespace {

TEST(Compiler, EmptyLanguageIsAGrammarError) {
  G g;
  RuleId r = g.rule("root"), loop = g.rule("loop");
  g.define(loop, g.seq({g.lit("a"), g.ref(loop)}));  // never terminates
  g.define(r, g.alt({g.ref(loop), g.cls(std::vector<CharRange>{})}));
  Grammar grammar = g.done(r);
  EXPECT_THROW(compile_grammar(grammar, small_vocabulary()), GrammarError);
}

TEST(Compiler, DeadAlternativesArePruned) {
  G g;
  RuleId r = g.rule("root"), loop = g.rule("loop");
  g.define(loop, g.seq({g.lit("a"), g.ref(loop)}));
  g.define(r, g.alt({g.ref(loop), g.lit("ab")}));
  auto vocab = small_vocabulary();
  Matcher m(compile_grammar(g.done(r), vocab));
  EXPECT_TRUE(m.accept_bytes("a"));
  EXPECT_FALSE(m.accept_bytes("a"));  // "aa" only continues the dead loop
  EXPECT_TRUE(m.accept_bytes("b"));
  EXPECT_TRUE(m.can_stop());
}

TEST(Compiler, UndefinedRuleIsAGrammarError) {
  Grammar g;
  RuleId r = g.declare_rule("root");
  RuleId u = g.declare_rule("undefined");
  g.define_rule(r, g.add_rule_ref(u));
  g.set_root(r);
  EXPECT_THROW(compile_grammar(g, small_vocabulary()), GrammarError);
}

TEST(Compiler, StateLimitIsALimitError) {
  G g;
  RuleId r = g.rule("root");
  // 150,000 letters in a row: each is a state (a long counted repetition would be written with chunks,
  // see LongCountedRepetitionsAreWrittenWithChunks).
  std::vector<ExprId> letters;
  for (int i = 0; i < 150'000; ++i) letters.push_back(g.cls('a' + i % 26, 'z'));
  g.define(r, g.seq(letters));
  CompileOptions o;
  o.max_states = 100'000;
  EXPECT_THROW(compile_grammar(g.done(r), small_vocabulary(), o), LimitError);
}

// Small rules that are not recursive are emitted inline at each reference (a macro), so tokens that
// run past their end ("  x" after whitespace) are decided in the caller's tables; recursive rules and
// large ones stay calls. Same language, same masks as brute force.
TEST(Compiler, SmallRulesAreInlined) {
  G g;
  RuleId root = g.rule("root"), ws = g.rule("ws"), paren = g.rule("paren"), word = g.rule("word");
  g.define(ws, g.star(g.cls({{' ', ' '}, {'\n', '\n'}})));
  g.define(paren, g.alt({g.lit("x"), g.seq({g.lit("("), g.ref(ws), g.ref(paren), g.ref(ws), g.lit(")")})}));
  g.define(word, g.rep(g.cls('a', 'z'), 1, 40));  // over the size bound
  g.define(root, g.seq({g.ref(ws), g.ref(paren), g.ref(ws), g.lit("="), g.ref(ws), g.ref(word)}));
  const Grammar grammar = g.done(root);
  const detail::Automaton a = detail::build_automaton(grammar, detail::AutomatonLimits{});
  std::set<std::uint32_t> called;
  for (std::uint32_t s = 0; s < a.n_states(); ++s)
    if (a.reachable[s])
      for (std::uint32_t e = a.call_begin[s]; e < a.call_begin[s + 1]; ++e) called.insert(a.call_edges[e].rule);
  EXPECT_EQ(called, (std::set<std::uint32_t>{paren, word}));  // ws inlined everywhere
  const CompiledGrammar cg = compile_grammar(grammar, small_vocabulary());
  Matcher m(cg);
  EXPECT_TRUE(m.accept_bytes(" ( (x) ) = ab") && m.can_stop());
  expect_masks_are_brute_force(cg, 200, 11);
}

// The joints the construction leaves between sub-expressions (a state whose only edge is one empty move)
// are bypassed: none is left but rule starts, and the language is the same (masks equal brute force).
TEST(Compiler, EmptyJointsAreBypassed) {
  G g;
  RuleId root = g.rule("root"), item = g.rule("item");
  g.define(item, g.alt({g.seq({g.lit("("), g.star(g.ref(item)), g.lit(")")}), g.rep(g.cls('a', 'c'), 1, 3)}));
  // (Stars of the empty string make cycles of empty moves: one state of each cycle stays.)
  g.define(root, g.seq({g.rep(g.seq({g.opt(g.lit(" ")), g.ref(item)}), 1, 4), g.star(g.lit("!")),
                        g.star(g.star(g.lit(""))), g.lit(".")}));
  const Grammar grammar = g.done(root);
  const detail::Automaton a = detail::build_automaton(grammar, detail::AutomatonLimits{});
  for (std::uint32_t s = 0; s < a.n_states(); ++s) {
    const bool joint = !a.has_bytes(s) && a.call_begin[s] == a.call_begin[s + 1] && a.eps_begin[s + 1] - a.eps_begin[s] == 1;
    EXPECT_FALSE(joint && a.rule_start[a.state_rule[s]] != s) << "state " << s << " only moves on to another";
  }
  const CompiledGrammar cg = compile_grammar(grammar, small_vocabulary());
  Matcher m(cg);
  EXPECT_TRUE(m.accept_bytes(" (a(bc)) ccc!!.") && m.can_stop());
  expect_masks_are_brute_force(cg, 300, 5);
}

// Graph edges into one state share what they read last: the continuation bytes of their character
// classes and a label met again (the escapes of a JSON string after every node of a trie of keys). The
// language stays the same: the masks equal brute force along random walks.
TEST(Compiler, GraphEdgesIntoOneStateShareTheirStates) {
  G g;
  RuleId root = g.rule("root");
  const ExprId escapes = g.seq({g.lit("\\"), g.alt({g.cls({{'n', 'n'}, {'"', '"'}}), g.seq({g.lit("u00"), g.cls('0', '1')})})});
  // A chain of 12 letters ("abcdefghijkl"), as a trie of one key: from node i, letter i goes on; any other
  // character (a different class per node, multi-byte ones included) or an escape goes to the free state.
  constexpr std::uint32_t kNodes = 12;
  const std::uint32_t free = kNodes;
  std::vector<GraphEdge> edges;
  std::vector<ExprId> labels;
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    const std::uint32_t letter = 'a' + i;
    labels.push_back(g.cls(letter, letter));
    edges.push_back({i, i + 1 < kNodes ? i + 1 : free, static_cast<std::uint32_t>(labels.size() - 1)});
    labels.push_back(g.alt({g.cls({{letter, letter}, {'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, /*negated=*/true), escapes}));
    edges.push_back({i, free, static_cast<std::uint32_t>(labels.size() - 1)});
  }
  labels.push_back(g.alt({g.cls({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, /*negated=*/true), escapes}));
  edges.push_back({free, free, static_cast<std::uint32_t>(labels.size() - 1)});
  const ExprId trie = g.g.add_graph(kNodes + 1, edges, {free}, labels);
  g.define(root, g.seq({g.lit("\""), trie, g.lit("\"")}));
  const Grammar grammar = g.done(root);
  const detail::Automaton a = detail::build_automaton(grammar, detail::AutomatonLimits{});
  // Copied per edge, each "any other character" label would take over 20 states (its UTF-8 ranges and
  // the escapes); shared, each edge adds a state or two.
  EXPECT_LT(a.n_states(), 4 * (kNodes + 1)) << a.n_states();
  const CompiledGrammar cg = compile_grammar(grammar, small_vocabulary());
  Matcher m(cg);
  EXPECT_TRUE(m.accept_bytes("\"abx\\n\xCE\xB1\"") && m.can_stop());
  expect_masks_are_brute_force(cg, 300, 7);
}

// Alternatives that end in the same bytes share them, empty literals included (a choice with "" among its
// alternatives, as GBNF and the JSON Schema converter write optional parts).
TEST(Compiler, ChoicesShareTheirEndingsWithEmptyLiterals) {
  G g;
  RuleId root = g.rule("root");
  g.define(root, g.seq({g.alt({g.lit(""), g.lit("ab"), g.lit("cb"), g.seq({g.cls('x', 'z'), g.lit("b")}),
                               g.cls({{0x3B1, 0x3B9}, {0x4E00, 0x4E10}})}),
                        g.lit("!")}));
  const CompiledGrammar cg = compile_grammar(g.done(root), small_vocabulary());
  for (const char* ok : {"!", "ab!", "cb!", "yb!", "\xCE\xB1!", "\xE4\xB8\x80!"}) {
    Matcher m(cg);
    EXPECT_TRUE(m.accept_bytes(ok) && m.can_stop()) << ok;
  }
  for (const char* bad : {"b!", "a!", "xab!", "\xCF\x89!", "ab"}) {
    Matcher m(cg);
    EXPECT_FALSE(m.accept_bytes(bad) && m.can_stop()) << bad;
  }
  expect_masks_are_brute_force(cg, 100, 3);
}

// A token that leaves a rule part-way is accepted outright when every caller reads its rest inside its own
// rule (the real caller is one of them); while one caller reads it differently, it stays uncertain.
TEST(Compiler, TokensEveryCallerReadsOnAreAcceptedInTheTable) {
  auto build = [](bool third_caller) {
    G g;
    RuleId root = g.rule("root"), decl = g.rule("decl"), type = g.rule("type");
    // `type` is large enough to be called, not inlined; it ends after one or more spaces.
    g.define(type, g.seq({g.alt({g.lit("int"), g.lit("char"), g.lit("unsigned"), g.lit("double"), g.lit("struct")}),
                          g.plus(g.lit(" "))}));
    const ExprId name = g.plus(g.cls('a', 'z'));
    std::vector<ExprId> shapes = {g.seq({g.ref(type), name, g.lit(";")}), g.seq({g.lit("("), g.ref(type), name, g.lit(")")})};
    if (third_caller) shapes.push_back(g.seq({g.lit("["), g.ref(type), g.lit("]")}));  // no name after it
    g.define(decl, g.alt(shapes));
    g.define(root, g.plus(g.ref(decl)));
    return compile_grammar(g.done(root), small_vocabulary());
  };
  const CompiledGrammar two = build(false), three = build(true);
  // Tokens like " a" after "int": the space ends `type`, the letter is a name in both callers of the first
  // grammar (accepted in the table); the third caller of the second reads "]" there (left uncertain).
  auto space_letter_uncertain = [](const CompiledGrammar& cg) {
    std::size_t n = 0;
    for (const detail::TokenTable& t : cg.impl()->tables) {
      for (std::uint32_t p : t.uncertain) {
        const std::string_view tok = cg.vocabulary().index().sorted_token(p);
        n += tok.size() == 2 && tok[0] == ' ' && tok[1] >= 'a' && tok[1] <= 'z';
      }
    }
    return n;
  };
  EXPECT_TRUE(two.stats().precomputed);
  EXPECT_EQ(space_letter_uncertain(two), 0u);
  EXPECT_GT(space_letter_uncertain(three), 0u);
  for (const CompiledGrammar* cg : {&two, &three}) {
    Matcher m(*cg);
    EXPECT_TRUE(m.accept_bytes("int ab;(char  x)") && m.can_stop());
    expect_masks_are_brute_force(*cg, 200, 5);
  }
  Matcher m(three);
  EXPECT_TRUE(m.accept_bytes("[unsigned  ]") && m.can_stop());
  EXPECT_FALSE(m.accept_bytes("[int a]"));
}

// Walks that reach a configuration looping on string characters part-way through a token read the
// rest of it whole when it is text (a JSON string's characters, the last one possibly cut short): the
// masks must still be exact, eager and on first use, after a key trie and inside free strings.
TEST(Compiler, TokensReadWholeFromALoopDeepInTheWalkMatchBruteForce) {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"\"k", "\"ke", "\"key\"", "ke", "key", "kx", "ky\"", "ab", "abc", "a\"", "ab\"", "ab\\n",
                        "\\n", "\\u00e9", "\xC3\xA9", "\xC3\xA9" "a", "a\xC3\xA9", "a\xE4\xB8", "\xE4\xB8",
                        "\xE4\xB8\x80", "\xE4\xB8\x80" "b", "\xE4\xB8\x80\"", "\xE4\xB8\x80\\n", "\x80" "b",
                        "\xB8\x80", "k\xE4", "\"\xE4\xB8", "\": \"", "\":\"ab", "\"}", "ab\"}", "\xC3\xA9\"",
                        "a\x01", "k\xC3\xA9", "k\\", "\":1", "1}", "\xE0\x80", "ab\xED\xA0", "\"k\xC3", "\xC3" "a", "\xC3" "ab"}) {
    t.push_back(s);
  }
  auto vocab = std::make_shared<const Vocabulary>(t, std::vector<TokenId>{}, std::vector<TokenId>{});
  const Grammar g = json_schema_to_grammar(std::string_view(
      R"({"type": "object", "properties": {"key": {"type": "string"}, "kx": {"type": "string", "maxLength": 3}}})"));
  // A loop entered part-way through a character of the token (after a lone lead byte): the rest starts
  // with a continuation byte, which the loop does not read.
  G lead;
  RuleId root = lead.rule("root");
  lead.define(root, lead.seq({lead.lit("\xC3"), lead.star(lead.cls(' ', 0x10FFFF))}));
  const Grammar after_lead = lead.done(root);
  for (const bool eager : {true, false}) {
    CompileOptions o;
    o.tables = eager ? TableBuild::kInCompile : TableBuild::kAtFirstUse;
    expect_masks_are_brute_force(compile_grammar(after_lead, vocab, o), 50, 13);
    const CompiledGrammar cg = compile_grammar(g, vocab, o);
    Matcher m(cg);
    EXPECT_TRUE(m.accept_bytes("{\"k\xE4\xB8\x80" "b\": \"ab\xE4\xB8\x80\\n\"}") && m.can_stop());
    expect_masks_are_brute_force(cg, 400, eager ? 11 : 12);
  }
}

// Also from a configuration looping on a set of ASCII bytes only (an unanchored pattern's ".*" between
// commas, a run of letters): a token whose bytes all loop is read whole, others are walked.
TEST(Compiler, TokensReadWholeFromAByteSetLoopMatchBruteForce) {
  G g;
  RuleId root = g.rule("root");
  g.define(root, g.plus(g.seq({g.plus(g.cls({{'a', 'z'}, {' ', ' '}, {'(', ')'}})), g.lit(";")})));
  const Grammar pattern = json_schema_to_grammar(std::string_view(R"js({"type": "string", "pattern": "E\\(.*,.*\\)"})js"));
  const Grammar letters = g.done(root);
  for (const Grammar* grammar : {&pattern, &letters}) {
    for (const bool eager : {true, false}) {
      CompileOptions o;
      o.tables = eager ? TableBuild::kInCompile : TableBuild::kAtFirstUse;
      const CompiledGrammar cg = compile_grammar(*grammar, small_vocabulary(), o);
      expect_masks_are_brute_force(cg, 300, eager ? 21 : 22);
    }
  }
  Matcher m(compile_grammar(pattern, small_vocabulary()));
  EXPECT_TRUE(m.accept_bytes("\"ab E(x, y) z\"") && m.can_stop());
}

// A configuration looping on a set of ASCII bytes and on every multi-byte character (a pattern's
// [^/]*, a class excluding a few ASCII bytes) also reads whole the tokens whose other bytes are whole
// characters (the last may be cut short), from a character boundary; ill-formed ones are walked.
TEST(Compiler, TokensReadWholeFromAByteSetAndCharacterLoopMatchBruteForce) {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"ab", "a/b", "/a", "\xC3\xA9", "\xC3\xA9" "a", "a\xC3", "\xC3\xA9/", "\xE4\xB8\x80", "\xE4\xB8",
                        "\x80" "b", "a\xC3" "a", "\xED\xA0\x80", "\xC0\xAF", "\xF0\x9F\x98\x80" "x", "\xF0\x9F",
                        ";\xC3\xA9", "ab;cd", "a;", "\xC3\xA9;", "a\"", "\xC3\xA9\"", "a\\n", "\xE4\xB8\x80\xC3", "\xC3\xA9\xC3\xA9",
                        "x\xE4\xB8\x80/", "\"a\xC3\xA9", "\xC3" "ab", "a\xFF"}) {
    t.push_back(s);
  }
  auto vocab = std::make_shared<const Vocabulary>(t, std::vector<TokenId>{}, std::vector<TokenId>{});
  const Grammar pattern = json_schema_to_grammar(std::string_view(R"js({"type": "string", "pattern": "^[^/]*/[^/]+$"})js"));
  G g;
  RuleId root = g.rule("root");
  g.define(root, g.plus(g.seq({g.star(g.cls({{0x20, ':'}, {'<', 0x10FFFF}})), g.lit(";")})));
  const Grammar items = g.done(root);
  // The same loop over ASCII bytes only: the tokens with other bytes are walked (and die).
  G ascii;
  root = ascii.rule("root");
  ascii.define(root, ascii.plus(ascii.seq({ascii.star(ascii.cls({{0x20, ':'}, {'<', 0x7E}})), ascii.lit(";")})));
  const Grammar ascii_items = ascii.done(root);
  // A loop entered right after a lone lead byte: a token's rest from there starts with a continuation
  // byte, which the loop does not read.
  G lead;
  root = lead.rule("root");
  lead.define(root, lead.seq({lead.lit("\xC3"), lead.star(lead.cls({{0x20, '.'}, {'0', 0x10FFFF}}))}));
  const Grammar after_lead = lead.done(root);
  for (const Grammar* grammar : {&pattern, &items, &ascii_items, &after_lead}) {
    for (const bool eager : {true, false}) {
      CompileOptions o;
      o.tables = eager ? TableBuild::kInCompile : TableBuild::kAtFirstUse;
      expect_masks_are_brute_force(compile_grammar(*grammar, vocab, o), 300, eager ? 41 : 42);
    }
  }
  Matcher m(compile_grammar(pattern, vocab));
  EXPECT_TRUE(m.accept_bytes("\"a\xC3\xA9 b/\xE4\xB8\x80x\"") && m.can_stop());
}

// And from a configuration that starts a bounded run over a set of ASCII bytes (a counted repetition of
// a character class: every byte of the set one step on, whichever it is): a token whose bytes are all in
// the set and that fits in the run is read whole; longer ones, and those with other bytes, are walked.
// The first-byte groups are large here (the check is made for groups of at least 128 tokens).
TEST(Compiler, TokensReadWholeFromABoundedByteSetRunMatchBruteForce) {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char first : {'a', '0', 'k'}) {
    for (const std::string& s : strings_over(first, "ab0_-", 4)) t.push_back(s);
    for (const std::string extra : {"!", "Z", ".", "\"", "b\"", "bb\":", "\xC3\xA9", "b\xC3"})
      t.push_back(std::string(1, first) + extra);
    t.push_back(std::string(1, first) + std::string(12, 'b'));
    t.push_back(std::string(1, first) + std::string(40, 'a'));
  }
  for (const char* s : {"\"a", "\"ab", "\"ab0\":", "x", "xab", "xa;", ";x", ".", "y", "ya", "yab"}) t.push_back(s);
  auto vocab = std::make_shared<const Vocabulary>(t, std::vector<TokenId>{}, std::vector<TokenId>{});
  G g;
  RuleId root = g.rule("root");
  const auto word = g.cls({{'a', 'z'}, {'0', '9'}, {'_', '_'}, {'-', '-'}});
  const auto hex = g.cls({{'a', 'p'}, {'0', '9'}});
  const auto letter = g.cls({{'a', 'z'}});
  // After "y" the set narrows part-way: a run over `word` is one byte long before the letters.
  g.define(root, g.plus(g.alt({g.seq({g.lit("x"), g.rep(word, 1, 6), g.lit(";")}),
                               g.seq({g.lit("y"), g.rep(word, 2, 2), g.rep(letter, 4, 4), g.lit(";")}),
                               g.seq({g.rep(hex, 2, 40), g.lit(".")})})));
  const Grammar runs = g.done(root);
  const Grammar keys = json_schema_to_grammar(std::string_view(
      R"({"type": "object", "patternProperties": {"^[0-9a-zA-Z_-]{1,12}$": {"type": "integer"}}, "additionalProperties": false})"));
  for (const Grammar* grammar : {&runs, &keys}) {
    for (const bool eager : {true, false}) {
      CompileOptions o;
      o.tables = eager ? TableBuild::kInCompile : TableBuild::kAtFirstUse;
      const CompiledGrammar cg = compile_grammar(*grammar, vocab, o);
      expect_masks_are_brute_force(cg, 150, eager ? 31 : 32);
    }
  }
  Matcher m(compile_grammar(keys, vocab));
  EXPECT_TRUE(m.accept_bytes("{\"ab0_-Zb\":1,\"k\":2}") && m.can_stop());
  EXPECT_FALSE(m.accept_bytes(",\"abbbbbbbbbbbb\":"));  // 13 characters
}

// A long literal among a choice's alternatives is built without recursion per byte (it would overflow the
// stack): 300,000 bytes, one state each.
TEST(Compiler, LongLiteralInAChoiceBuilds) {
  G g;
  RuleId root = g.rule("root");
  std::string text;
  for (int i = 0; i < 150'000; ++i) text += "ab";
  g.define(root, g.alt({g.lit(text), g.lit("x")}));
  const Grammar grammar = g.done(root);
  const detail::Automaton a = detail::build_automaton(grammar, detail::AutomatonLimits{});
  EXPECT_GE(a.n_states(), text.size());
  EXPECT_LT(a.n_states(), text.size() + 16);
}

// A large automaton whose tables are built on first use finds its classes rule by rule: a rule of at
// least 4,096 states in compile, the others at their first table. The classes are the whole automaton's
// (the representatives agree with an eager compile's), a rule's equivalent states share a table, and the
// masks are brute force's.
TEST(Compiler, ClassesFoundRuleByRuleAreTheWholeAutomatons) {
  G g;
  const RuleId root = g.rule("root"), big = g.rule("big");
  std::vector<RuleId> small;
  std::vector<ExprId> choices{g.seq({g.lit("<"), g.ref(big), g.lit(">")})};
  // digits7 comes after a lead longer than any token: no walk from before it reaches its states.
  auto lead = [](int i) { return i == 7 ? std::string("#######") : std::string(1, static_cast<char>('a' + i)); };
  // (Sequences, not counted repetitions: those are built in chunks of a few states.)
  std::vector<ExprId> letters(5000, g.cls('a', 'z'));
  letters.push_back(g.lit(";"));
  g.define(big, g.seq(letters));
  for (int i = 0; i < 8; ++i) {
    small.push_back(g.rule("digits" + std::to_string(i)));
    std::vector<ExprId> digits(700, g.cls('0', '9'));
    digits.push_back(g.lit(std::string(1, static_cast<char>('A' + i))));
    g.define(small[i], g.seq(digits));
    choices.push_back(g.seq({g.lit(lead(i)), g.ref(small[i])}));
  }
  g.define(root, g.plus(g.alt(choices)));
  const Grammar grammar = g.done(root);
  auto vocab = small_vocabulary();
  CompileOptions first_use;
  first_use.tables = TableBuild::kAtFirstUse;
  const CompiledGrammar lazy = compile_grammar(grammar, vocab, first_use);
  const CompiledGrammar eager = compile_grammar(grammar, vocab);
  const CompiledGrammar::Impl& li = *lazy.impl();
  const CompiledGrammar::Impl& ei = *eager.impl();
  const detail::Automaton& a = li.automaton;
  ASSERT_GT(a.n_states(), 8192u);
  ASSERT_TRUE(li.classes_by_rule);
  ASSERT_EQ(ei.canonical_states.size(), a.n_states());
  auto states_of = [&](RuleId r) {
    const std::uint32_t lo = a.rule_start[r], hi = a.rule_final[r] + 1;
    return std::pair{lo, hi};
  };
  // Shares tables like the eager compile: as many distinct tables among the rule's states that read bytes,
  // and fewer than those states.
  auto expect_as_eager = [&](RuleId r, const char* when) {
    const auto [lo, hi] = states_of(r);
    std::set<std::uint32_t> lazy_tables, eager_tables;
    std::size_t n_scan = 0, n_merged = 0;
    for (std::uint32_t s = lo; s < hi; ++s) {
      EXPECT_EQ(li.canonical_states[s], ei.canonical_states[s]) << when << ", state " << s;
      n_merged += li.canonical_states[s] != s ? 1 : 0;
      if (li.scan_index[s] == CompiledGrammar::Impl::kNoTable) continue;
      ++n_scan;
      lazy_tables.insert(li.scan_index[s]);
      eager_tables.insert(ei.scan_index[s]);
    }
    EXPECT_GT(n_merged, 0u) << when;
    EXPECT_EQ(lazy_tables.size(), eager_tables.size()) << when;
    EXPECT_LT(lazy_tables.size(), n_scan) << when;
  };
  ASSERT_GE(states_of(big).second - states_of(big).first, 4096u);
  expect_as_eager(big, "the large rule, classified in compile");
  auto unclassified = [&](RuleId r) {
    const auto [lo, hi] = states_of(r);
    for (std::uint32_t s = lo; s < hi; ++s)
      if (li.canonical_states[s] != s) return false;
    return true;
  };
  ASSERT_LT(states_of(small[0]).second - states_of(small[0]).first, 4096u);
  EXPECT_TRUE(unclassified(small[0]) && unclassified(small[7])) << "not classified before they are needed";
  // The first mask's table walks tokens such as "a0" into digits0: digits0 still waits for a table of
  // its own.
  Matcher start(lazy);
  std::vector<std::uint32_t> mask(start.mask_words());
  start.fill_next_token_bitmask(mask);
  EXPECT_TRUE(unclassified(small[0]));
  Matcher m(lazy);
  ASSERT_TRUE(m.accept_bytes("#######12"));  // in digits7
  m.fill_next_token_bitmask(mask);
  expect_as_eager(small[7], "a small rule, classified at its first table");
  expect_masks_are_brute_force(lazy, 300, 17);
  // Rules classified by several threads at once (each matcher's first table in another rule): the same
  // masks as one thread on a fresh compile.
  std::vector<std::string> prefixes{"<ab", "<abc", "a0", "a01"};
  for (int i = 1; i < 8; ++i) prefixes.push_back(lead(i) + "12");
  auto masks_of = [&](ThreadPool* pool) {
    const CompiledGrammar fresh = compile_grammar(grammar, vocab, first_use);
    std::vector<Matcher> matchers;
    std::vector<Matcher*> ptrs;
    for (const std::string& p : prefixes) {
      matchers.emplace_back(fresh);
      EXPECT_TRUE(matchers.back().accept_bytes(p)) << p;
    }
    for (Matcher& x : matchers) ptrs.push_back(&x);
    std::vector<std::uint32_t> out(ptrs.size() * matchers[0].mask_words());
    fill_next_token_bitmasks(ptrs, out, pool);
    return out;
  };
  ThreadPool pool(4);
  EXPECT_EQ(masks_of(&pool), masks_of(nullptr));
}

// Tables past the eager time budget are built on first use: compile() succeeds, the masks are the same.
TEST(Compiler, TablesPastTheEagerBudgetAreBuiltOnFirstUse) {
  const Grammar g = json_schema_to_grammar(std::string_view(R"({"type":"object","properties":{"s":{"type":"string","maxLength":20},"n":{"type":"integer"}}})"));
  CompileOptions none;
  none.eager_table_ms = 0;
  const CompiledGrammar lazy = compile_grammar(g, small_vocabulary(), none);
  EXPECT_FALSE(lazy.stats().precomputed);
  const CompiledGrammar eager = compile_grammar(g, small_vocabulary());
  EXPECT_TRUE(eager.stats().precomputed);
  std::size_t n = 0;
  random_walk(lazy, 120, 5, [&](Matcher& m, const std::string& text) {
    Matcher e(eager);
    ASSERT_TRUE(e.accept_bytes(text));
    EXPECT_EQ(fast_mask(m), fast_mask(e)) << text;
    if (++n % 10 == 0) {
      EXPECT_EQ(fast_mask(m), brute_force_mask(m)) << text;
    }
  });
  CompileOptions bad;
  bad.eager_table_ms = -1;
  EXPECT_THROW(compile_grammar(g, small_vocabulary(), bad), InputError);
}

// A large sub-expression met more than once (here through a counted repetition and through two
// references) is emitted once, as a rule of its own, instead of once per use: inlined, the nested
// repetition below would need 100 copies of a 100-letter repetition (over 30,000 states). Same language.
TEST(Compiler, SharedSubExpressionsAreEmittedOnce) {
  G g;
  RuleId r = g.rule("root");
  ExprId word = g.rep(g.cls('a', 'z'), 1, 100);
  g.define(r, g.seq({g.rep(word, 1, 100), g.lit(","), word}));
  CompileOptions o;
  o.max_states = 20'000;
  Matcher m(compile_grammar(g.done(r), small_vocabulary(), o));
  EXPECT_LT(m.grammar().stats().n_states, 2'000u);
  for (const std::string& text : {std::string(150, 'a') + ",b", std::string("a,") + std::string(100, 'z')}) {
    m.reset();
    EXPECT_TRUE(m.accept_bytes(text) && m.can_stop()) << text.size();
  }
  for (const std::string& text : {std::string(",b"), std::string("a,"), std::string("a,") + std::string(101, 'z')}) {
    m.reset();
    EXPECT_FALSE(m.accept_bytes(text) && m.can_stop()) << text;
  }
}

// Rules with one body (the JSON Schema converter's equal strings under different subschemas) call
// one shared rule that holds it: its states exist once, not once per rule.
TEST(Compiler, RulesWithOneBodyShareItsStates) {
  auto build = [](bool second) {
    G g;
    RuleId r = g.rule("root"), a = g.rule("a");
    const ExprId body = g.rep(g.seq({g.cls('a', 'z'), g.lit("-")}), 1, 60);
    g.define(a, body);
    if (!second) {
      g.define(r, g.seq({g.ref(a), g.lit(","), g.ref(a)}));
    } else {
      RuleId b = g.rule("b");
      g.define(b, body);
      g.define(r, g.seq({g.ref(a), g.lit(","), g.ref(b)}));
    }
    return compile_grammar(g.done(r), small_vocabulary());
  };
  const CompiledGrammar one = build(false), two = build(true);
  EXPECT_LT(two.stats().n_states, one.stats().n_states + 16) << one.stats().n_states;
  Matcher m(two);
  std::string sixty;
  for (int i = 0; i < 60; ++i) sixty += "q-";
  for (const std::string& text : {std::string("a-,b-"), std::string("a-b-,c-"), sixty + "," + sixty}) {
    m.reset();
    EXPECT_TRUE(m.accept_bytes(text) && m.can_stop()) << text;
  }
  for (const std::string& text : {std::string("a-,"), std::string(",a-"), std::string("a-,b-c"), sixty + ",q-" + sixty}) {
    m.reset();
    EXPECT_FALSE(m.accept_bytes(text) && m.can_stop()) << text;
  }
}

// Strings with the same constraints under different subschemas (here one of them also admits null) are
// one expression, so the automaton holds their states once.
TEST(Compiler, EqualStringConstraintsShareTheirStates) {
  const auto compile = [](const std::string& schema) {
    return compile_grammar(json_schema_to_grammar(std::string_view(schema)), small_vocabulary());
  };
  const CompiledGrammar one = compile(R"({"type":"object","properties":{"a":{"type":"string","maxLength":300}}})");
  const CompiledGrammar three = compile(R"({"type":"object","properties":{"a":{"type":"string","maxLength":300},
      "b":{"type":["string","null"],"maxLength":300},"c":{"type":"string","maxLength":300,"minLength":0}},
      "additionalProperties":false})");
  EXPECT_LT(three.stats().n_states, one.stats().n_states + 300) << one.stats().n_states;
  Matcher m(three);
  for (const std::string& text : {std::string(R"({"a":"x","b":null,"c":""})"), R"({"b":")" + std::string(300, 'z') + R"("})"}) {
    m.reset();
    EXPECT_TRUE(m.accept_bytes(text) && m.can_stop()) << text;
  }
  for (const std::string& text : {std::string(R"({"a":null})"), std::string(R"({"c":null})"), R"({"b":")" + std::string(301, 'z') + R"("})"}) {
    m.reset();
    EXPECT_FALSE(m.accept_bytes(text) && m.can_stop()) << text;
  }
}

// Token tables of rules that are identical in two grammars are built once and shared (the process-wide
// cache): the second grammar takes them from the cache, and its masks equal those of a compile that
// shares nothing, and brute force, at every state of random walks.
TEST(Compiler, SharedTablesGiveTheSameMasks) {
  const auto vocab = small_vocabulary();
  clear_shared_table_cache();
  const Grammar a = json_schema_to_grammar(std::string_view(R"({"type":"object","properties":{"s":{"type":"string"},"n":{"type":"number"}}})"));
  // Other keys, the same value rules in the same places (followed by the same bytes).
  const Grammar b = json_schema_to_grammar(std::string_view(R"({"type":"object","properties":{"key":{"type":"string"},"n":{"anyOf":[{"type":"string"},{"type":"number"}]}}})"));
  EXPECT_EQ(compile_grammar(a, vocab).stats().n_shared_tables, 0u);
  const CompiledGrammar shared = compile_grammar(b, vocab);
  EXPECT_GT(shared.stats().n_shared_tables, 0u);  // the string and number rules come from a's compile
  CompileOptions alone;
  alone.shared_tables = false;
  const CompiledGrammar fresh = compile_grammar(b, vocab, alone);
  EXPECT_EQ(fresh.stats().n_shared_tables, 0u);
  std::size_t n = 0;
  random_walk(shared, 300, 7, [&](Matcher& m, const std::string& text) {
    Matcher f(fresh);
    ASSERT_TRUE(f.accept_bytes(text));
    const auto mask = fast_mask(m);
    EXPECT_EQ(mask, fast_mask(f)) << text;
    if (++n % 10 == 0) {
      EXPECT_EQ(mask, brute_force_mask(m)) << text;
    }
  });
  clear_shared_table_cache();
}

// Two rules whose walks reach the same configuration after the first byte (both rules have ended)
// keep different uncertain tokens: each is filtered by what may follow its own rule. Tables of one
// compile reuse a first-byte group's result only between states of the same rule (a regression test:
// reusing it across rules dropped "xz" from B's table). Groups of 64+ tokens are the reused ones.
TEST(Compiler, FirstByteGroupsAreReusedOnlyWithinARule) {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  t.push_back("xy");
  t.push_back("xz");
  for (int i = 0; i < 80; ++i) t.push_back("x" + std::to_string(100 + i));
  auto vocab = std::make_shared<Vocabulary>(std::move(t), std::vector<TokenId>{}, std::vector<TokenId>{});
  G g;
  RuleId root = g.rule("root"), a = g.rule("a"), b = g.rule("b");
  g.define(a, g.lit("x"));
  g.define(b, g.lit("x"));
  g.define(root, g.alt({g.seq({g.lit("a"), g.ref(a), g.lit("y")}), g.seq({g.lit("b"), g.ref(b), g.lit("z")})}));
  Matcher m(compile_grammar(g.done(root), vocab));
  for (const char* prefix : {"a", "b"}) {
    m.reset();
    ASSERT_TRUE(m.accept_bytes(prefix));
    EXPECT_EQ(fast_mask(m), brute_force_mask(m)) << "after " << prefix;
  }
}

TEST(Compiler, InputSizeLimitsAreLimitErrors) {
  CompileOptions o;
  o.max_exprs = 3;
  EXPECT_THROW(compile_grammar(json_like_grammar(), small_vocabulary(), o), LimitError);
  CompileOptions r;
  r.max_rules = 2;
  EXPECT_THROW(compile_grammar(json_like_grammar(), small_vocabulary(), r), LimitError);
}

TEST(Compiler, TimeLimitIsALimitError) {
  G g;
  RuleId r = g.rule("root");
  std::vector<ExprId> letters;  // 200,000 states
  for (int i = 0; i < 200'000; ++i) letters.push_back(g.cls('a' + i % 26, 'z'));
  g.define(r, g.seq(letters));
  CompileOptions o;
  o.max_compile_ms = 1;
  EXPECT_THROW(compile_grammar(g.done(r), small_vocabulary(), o), LimitError);
}

// A cancellation predicate stops a compile as its deadline does, and says so; it is polled only while
// compile() runs.
TEST(Compiler, CancellationStopsACompile) {
  G g;
  RuleId r = g.rule("root");
  std::vector<ExprId> letters;  // 200,000 states: many deadline checks
  for (int i = 0; i < 200'000; ++i) letters.push_back(g.cls('a' + i % 26, 'z'));
  g.define(r, g.seq(letters));
  const Grammar grammar = g.done(r);
  int polls = 0;
  CompileOptions o;
  o.cancelled = [&polls] { return ++polls >= 3; };
  try {
    (void)compile_grammar(grammar, small_vocabulary(), o);
    ADD_FAILURE() << "a cancelled compile returned";
  } catch (const LimitError& e) {
    EXPECT_NE(std::string(e.what()).find("cancelled"), std::string::npos) << e.what();
  }
  EXPECT_GE(polls, 3);
  // Through a cache: the error is not cached, and the same grammar compiles once the caller stays.
  Compiler c(small_vocabulary());
  EXPECT_THROW(c.compile(json_like_grammar(), [] { return true; }), LimitError);
  EXPECT_EQ(c.cache_size(), 0u);
  int calls = 0;
  EXPECT_NO_THROW(c.compile(json_like_grammar(), [&calls] { return ++calls < 0; }));
  EXPECT_EQ(c.cache_size(), 1u);
  // Tables left to the background never poll it (the caller may be gone by then).
  const int after_compile = calls;
  CompileOptions background;
  background.tables = TableBuild::kInBackground;
  background.cancelled = [&calls] { return ++calls < 0; };
  const CompiledGrammar cg = compile_grammar(json_like_grammar(), small_vocabulary(), background);
  const int at_return = calls;
  (void)cg.wait_for_tables();
  EXPECT_EQ(calls, at_return);
  (void)after_compile;
}

// The cache keeps at most max_bytes of grammars (least recently used evicted; one larger than the
// bound alone is not kept), measured as CompiledGrammar::memory_bytes, which grows as tables are built.
TEST(Compiler, CacheIsBoundedByBytes) {
  auto vocab = small_vocabulary();
  CompileOptions lazy;
  lazy.tables = TableBuild::kAtFirstUse;
  const CompiledGrammar probe = compile_grammar(json_like_grammar(), vocab, lazy);
  const std::size_t before = probe.memory_bytes();
  EXPECT_GT(before, 0u);
  Matcher m(probe);
  (void)fast_mask(m);  // builds the first state's table
  EXPECT_GT(probe.memory_bytes(), before);

  const std::size_t one = compile_grammar(arithmetic_grammar(), vocab).memory_bytes();
  const std::size_t two = compile_grammar(json_like_grammar(), vocab).memory_bytes();
  const std::size_t three = compile_grammar(counted_grammar(), vocab).memory_bytes();
  const std::size_t bound = one + two + three - 1;  // the three do not fit together; each fits alone
  Compiler c(vocab, {}, 64, bound);
  c.compile(arithmetic_grammar());
  c.compile(json_like_grammar());
  c.compile(counted_grammar());
  EXPECT_LE(c.cache_bytes(), bound);
  EXPECT_LT(c.cache_size(), 3u);
  EXPECT_GE(c.cache_size(), 1u);
  Compiler tiny(vocab, {}, 64, 1);
  tiny.compile(arithmetic_grammar());
  EXPECT_EQ(tiny.cache_size(), 0u);
  EXPECT_EQ(tiny.cache_bytes(), 0u);
  c.clear();
  EXPECT_EQ(c.cache_size(), 0u);
  // A grammar kept while small, whose tables are then built, is evicted by the next trim().
  Compiler growing(vocab, lazy, 64, before + 1);
  const CompiledGrammar kept = growing.compile(json_like_grammar());
  EXPECT_EQ(growing.cache_size(), 1u);
  Matcher grow(kept);
  (void)fast_mask(grow);
  EXPECT_GT(kept.memory_bytes(), before + 1);
  EXPECT_EQ(growing.trim(), 0u);
  EXPECT_EQ(growing.cache_size(), 0u);
}

TEST(Compiler, MemoryLimitIsALimitError) {
  CompileOptions o;
  o.max_memory_bytes = 1000;
  EXPECT_THROW(compile_grammar(json_like_grammar(), small_vocabulary(), o), LimitError);
}

TEST(Compiler, LargeCountedRepetitionStaysSmall) {
  G g;
  RuleId r = g.rule("root"), x = g.rule("x");
  g.define(x, g.alt({g.lit("ab"), g.lit("c")}));
  g.define(r, g.seq({g.rep(g.ref(x), 1, 1000), g.lit(".")}));
  auto vocab = small_vocabulary();
  CompiledGrammar cg = compile_grammar(g.done(r), vocab);
  EXPECT_LT(cg.stats().n_states, 10'000u);
  Matcher m(cg);
  ASSERT_TRUE(m.accept_bytes(std::string(999, 'c')));
  ASSERT_TRUE(m.accept_bytes("ab"));
  EXPECT_FALSE(m.accept_bytes("c"));
  EXPECT_TRUE(m.accept_bytes("."));
  EXPECT_TRUE(m.can_stop());
}

// A long counted repetition is a chain of calls of a rule of 256 copies, with copies around it: the same
// counts are accepted (checked at each boundary), the masks equal brute force across the chunks' ends, and
// the automaton stays small.
TEST(Compiler, LongCountedRepetitionsAreWrittenWithChunks) {
  auto vocab = small_vocabulary();
  // Past 16,384 inlined states: about 2,000 copies of this child.
  const std::pair<std::uint32_t, std::uint32_t> bounds[] = {{0, 2000}, {2000, 2000}, {129, 3000}, {1900, 4000}, {3, 2100}};
  for (const auto& [lo, hi] : bounds) {
    G g;
    RuleId r = g.rule("root");
    g.define(r, g.seq({g.lit("<"), g.rep(g.alt({g.lit("ab"), g.cls('c', 'd')}), lo, hi), g.lit(">")}));
    const CompiledGrammar cg = compile_grammar(g.done(r), vocab);
    EXPECT_LT(cg.stats().n_states, 5'000u) << lo << ".." << hi;  // inlined: about 4 states a copy
    for (std::int64_t k : {std::int64_t{lo} - 1, std::int64_t{lo}, std::int64_t{lo} + 1, std::int64_t{255}, std::int64_t{256},
                           std::int64_t{257}, std::int64_t{511}, std::int64_t{512}, std::int64_t{hi} - 256, std::int64_t{hi} - 1,
                           std::int64_t{hi}, std::int64_t{hi} + 1}) {
      if (k < 0) continue;
      std::string text = "<";
      for (std::int64_t i = 0; i < k; ++i) text += i % 3 == 0 ? "ab" : i % 3 == 1 ? "c" : "d";
      text += ">";
      Matcher m(cg);
      EXPECT_EQ(m.accept_bytes(text) && m.can_stop(), k >= lo && k <= hi) << lo << ".." << hi << " with " << k;
    }
    expect_masks_are_brute_force(cg, 400, lo + hi);
  }
  // Two long repetitions of one child share its chunk rule.
  G g;
  RuleId r = g.rule("root");
  const ExprId child = g.alt({g.lit("ab"), g.cls('c', 'd')});
  g.define(r, g.seq({g.rep(child, 0, 2000), g.lit(","), g.rep(child, 0, 3000)}));
  const Grammar grammar = g.done(r);
  EXPECT_EQ(detail::build_automaton(grammar, detail::AutomatonLimits{}).rule_start.size(), grammar.rules().size() + 1);
}

TEST(Compiler, CacheHitsAndEvicts) {
  auto vocab = small_vocabulary();
  Compiler c(vocab, {}, 2);
  CompiledGrammar a1 = c.compile(arithmetic_grammar());
  CompiledGrammar a2 = c.compile(arithmetic_grammar());
  EXPECT_EQ(a1.impl(), a2.impl());
  EXPECT_EQ(c.cache_hits(), 1u);
  c.compile(json_like_grammar());
  c.compile(counted_grammar());  // evicts arithmetic (least recently used)
  EXPECT_EQ(c.cache_size(), 2u);
  CompiledGrammar a3 = c.compile(arithmetic_grammar());
  EXPECT_NE(a1.impl(), a3.impl());
  EXPECT_EQ(c.cache_hits(), 1u);
}

TEST(Compiler, CacheIsThreadSafe) {
  auto vocab = small_vocabulary();
  Compiler c(vocab);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 5; ++k) {
        Matcher m(c.compile(i % 2 ? arithmetic_grammar() : json_like_grammar()));
        fast_mask(m);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(c.cache_size(), 2u);
}

TEST(Compiler, NullVocabularyIsAnInputError) {
  EXPECT_THROW(compile_grammar(arithmetic_grammar(), nullptr), InputError);
  EXPECT_THROW(Compiler(nullptr), InputError);
}

TEST(Compiler, StatsAreFilled) {
  CompiledGrammar cg = compile_grammar(json_like_grammar(), small_vocabulary());
  EXPECT_EQ(cg.stats().n_rules, 6u);
  EXPECT_GT(cg.stats().n_scan_states, 0u);
  EXPECT_TRUE(cg.stats().precomputed);
  EXPECT_GT(cg.stats().memory_bytes, 0u);
}

// Tables built ahead over the compile pool's threads equal those built on one thread, also while other
// threads compile at the same time (a compile that finds the pool busy builds on its own thread).
TEST(Compiler, TablesBuiltOnSeveralThreadsAreTheSame) {
  auto vocab = small_vocabulary();
  for (const auto& [name, grammar] : all_small_grammars()) {
    CompileOptions one;
    one.threads = 1;
    one.shared_tables = false;
    CompileOptions pool = one;
    pool.threads = 0;
    const CompiledGrammar reference = compile_grammar(grammar, vocab, one);
    ASSERT_TRUE(reference.stats().precomputed) << name;
    std::vector<CompiledGrammar> others;
    std::mutex mutex;
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&] {
        CompiledGrammar cg = compile_grammar(grammar, vocab, pool);
        std::lock_guard<std::mutex> lock(mutex);
        others.push_back(std::move(cg));
      });
    }
    for (std::thread& t : threads) t.join();
    others.push_back(compile_grammar(grammar, vocab, pool));
    for (const CompiledGrammar& cg : others) {
      ASSERT_TRUE(cg.stats().precomputed) << name;
      EXPECT_EQ(cg.stats().n_uncertain, reference.stats().n_uncertain) << name;
      ASSERT_EQ(cg.impl()->tables.size(), reference.impl()->tables.size()) << name;
      for (std::size_t i = 0; i < reference.impl()->tables.size(); ++i) {
        EXPECT_TRUE(sets_of(cg.impl()->tables[i]) == sets_of(reference.impl()->tables[i])) << name << " table " << i;
      }
    }
    expect_masks_are_brute_force(others.back(), 40, 3);
  }
}

// A grammar whose only word is empty has no table to build: compile builds none, on any thread count.
TEST(Compiler, GrammarWithoutTablesCompilesOnThePool) {
  for (const std::size_t threads : {std::size_t{0}, std::size_t{1}}) {
    CompileOptions o;
    o.threads = threads;
    const CompiledGrammar cg = compile_grammar(parse_gbnf("root ::= \"\"\n"), small_vocabulary(), o);
    EXPECT_EQ(cg.stats().n_tables, 0u);
    EXPECT_TRUE(cg.stats().precomputed);
    Matcher m(cg);
    EXPECT_TRUE(m.can_stop());
    EXPECT_FALSE(m.accept_bytes("a"));
  }
}

// The bounds hold on the pool's threads: past the table time, the rest is built on first use (and
// masks are still exact); past the memory bound, compile throws.
TEST(Compiler, BoundsHoldWhileTablesAreBuiltOnThreads) {
  auto vocab = small_vocabulary();
  CompileOptions rushed;
  rushed.threads = 0;
  rushed.eager_table_ms = 0;
  const CompiledGrammar cg = compile_grammar(json_like_grammar(), vocab, rushed);
  EXPECT_FALSE(cg.stats().precomputed);
  expect_masks_are_brute_force(cg, 60, 9);
  CompileOptions lazy;
  lazy.tables = TableBuild::kAtFirstUse;
  CompileOptions tight;
  tight.threads = 0;
  tight.shared_tables = false;
  tight.max_memory_bytes = compile_grammar(json_like_grammar(), vocab, lazy).stats().memory_bytes + 1;
  EXPECT_THROW(compile_grammar(json_like_grammar(), vocab, tight), LimitError);
}

}  // namespace
}  // namespace pse::testing
