// future_classes (pse/src/state_classes.h): states put in one class must have the same token table, since
// the compiler builds one table per class. Checked by building every state's table (Earley walker, the
// reference) and comparing it with its class representative's, on the small grammars and on JSON Schema
// grammars that repeat structure (where classes must actually merge states).
#include "state_classes.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "automaton.h"
#include "engine_test_util.h"
#include "pse/error.h"
#include "pse/json_schema.h"
#include "token_table.h"

namespace {

using pse::Grammar;
using namespace pse::detail;

// Returns (scanning states, classes among them).
std::pair<std::size_t, std::size_t> check_classes(const Grammar& g, const pse::Vocabulary& vocab, const std::string& name) {
  const Automaton a = build_automaton(g, AutomatonLimits{});
  const std::vector<std::uint32_t> cls = future_classes(a, vocab.max_token_length());
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

TEST(StateClasses, DeadlineIsALimitError) {
  pse::testing::G g;
  const pse::RuleId r = g.rule("root");
  g.define(r, g.rep(g.cls('a', 'z'), 1, 20'000));  // 60,000 states: past the first deadline check
  const Automaton a = build_automaton(g.done(r), AutomatonLimits{});
  const auto past = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  EXPECT_THROW((void)future_classes(a, 16, 256, &past), pse::LimitError);
  EXPECT_EQ(future_classes(a, 16).size(), a.n_states());
}

}  // namespace
