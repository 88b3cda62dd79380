// The stack automaton (pse/src/stack_dfa.h) against the Earley chart walks it replaces: every token
// table and chain table it builds equals the one the chart builds, state by state, on the small
// grammars and on the shared GBNF grammars (fresh and shared automata); and its bounds (left
// recursion overflows, deep nesting does not).
#include "stack_dfa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <fstream>
#include <map>
#include <set>
#include <span>
#include <sstream>

#include "automaton.h"
#include "engine_test_util.h"
#include "pse/gbnf.h"
#include "pse/regex.h"
#include "shared_data.h"
#include "state_classes.h"
#include "token_table.h"
#include "vocabulary_index.h"

namespace {

using pse::Grammar;
using pse::Vocabulary;
using pse::VocabularyIndex;
using namespace pse::detail;

void expect_same(const TokenTable& x, const TokenTable& y, const std::string& where) {
  EXPECT_EQ(x.accepted_bits, y.accepted_bits) << where;
  EXPECT_EQ(x.accepted_list, y.accepted_list) << where;
  EXPECT_EQ(x.uncertain, y.uncertain) << where;
  EXPECT_EQ(x.end_begin, y.end_begin) << where;
  EXPECT_EQ(x.end_depths, y.end_depths) << where;
}

void expect_same(const ChainTable& x, const ChainTable& y, const std::string& where) {
  EXPECT_EQ(x.accepted, y.accepted) << where;
  EXPECT_EQ(x.accepted_bits, y.accepted_bits) << where;
  EXPECT_EQ(x.uncertain, y.uncertain) << where;
  EXPECT_EQ(x.end_begin, y.end_begin) << where;
  EXPECT_EQ(x.end_depths, y.end_depths) << where;
}

// A chain table as sets: the accepted ids, and each uncertain token's end depths (by its position in
// the sorted vocabulary).
struct ChainSets {
  std::set<std::uint32_t> accepted;
  std::map<std::uint32_t, std::set<std::uint32_t>> uncertain;
  bool operator==(const ChainSets&) const = default;
};

ChainSets sets_of(const ChainTable& t) {
  ChainSets out;
  for (std::size_t w = 0; w < t.accepted_bits.size(); ++w)
    for (unsigned b = 0; b < 32; ++b)
      if ((t.accepted_bits[w] >> b) & 1) out.accepted.insert(static_cast<std::uint32_t>(w * 32 + b));
  for (const auto id : t.accepted) out.accepted.insert(static_cast<std::uint32_t>(id));
  for (std::size_t k = 0; k < t.uncertain.size(); ++k)
    out.uncertain[t.uncertain[k]].insert(t.end_depths.begin() + t.end_begin[k], t.end_depths.begin() + t.end_begin[k + 1]);
  return out;
}

// What the chain tables of several callers give together: a token accepted by one is accepted; one
// accepted by none stays uncertain with the end depths of them all.
ChainSets union_of(const std::vector<ChainSets>& each, const Vocabulary& vocab) {
  ChainSets out;
  for (const ChainSets& c : each) out.accepted.insert(c.accepted.begin(), c.accepted.end());
  for (const ChainSets& c : each) {
    for (const auto& [p, depths] : c.uncertain) {
      const auto id = static_cast<std::uint32_t>(vocab.index().text_tokens()[p]);
      if (!out.accepted.contains(id)) out.uncertain[p].insert(depths.begin(), depths.end());
    }
  }
  return out;
}

// Every reachable state that reads bytes: its table by the stack automaton (fresh, and one shared
// by all states) equals the chart's; for tables with uncertain tokens, the chain tables one and two
// callers up too, and the chain table of all the callers of one rule together equals the union of
// theirs. Returns the number of tables compared.
std::size_t n_groups_checked = 0;  // chain tables of several callers compared, over all the tests

std::size_t check_walks(const Grammar& g, const Vocabulary& vocab, const std::string& name) {
  const Automaton a = build_automaton(g, AutomatonLimits{});
  StackDfa shared(a);
  std::size_t n = 0;
  auto callers_of = [&](std::uint32_t rule) {
    std::vector<std::uint32_t> out;
    for (std::uint32_t s = 0; s < a.n_states(); ++s) {
      if (!a.reachable[s]) continue;
      for (std::uint32_t e = a.call_begin[s]; e < a.call_begin[s + 1]; ++e)
        if (a.call_edges[e].rule == rule) out.push_back(a.call_edges[e].target);
    }
    return out;
  };
  for (std::uint32_t s = 0; s < a.n_states(); ++s) {
    if (!a.reachable[s] || !a.has_bytes(s)) continue;
    const std::string where = name + " state " + std::to_string(s);
    const TokenTable earley = build_token_table(a, vocab, s, nullptr, nullptr, Walker::kEarley);
    expect_same(build_token_table(a, vocab, s, nullptr), earley, where + " (fresh)");
    expect_same(build_token_table(a, vocab, s, nullptr, &shared), earley, where + " (shared)");
    ++n;
    if (earley.uncertain.empty()) continue;
    std::map<std::uint32_t, std::vector<std::uint32_t>> callers_by_rule;
    std::map<std::uint32_t, std::vector<ChainSets>> singles_by_rule;
    for (const std::uint32_t ret : callers_of(a.state_rule[s])) {
      const std::span<const std::uint32_t> one(&ret, 1);
      const ChainTable up = build_chain_table(a, vocab, earley.view(), one, nullptr, Walker::kEarley);
      expect_same(build_chain_table(a, vocab, earley.view(), one), up, where + " chain " + std::to_string(ret));
      expect_same(build_chain_table(a, vocab, earley.view(), one, &shared), up,
                  where + " chain (shared) " + std::to_string(ret));
      callers_by_rule[a.state_rule[ret]].push_back(ret);
      singles_by_rule[a.state_rule[ret]].push_back(sets_of(up));
      if (up.uncertain.empty()) continue;
      for (const std::uint32_t ret2 : callers_of(a.state_rule[ret])) {
        const std::span<const std::uint32_t> one2(&ret2, 1);
        expect_same(build_chain_table(a, vocab, up.view(), one2),
                    build_chain_table(a, vocab, up.view(), one2, nullptr, Walker::kEarley),
                    where + " chain " + std::to_string(ret) + " " + std::to_string(ret2));
      }
    }
    for (const auto& [rule, callers] : callers_by_rule) {
      if (callers.size() < 2) continue;
      const std::string at = where + " chain of the " + std::to_string(callers.size()) + " callers in rule " +
                             std::to_string(rule);
      const ChainTable together = build_chain_table(a, vocab, earley.view(), callers, &shared);
      expect_same(together, build_chain_table(a, vocab, earley.view(), callers, nullptr, Walker::kEarley), at);
      EXPECT_TRUE(sets_of(together) == union_of(singles_by_rule[rule], vocab)) << at;
      ++n_groups_checked;
    }
  }
  return n;
}

// The small vocabulary plus long runs that nest deep or repeat a rule many times.
std::shared_ptr<const Vocabulary> vocabulary_with_runs() {
  std::vector<std::string> t;
  const auto small = pse::testing::small_vocabulary();
  for (std::size_t i = 0; i < small->n_tokens(); ++i) {
    t.push_back(small->is_special(static_cast<pse::TokenId>(i))
                    ? ""
                    : small->token_bytes(static_cast<pse::TokenId>(i)));
  }
  for (const char* run :
       {"((((((((((((((((", "----------------------------------------------------------------",
        "))))))))", "[[[[[[[[[[[[", "]]]]]]", "{\"a\":{\"a\":[[", "                ", "\n\n\n\n",
        "/* a */", "// x\n", "int x = 1;", " = (", "-(-(", "aaaaaaaaaaaaaaaaaaaa", "abababab"}) {
    t.push_back(run);
  }
  return std::make_shared<Vocabulary>(std::move(t), std::vector<pse::TokenId>{},
                                      std::vector<pse::TokenId>{});
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(StackDfa, TablesEqualEarleyOnSmallGrammars) {
  const auto vocab = vocabulary_with_runs();
  for (const auto& [name, g] : pse::testing::all_small_grammars()) {
    EXPECT_GT(check_walks(g, *vocab, name), 0u) << name;
  }
}

TEST(StackDfa, TablesEqualEarleyOnSharedGrammars) {
  ORCHARD_REQUIRE_SHARED_DATA("grammars/json.gbnf");
  const auto vocab = vocabulary_with_runs();
  n_groups_checked = 0;
  for (const char* name : {"json", "arithmetic", "c"}) {
    const Grammar g = pse::parse_gbnf(
        read_file(orchard::testing::shared_data(std::string("grammars/") + name + ".gbnf")));
    EXPECT_GT(check_walks(g, *vocab, name), 0u) << name;
  }
  EXPECT_GT(n_groups_checked, 0u) << "no rule is called from two states of one rule";
}

// String characters read whole by the walks (text tokens in a loop, in a bounded run, after a first
// byte, a run shorter than some tokens, escapes between) give the same tables as the chart's walks.
TEST(StackDfa, TablesEqualEarleyOnStringRuns) {
  std::vector<std::string> t;
  const auto base = vocabulary_with_runs();
  for (std::size_t i = 0; i < base->n_tokens(); ++i) t.push_back(base->token_bytes(static_cast<pse::TokenId>(i)));
  for (const char* text : {"a", "ab", "abc", "abcdefgh", "\xc3\xa9", "\xc3\xa9t\xc3\xa9", " \xe4\xb8\xad", "\xf0\x9f\x98\x80x", "\"", "a\"",
                           "\",", "\"}", "\\n", "\\u00e9", "0a", "Fx y", "x\xc3", "\xa9z", "\x7f", "\ta", "abcx", "ax]", "abxy",
                           "abcd\""}) {
    t.push_back(text);
  }
  t.push_back(std::string(40, 'q'));          // longer than the longest run a walk accepts whole
  t.push_back(std::string(20, 'q') + "\"");  // ends a string of 20
  const Vocabulary vocab(std::move(t), {}, {});
  const std::string ch = R"(([^"\\\x00-\x1f]|\\[nt"]|\\u[0-9a-fA-F]{4}))";
  for (const std::string& pattern : {"\"" + ch + "*\",", "\"" + ch + "{0,3}\"}", "\"" + ch + "{2,40}\"",
                                    "\"[0-9a-f]" + ch + "{0,6}\"", "x" + ch + "{0,45}y"}) {
    EXPECT_GT(check_walks(pse::parse_regex(pattern), vocab, pattern), 0u) << pattern;
  }
  // A run in a rule that may end part-way (its caller reads on: "abcx" is uncertain in `s`, not
  // rejected), and one whose end reads on with text characters ("ab" then "x").
  for (const char* gbnf : {"root ::= \"\\\"\" s \"\\\"\" | \"[\" s \"x\" s \"]\"\ns ::= [^\"\\\\\\x00-\\x1f]{0,3}\n",
                          "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]{0,2} \"x\" [a-z]* \"\\\"\"\n"}) {
    EXPECT_GT(check_walks(pse::parse_gbnf(gbnf), vocab, gbnf), 0u) << gbnf;
  }
}

// Tokens made of a set of ASCII bytes, read whole from loops and bounded runs over the set (through
// the set's index once it is built, with jumps over its members), in first-byte groups large enough to
// be kept and reused by later tables: the tables equal the chart's whatever order the states' tables are
// built in on one shared stack automaton (a group recorded with jumps is replayed by another state).
TEST(StackDfa, TablesEqualEarleyWithByteSetLoopsAndRunsInAnyOrder) {
  std::vector<std::string> t;
  for (int b = 1; b < 128; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char first : {'a', 'b'}) {
    for (const std::string& x : pse::testing::strings_over(first, "ab0_-", 3)) t.push_back(x);
    for (const char* extra : {"!", "Z", ";", ",", "b;", "\xc3\xa9"}) t.push_back(std::string(1, first) + extra);
  }
  const Vocabulary vocab(std::move(t), {}, {});
  const std::string word = "[a-z0-9_-]";
  for (const std::string& pattern : {"(x" + word + "+;|y" + word + "+,|" + word + "+\\.|z" + word + "{2,9};|w" + word + "*!)+"}) {
    const Grammar g = pse::parse_regex(pattern);
    const Automaton a = build_automaton(g, AutomatonLimits{});
    for (const bool reverse : {false, true}) {
      StackDfa shared(a);
      std::size_t n = 0;
      for (std::uint32_t i = 0; i < a.n_states(); ++i) {
        const std::uint32_t s = reverse ? a.n_states() - 1 - i : i;
        if (!a.reachable[s] || !a.has_bytes(s)) continue;
        expect_same(build_token_table(a, vocab, s, nullptr, &shared),
                    build_token_table(a, vocab, s, nullptr, nullptr, Walker::kEarley),
                    pattern + " state " + std::to_string(s) + (reverse ? " (reverse order)" : ""));
        ++n;
      }
      EXPECT_GT(n, 10u);
    }
  }
}

// A loop over a set of ASCII bytes entered part-way into tokens (after " a" in " ab0_"): the rests
// read whole from there, prefixes outside the set, rests that leave the set or hold multi-byte
// characters, before and after the set's index is built: the tables equal the chart's.
TEST(StackDfa, TablesEqualEarleyWhenASetLoopStartsPartWayIntoTokens) {
  std::vector<std::string> t;
  for (int b = 1; b < 128; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char first : {' ', '\t', 'a'}) {
    for (const std::string& x : pse::testing::strings_over(first, "ab0_; -", 4)) t.push_back(x);
    for (const char* extra : {"a\xc3\xa9", "\xc3\xa9", "a\xc3", "ab\xe4\xb8\xad", "a!", "aZZZZZZZZ"}) t.push_back(std::string(1, first) + extra);
  }
  const Vocabulary vocab(std::move(t), {}, {});
  // An identifier after spaces, with and without multi-byte characters in its loop; the loop's set
  // large enough (16 bytes or more) for the walks to read rests whole.
  for (const char* pattern : {"([ \\t]+[a-z_][a-z0-9_]*;)+", "( [a-zA-Z][a-z0-9_\\u00e0-\\u4e2d]*-)+",
                              "(x?[ab ][a-z0-9_ ]{0,5};)+"}) {
    const Grammar g = pse::parse_regex(pattern);
    const Automaton a = build_automaton(g, AutomatonLimits{});
    for (int round = 0; round < 3; ++round) {  // the set's index is built after a few requests
      StackDfa shared(a);
      std::size_t n = 0;
      for (std::uint32_t s = 0; s < a.n_states(); ++s) {
        if (!a.reachable[s] || !a.has_bytes(s)) continue;
        const std::string where =
            std::string(pattern) + " state " + std::to_string(s) + " round " + std::to_string(round);
        const TokenTable earley = build_token_table(a, vocab, s, nullptr, nullptr, Walker::kEarley);
        expect_same(build_token_table(a, vocab, s, nullptr, &shared), earley, where);
        expect_same(build_token_table(a, vocab, s, nullptr), earley, where + " (fresh)");
        ++n;
      }
      EXPECT_GT(n, 2u) << pattern;
    }
  }
}

// A rule whose callers all go on into an identifier (c.gbnf's dataType before its names): the tokens
// whose rest after the rule's end is read by every caller are accepted, also when a caller's walk reads
// the rest whole from its identifier loop; rests that leave the loop's set ("ab(", "a;b") or that some
// caller does not read are not; nor are those that leave the identifier before its loop (" ~a" after
// " ab": "~" starts a number in one caller, a word in the other). The tables equal the chart's.
TEST(StackDfa, TablesEqualEarleyWhenEveryCallerReadsTheRestInALoop) {
  std::vector<std::string> t;
  for (int b = 1; b < 128; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (const char first : {' ', 't', 'a'}) {
    for (const std::string& x : pse::testing::strings_over(first, "ab0(; ~", 4)) t.push_back(x);
  }
  for (const char* extra : {"int", "int ", "int a", "int ab_0", "char", "char ", "char a(", " \xc3\xa9", " a\xc3\xa9"}) t.push_back(extra);
  const Vocabulary vocab(std::move(t), {}, {});
  const Grammar g = pse::parse_gbnf(
      "root ::= (decl | call)+\n"
      "decl ::= type ([a-zA-Z_] [a-zA-Z0-9_]* | \"~\" [a-z0-9]*) \";\"\n"
      "call ::= type ([a-zA-Z_] [a-zA-Z0-9_]* | \"~\" [0-9]*) \"(\" \")\" \";\"\n"
      "type ::= (\"int\" | \"char\" | \"float\" | \"double\" | \"long\" | \"short\" | \"signed\") \" \"+\n");
  EXPECT_GT(check_walks(g, vocab, "every caller"), 0u);
}

std::uint32_t root_start(const Automaton& a) { return a.rule_start[a.root]; }

// A chain table needs caller return states, all in one rule.
TEST(StackDfa, ChainTableRejectsCallersOfDifferentRules) {
  const auto vocab = vocabulary_with_runs();
  // Recursive rules (small ones that are not are inlined into their callers).
  const Grammar g = pse::parse_gbnf("root ::= \"[\" x \"]\" y\nx ::= \"a\" x | \"b\"\ny ::= \"c\" y | \"d\" x \"e\"\n");
  const Automaton a = build_automaton(g, AutomatonLimits{});
  std::vector<std::uint32_t> returns;  // a return state in each of two rules
  for (std::uint32_t s = 0; s < a.n_states(); ++s)
    for (std::uint32_t e = a.call_begin[s]; e < a.call_begin[s + 1]; ++e)
      if (returns.empty() || a.state_rule[returns[0]] != a.state_rule[a.call_edges[e].target])
        if (returns.size() < 2) returns.push_back(a.call_edges[e].target);
  ASSERT_EQ(returns.size(), 2u);
  const TokenTable t = build_token_table(a, *vocab, a.rule_start[a.root], nullptr);
  EXPECT_THROW(build_chain_table(a, *vocab, t.view(), returns), std::logic_error);
  EXPECT_THROW(build_chain_table(a, *vocab, t.view(), std::span<const std::uint32_t>{}), std::logic_error);
}

TEST(StackDfa, LeftRecursionOverflows) {
  const Automaton a = build_automaton(pse::testing::left_recursive_grammar(), AutomatonLimits{});
  StackDfa dfa(a);
  const std::uint32_t s = root_start(a);
  EXPECT_THROW(dfa.start({&s, 1}), StackDfa::Overflow);
}

TEST(StackDfa, DeepNestingStaysExactWithinBounds) {
  // p ::= "(" p ")" | "x": 100 open parentheses nest 100 calls.
  pse::testing::G g;
  const pse::RuleId p = g.rule("root");
  g.define(p, g.alt({g.seq({g.lit("("), g.ref(p), g.lit(")")}), g.lit("x")}));
  const Automaton a = build_automaton(g.done(p), AutomatonLimits{});
  StackDfa dfa(a);
  DfaCursor cursor(&dfa);
  const std::uint32_t s = root_start(a);
  cursor.reset_detached({&s, 1});
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(cursor.push('(')) << i;
  EXPECT_FALSE(cursor.push(')'));
  ASSERT_TRUE(cursor.push('x'));
  for (int i = 0; i < 99; ++i) {
    ASSERT_TRUE(cursor.push(')')) << i;
    EXPECT_FALSE(cursor.last_has_any_final_at_origin0()) << i;
  }
  ASSERT_TRUE(cursor.push(')'));
  EXPECT_TRUE(cursor.last_has_any_final_at_origin0());
  EXPECT_FALSE(cursor.push(')'));
}

TEST(StackDfa, StepsAreMemoized) {
  const Automaton a = build_automaton(pse::testing::arithmetic_grammar(), AutomatonLimits{});
  StackDfa dfa(a);
  const std::uint32_t s = root_start(a);
  const std::int32_t c0 = dfa.start({&s, 1});
  EXPECT_EQ(dfa.start({&s, 1}), c0);
  const std::int32_t c1 = dfa.step(c0, '1');
  ASSERT_NE(c1, StackDfa::kDead);
  const std::size_t n = dfa.n_configs();
  EXPECT_EQ(dfa.step(c0, '1'), c1);
  EXPECT_EQ(dfa.step(c1, '2'), c1);  // digits loop in the same configuration
  EXPECT_EQ(dfa.n_configs(), n);
  EXPECT_EQ(dfa.step(c0, '*'), StackDfa::kDead);
  EXPECT_TRUE(dfa.outer_final(c1));  // "1" is a whole expression
  EXPECT_FALSE(dfa.outer_final(c0));
  const ByteSet first = dfa.first_bytes(c0);
  EXPECT_TRUE(byte_set_has(first, '('));
  EXPECT_TRUE(byte_set_has(first, '7'));
  EXPECT_FALSE(byte_set_has(first, '+'));
}

// ascii_loops (which rejects most bytes without computing their step) against every ASCII step computed:
// on the configurations met from the start (breadth first), with states as they are and with class
// representatives, over the shared grammars and a regex with bounded runs.
TEST(StackDfa, AsciiLoopsAreTheBytesWhoseStepLeadsBack) {
  ORCHARD_REQUIRE_SHARED_DATA("grammars/c.gbnf");
  std::vector<std::pair<std::string, Grammar>> grammars;
  for (const char* name : {"json", "arithmetic", "c", "list", "chess"}) {
    grammars.emplace_back(name, pse::parse_gbnf(read_file(
                                    orchard::testing::shared_data(std::string("grammars/") + name + ".gbnf"))));
  }
  grammars.emplace_back("regex", pse::parse_regex(R"([a-z0-9._]{1,12}@([a-z]{1,9}\.){1,3}(com|org) *x*)"));
  std::size_t n_loops = 0;
  for (const auto& [name, g] : grammars) {
    const Automaton a = build_automaton(g, AutomatonLimits{});
    std::vector<std::uint32_t> canonical(a.n_states());
    const std::vector<std::uint32_t> classes = future_classes(a, 16);
    std::vector<std::uint32_t> representative(a.n_states(), UINT32_MAX);
    for (std::uint32_t s = 0; s < a.n_states(); ++s) {
      if (representative[classes[s]] == UINT32_MAX) representative[classes[s]] = s;
      canonical[s] = representative[classes[s]];
    }
    for (const bool use_classes : {false, true}) {
      StackDfa dfa(a);
      if (use_classes) dfa.set_canonical_states(&canonical);
      const std::uint32_t s = root_start(a);
      std::vector<std::int32_t> queue{dfa.start({&s, 1})};
      for (std::size_t i = 0; i < queue.size() && i < 300; ++i) {
        const std::int32_t c = queue[i];
        const std::array<std::uint64_t, 2> loops = dfa.ascii_loops(c);  // before any step of c
        std::array<std::uint64_t, 2> stepped{};
        for (unsigned b = 1; b < 0x80; ++b) {
          const std::int32_t t = dfa.step(c, static_cast<std::uint8_t>(b));
          if (t == c) stepped[b >> 6] |= std::uint64_t{1} << (b & 63);
          if (t != StackDfa::kDead && std::find(queue.begin(), queue.end(), t) == queue.end()) queue.push_back(t);
        }
        EXPECT_EQ(loops, stepped) << name << " configuration " << c << (use_classes ? " (classes)" : "");
        n_loops += static_cast<std::size_t>(std::popcount(stepped[0]) + std::popcount(stepped[1]));
      }
    }
  }
  EXPECT_GT(n_loops, 100u) << "too few loops met for the check to mean much";
}

// A bounded run's length from each position along it (capped at kMaxAsciiRun), whichever position is
// asked first: a chain cut by the bound must not leave shorter runs behind for the positions after
// the first (the table of a state part-way along would then walk the tokens a run accepts at once).
TEST(StackDfa, AsciiRunsAlongABoundedRepetitionDoNotDependOnOrder) {
  const Automaton a = build_automaton(pse::parse_regex("[a-z0-9]{1,64}@x"), AutomatonLimits{});
  for (const bool ascending : {true, false}) {
    StackDfa dfa(a);
    const std::uint32_t s = root_start(a);
    std::vector<std::int32_t> at{dfa.start({&s, 1})};  // at[k]: after k characters
    for (int k = 1; k <= 64; ++k) at.push_back(dfa.step(at.back(), 'a'));
    ASSERT_NE(at.back(), StackDfa::kDead);
    for (int i = 0; i <= 64; ++i) {
      const int k = ascending ? i : 64 - i;
      const StackDfa::AsciiRun run = dfa.ascii_run(at[static_cast<std::size_t>(k)]);
      const auto expected = static_cast<std::uint32_t>(std::min<int>(k == 0 ? 64 : 64 - k, StackDfa::kMaxAsciiRun));
      EXPECT_EQ(run.length, expected) << "after " << k << " characters, " << (ascending ? "ascending" : "descending");
    }
  }
}

// The last positions of a bounded run reject the set's longer members without walking them when the
// run ends closed (no end of the rule on the way, nothing of the set after it), and walk them when the
// rule may end part-way (a word of at most 30 letters, followed by another word: the rest after an end
// is read by the caller). Every table equals the chart's; twice over, so that the set's index is built.
TEST(StackDfa, LongerMembersOfABoundedRunAreRejectedOnlyWhenItEndsClosed) {
  // (85 tokens start with each letter: groups large enough to be recorded)
  std::vector<std::string> tokens = pse::testing::every_string("abcd", 4);
  for (std::size_t n = 5; n <= 34; n += 3) tokens.push_back(std::string(n, 'a'));
  for (const char* t : {"@", "a@", "ab@", "aaaaa@", " ", "a b"}) tokens.emplace_back(t);
  const Vocabulary vocab(std::move(tokens), {}, {});
  std::array<std::uint64_t, 2> lower{};
  for (unsigned c = 'a'; c <= 'z'; ++c) lower[c >> 6] |= std::uint64_t{1} << (c & 63);
  for (const auto& [name, g] : std::vector<std::pair<std::string, Grammar>>{
           {"closed", pse::parse_regex("[a-z]{1,30}@")},
           {"words", pse::parse_gbnf("root ::= word+\nword ::= [a-z]{1,30}\n")}}) {
    const Automaton a = build_automaton(g, AutomatonLimits{});
    StackDfa shared(a);
    for (int round = 0; round < 2; ++round) {
      for (std::uint32_t s = 0; s < a.n_states(); ++s) {
        if (!a.reachable[s] || !a.has_bytes(s)) continue;
        expect_same(build_token_table(a, vocab, s, nullptr, &shared),
                    build_token_table(a, vocab, s, nullptr, nullptr, Walker::kEarley),
                    name + ": state " + std::to_string(s) + " round " + std::to_string(round));
      }
    }
    EXPECT_NE(vocab.index().ascii_set_index(lower, false), nullptr) << name << ": the letters' index was never built";
  }
}

// Group results are recorded while they are found again often enough (StackDfa::keeps_groups), and the
// tables built while nothing is recorded equal the chart's.
TEST(StackDfa, GroupResultsAreKeptWhileFoundAgain) {
  const Automaton a = build_automaton(pse::parse_regex("[a-z0-9._]{1,40}@([a-z]{1,30}\\.){1,3}(com|org)"),
                                      AutomatonLimits{});
  StackDfa dfa(a);
  for (std::int32_t k = 0; k < static_cast<std::int32_t>(StackDfa::kMinGroupRecords); ++k) {
    EXPECT_TRUE(dfa.keeps_groups()) << k;
    dfa.add_group(k, 'a', 0, StackDfa::GroupResult{});
  }
  EXPECT_TRUE(dfa.keeps_groups()) << "records are selective only when asked";
  dfa.set_selective_records(true);
  EXPECT_FALSE(dfa.keeps_groups()) << "none found again";
  for (std::size_t k = 0; k + 1 < StackDfa::kMinGroupRecords / StackDfa::kGroupHitRatio; ++k) {
    ASSERT_NE(dfa.find_group(0, 'a', 0), nullptr);
  }
  EXPECT_FALSE(dfa.keeps_groups()) << "one too few found again";
  ASSERT_NE(dfa.find_group(1, 'a', 0), nullptr);
  EXPECT_TRUE(dfa.keeps_groups());
  EXPECT_EQ(dfa.find_group(0, 'b', 0), nullptr);
  dfa.reset_groups(std::size_t{64} << 20);
  EXPECT_TRUE(dfa.keeps_groups());
  EXPECT_EQ(dfa.find_group(0, 'a', 0), nullptr);
  // Tables of a bounded run's positions, built one after another on one automaton: most of its group
  // results are never found again, so it stops recording part-way; each table equals the chart's. (Every
  // string of 1 to 3 of 9 bytes, and longer runs: first-byte groups large enough to be recorded.)
  std::vector<std::string> tokens = pse::testing::every_string("abcde.1_@", 3);
  for (std::size_t n = 4; n <= 48; n += 4) tokens.push_back(std::string(n, 'a') + "@b.com");
  const Vocabulary vocab(std::move(tokens), {}, {});
  // Twice over: the second time, the groups met while nothing was recorded are walked again (none of
  // them may come back from a result recorded without its tokens).
  StackDfa shared(a);
  shared.set_selective_records(true);
  std::size_t n = 0;
  for (int round = 0; round < 2; ++round) {
    for (std::uint32_t s = 0; s < a.n_states(); ++s) {
      if (!a.reachable[s] || !a.has_bytes(s)) continue;
      const TokenTable earley = build_token_table(a, vocab, s, nullptr, nullptr, Walker::kEarley);
      expect_same(build_token_table(a, vocab, s, nullptr, &shared), earley,
                  "state " + std::to_string(s) + " round " + std::to_string(round));
      ++n;
    }
    // (After the first round only: the second finds the results recorded early, and recording resumes.)
    if (round == 0) {
      EXPECT_FALSE(shared.keeps_groups()) << "the walks kept recording: the check above did not cover that";
    }
  }
  EXPECT_GT(n, 140u);
}

}  // namespace

// Which token classes a configuration reads whole (StackDfa::loops_on): JSON string characters loop on
// all text, printable ASCII only on plain text, a letter class or a bounded run on neither.
TEST(StackDfa, LoopsOnTokenClasses) {
  auto loops = [](std::string_view pattern) {
    const Automaton a = build_automaton(pse::parse_regex(pattern), AutomatonLimits{});
    StackDfa dfa(a);
    const std::uint32_t s = root_start(a);
    const std::int32_t c = dfa.step(dfa.start({&s, 1}), '"');
    EXPECT_NE(c, StackDfa::kDead) << pattern;
    return std::pair{dfa.loops_on(c, VocabularyIndex::TokenClass::kPlain), dfa.loops_on(c, VocabularyIndex::TokenClass::kText)};
  };
  EXPECT_EQ(loops(R"("[^"\\\x00-\x1f]*")"), std::pair(true, true));
  EXPECT_EQ(loops(R"("[ -~]*")"), std::pair(true, false));  // no multi-byte characters
  EXPECT_EQ(loops(R"("[^"\\\x00-\x1f\x7f]*")"), std::pair(true, true));  // DEL is not text
  EXPECT_EQ(loops(R"("[ -}]*")"), std::pair(false, false));  // without '~', a plain byte
  EXPECT_EQ(loops(R"("[^"\\\x00-\x1f\u00e9]*")"), std::pair(true, false));  // all but one of them
  EXPECT_EQ(loops(R"("[a-z]*")"), std::pair(false, false));
  EXPECT_EQ(loops(R"("[^"\\\x00-\x1f]{0,3}")"), std::pair(false, false));  // bounded: no loop
}
