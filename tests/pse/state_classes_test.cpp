// future_classes (pse/src/state_classes.h): states put in one class must have the same token table, since
// the compiler builds one table per class. Checked by building every state's table (Earley walker, the
// reference) and comparing it with its class representative's, on the small grammars and on JSON Schema
// grammars that repeat structure (where classes must actually merge states).
#include "state_classes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "automaton.h"
#include "engine_test_util.h"
#include "pse/error.h"
#include "pse/json_schema.h"
#include "token_table.h"
#include "vocabulary_index.h"

namespace {

using pse::Grammar;
using namespace pse::detail;

// Returns (scanning states, classes among them).
std::pair<std::size_t, std::size_t> check_classes(const Grammar& g, const pse::Vocabulary& vocab, const std::string& name) {
  const Automaton a = build_automaton(g, AutomatonLimits{});
  const std::vector<std::uint32_t> cls = future_classes(a, vocab.index().max_token_length());
  EXPECT_EQ(cls.size(), a.n_states()) << name;
  std::map<std::uint32_t, std::uint32_t> representative;
  std::map<std::uint32_t, TokenTable> tables;
  std::size_t n_scan = 0;
  for (std::uint32_t s = 0; s < a.n_states(); ++s) {
    if (!a.reachable[s] || !a.has_bytes(s)) continue;
    ++n_scan;
    TokenTable t = build_token_table(a, vocab, s, nullptr, nullptr, Walker::kEarley);
    auto [it, fresh] = representative.emplace(cls[s], s);
    if (fresh) {
      tables.emplace(cls[s], std::move(t));
      continue;
    }
    const TokenTable& r = tables.at(cls[s]);
    const std::string where = name + ": state " + std::to_string(s) + " shares the class of " + std::to_string(it->second);
    EXPECT_EQ(a.state_rule[s], a.state_rule[it->second]) << where;
    EXPECT_EQ(t.accepted_bits, r.accepted_bits) << where;
    EXPECT_EQ(t.accepted_list, r.accepted_list) << where;
    EXPECT_EQ(t.uncertain, r.uncertain) << where;
    EXPECT_EQ(t.end_begin, r.end_begin) << where;
    EXPECT_EQ(t.end_depths, r.end_depths) << where;
  }
  return {n_scan, representative.size()};
}

TEST(StateClasses, SameClassSameTableOnSmallGrammars) {
  const auto vocab = pse::testing::small_vocabulary();
  for (const auto& [name, g] : pse::testing::all_small_grammars()) {
    const auto [n_scan, n_classes] = check_classes(g, *vocab, name);
    EXPECT_GT(n_scan, 0u) << name;
    EXPECT_LE(n_classes, n_scan) << name;
  }
}

TEST(StateClasses, RepeatedSchemaStructureSharesTables) {
  const auto vocab = pse::testing::small_vocabulary();
  // Open objects: the key of any other member must differ from each declared name (a trie of names, where
  // every way out of the trie continues with the same string body), and several same-typed values.
  for (const char* schema :
       {R"({"type":"object","properties":{"radius":{"type":"number"},"side":{"type":"number"},"base":{"type":"number"}}})",
        R"({"type":"array","items":{"type":"string","maxLength":6}})",
        R"({"anyOf":[{"type":"string"},{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"additionalProperties":false}]})"}) {
    const Grammar g = pse::json_schema_to_grammar(std::string_view(schema));
    const auto [n_scan, n_classes] = check_classes(g, *vocab, schema);
    EXPECT_LT(n_classes, n_scan) << schema << ": no state shares a table";
  }
}

// A plain Moore refinement written for the test (every round recomputes every state's signature): the
// fast refinement must give exactly its partition after the same number of rounds.
std::vector<std::uint32_t> moore_classes(const Automaton& a, std::size_t rounds) {
  const std::size_t n = a.n_states();
  struct Move {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> reads;  // (byte range or 1<<31|rule, target)
    bool final = false;
  };
  std::vector<Move> moves(n);
  for (std::uint32_t s = 0; s < n; ++s) {
    std::vector<std::uint32_t> work{s};
    std::vector<bool> seen(n);
    seen[s] = true;
    while (!work.empty()) {
      const std::uint32_t t = work.back();
      work.pop_back();
      moves[s].final = moves[s].final || a.is_final(t);
      for (std::uint32_t i = a.byte_begin[t]; i < a.byte_begin[t + 1]; ++i)
        moves[s].reads.emplace_back(std::uint32_t{a.byte_edges[i].lo} << 8 | a.byte_edges[i].hi, a.byte_edges[i].target);
      auto visit = [&](std::uint32_t u) {
        if (!seen[u]) seen[u] = true, work.push_back(u);
      };
      for (std::uint32_t i = a.eps_begin[t]; i < a.eps_begin[t + 1]; ++i) visit(a.eps_edges[i]);
      for (std::uint32_t i = a.call_begin[t]; i < a.call_begin[t + 1]; ++i) {
        moves[s].reads.emplace_back(1u << 31 | a.call_edges[i].rule, a.call_edges[i].target);
        if (a.rule_nullable[a.call_edges[i].rule]) visit(a.call_edges[i].target);
      }
    }
  }
  std::vector<std::uint32_t> cls(n);
  {
    std::map<std::pair<bool, std::uint32_t>, std::uint32_t> ids;
    for (std::uint32_t s = 0; s < n; ++s) cls[s] = ids.emplace(std::make_pair(moves[s].final, a.state_rule[s]), ids.size()).first->second;
  }
  for (std::size_t r = 0; r < rounds; ++r) {
    std::map<std::pair<std::uint32_t, std::vector<std::pair<std::uint32_t, std::uint32_t>>>, std::uint32_t> ids;
    std::vector<std::uint32_t> next(n);
    for (std::uint32_t s = 0; s < n; ++s) {
      std::vector<std::pair<std::uint32_t, std::uint32_t>> sig;
      for (const auto& [what, target] : moves[s].reads) sig.emplace_back(what, cls[target]);
      std::sort(sig.begin(), sig.end());
      sig.erase(std::unique(sig.begin(), sig.end()), sig.end());
      next[s] = ids.emplace(std::make_pair(cls[s], std::move(sig)), ids.size()).first->second;
    }
    if (std::set<std::uint32_t>(next.begin(), next.end()).size() == std::set<std::uint32_t>(cls.begin(), cls.end()).size()) break;
    cls = std::move(next);
  }
  return cls;
}

// Same partition: s ~ t in one exactly when s ~ t in the other (compared through a canonical relabeling).
std::vector<std::uint32_t> canonical(const std::vector<std::uint32_t>& cls) {
  std::map<std::uint32_t, std::uint32_t> first;
  std::vector<std::uint32_t> out(cls.size());
  for (std::size_t s = 0; s < cls.size(); ++s) out[s] = first.emplace(cls[s], static_cast<std::uint32_t>(s)).first->second;
  return out;
}

TEST(StateClasses, PartitionEqualsPlainMooreRefinement) {
  std::vector<std::pair<std::string, Grammar>> grammars = pse::testing::all_small_grammars();
  for (const char* schema :
       {R"({"type":"object","properties":{"radius":{"type":"number"},"side":{"type":"number"}}})",
        R"({"type":"string","pattern":"^[a-z]+(-[a-z]+)*$","maxLength":40})",
        R"({"type":"array","items":{"type":"string","maxLength":30},"maxItems":3})"}) {
    grammars.emplace_back(schema, pse::json_schema_to_grammar(std::string_view(schema)));
  }
  for (const auto& [name, g] : grammars) {
    const Automaton a = build_automaton(g, AutomatonLimits{});
    for (std::size_t rounds : {1, 3, 8, 64}) {
      EXPECT_EQ(canonical(future_classes(a, rounds, a.n_states() + 1)), canonical(moore_classes(a, rounds)))
          << name << " after " << rounds << " rounds";
    }
  }
}

// Classes found rule by rule (the compiler's way with large automata built on first use) are the whole
// automaton's: no class spans two rules, and each rule's refinement reads its own states only.
TEST(StateClasses, RuleByRuleEqualsTheWholeAutomaton) {
  std::vector<std::pair<std::string, Grammar>> grammars = pse::testing::all_small_grammars();
  grammars.emplace_back("object", pse::json_schema_to_grammar(std::string_view(
      R"({"type":"object","properties":{"a":{"type":"string","maxLength":9},)"
      R"("b":{"type":"array","items":{"type":"string","maxLength":5}}}})")));
  for (const auto& [name, g] : grammars) {
    const Automaton a = build_automaton(g, AutomatonLimits{});
    for (std::size_t rounds : {2, 64}) {
      const std::vector<std::uint32_t> whole = future_classes(a, rounds);
      std::size_t n_rules = 0;
      for (std::uint32_t r = 0; r < a.rule_start.size(); ++r) {
        if (a.rule_final[r] >= a.n_states()) continue;  // unproductive
        ++n_rules;
        const std::uint32_t lo = a.rule_start[r], hi = a.rule_final[r] + 1;
        const std::vector<std::uint32_t> part(whole.begin() + lo, whole.begin() + hi);
        EXPECT_EQ(canonical(future_classes(a, lo, hi, rounds)), canonical(part)) << name << ", rule " << r;
      }
      EXPECT_GT(n_rules, 0u) << name;
    }
  }
  // A range that cuts a rule is refused (its edges would leave it).
  const Automaton a = build_automaton(grammars.back().second, AutomatonLimits{});
  const std::uint32_t r = a.state_rule[a.n_states() - 1];
  ASSERT_GT(a.rule_final[r], a.rule_start[r]);
  EXPECT_THROW((void)future_classes(a, a.rule_start[r] + 1, a.rule_final[r] + 1, 8), std::logic_error);
  EXPECT_THROW((void)future_classes(a, a.rule_start[r], a.rule_final[r], 8), std::logic_error);
}

// A graph marked as having distinct states (a minimal DFA's, Expr::distinct_states) keeps each of its
// states in a class of its own, without comparing them: here two of them are in fact equivalent (each
// reads "c" and ends), and the hint keeps them apart. Two copies of the graph drop the marks.
TEST(StateClasses, DistinctGraphStatesKeepTheirOwnClassWhenEmittedOnce) {
  auto states_reading_c = [](bool hint, bool twice, std::vector<std::uint32_t>& classes, std::size_t& n_distinct) {
    pse::testing::G g;
    const pse::RuleId r = g.rule("root");
    const pse::ExprId a = g.cls('a', 'a'), b = g.cls('b', 'b'), c = g.cls('c', 'c');
    const pse::ExprId graph =
        g.g.add_graph(4, {{0, 1, 0}, {0, 2, 1}, {1, 3, 2}, {2, 3, 2}}, {3}, {a, b, c}, /*distinct_states=*/hint);
    g.define(r, twice ? g.seq({graph, g.lit("!"), graph}) : g.seq({graph, g.lit("!")}));
    const Automaton at = build_automaton(g.done(r), AutomatonLimits{});
    const std::vector<std::uint32_t> cls = future_classes(at, 16);
    n_distinct = static_cast<std::size_t>(std::count(at.distinct.begin(), at.distinct.end(), 1));
    classes.clear();
    for (std::uint32_t s = 0; s < at.n_states(); ++s)
      for (std::uint32_t e = at.byte_begin[s]; e < at.byte_begin[s + 1]; ++e)
        if (at.byte_edges[e].lo == 'c') classes.push_back(cls[s]);
  };
  std::vector<std::uint32_t> classes;
  std::size_t n_distinct = 0;
  states_reading_c(/*hint=*/false, /*twice=*/false, classes, n_distinct);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes[0], classes[1]) << "equivalent states share a class";
  EXPECT_EQ(n_distinct, 0u);
  states_reading_c(/*hint=*/true, /*twice=*/false, classes, n_distinct);
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_NE(classes[0], classes[1]) << "states of a distinct graph keep their own class";
  EXPECT_GE(n_distinct, 2u);
  states_reading_c(/*hint=*/true, /*twice=*/true, classes, n_distinct);
  EXPECT_EQ(n_distinct, 0u) << "two copies of a graph: its marks are dropped";
  // The JSON Schema formats are minimal DFAs: a date-time's states are marked.
  const Automaton dt = build_automaton(pse::json_schema_to_grammar(std::string_view(R"({"type":"string","format":"date-time"})")),
                                       AutomatonLimits{});
  EXPECT_GT(std::count(dt.distinct.begin(), dt.distinct.end(), 1), 10'000);
}

TEST(StateClasses, DeadlineIsALimitError) {
  pse::testing::G g;
  const pse::RuleId r = g.rule("root");
  std::vector<pse::ExprId> letters;  // (a counted repetition this long would be written with chunks)
  for (int i = 0; i < 60'000; ++i) letters.push_back(g.cls('a' + i % 26, 'z'));
  g.define(r, g.seq(letters));  // 60,000 states: past the first deadline check
  const Automaton a = build_automaton(g.done(r), AutomatonLimits{});
  const Deadline past{std::chrono::steady_clock::now() - std::chrono::seconds(1)};
  EXPECT_THROW((void)future_classes(a, 16, 256, &past), pse::LimitError);
  EXPECT_EQ(future_classes(a, 16).size(), a.n_states());
}

}  // namespace
