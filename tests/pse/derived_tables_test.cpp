// Token tables derived from the table of a state that reads every short string alike
// (derive_token_table): each equals the table built from scratch, for every state whose class at
// VocabularyIndex::kShortTokenBytes bytes has an earlier member, with both follow filters, on a small
// vocabulary made to tell the states apart only by long tokens and on the Llama 3.1 vocabulary.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "automaton.h"
#include "compiled_grammar_impl.h"
#include "engine_test_util.h"
#include "llama3_vocabulary.h"
#include "pse/compiler.h"
#include "pse/gbnf.h"
#include "pse/regex.h"
#include "shared_data.h"
#include "stack_dfa.h"
#include "state_classes.h"
#include "token_table.h"
#include "token_table_sets.h"
#include "vocabulary_index.h"

namespace {

using pse::Grammar;
using pse::Vocabulary;
using pse::VocabularyIndex;
using namespace pse::detail;

using pse::testing::sets_of;

struct Counts {
  std::size_t derived = 0;  // tables derived and compared
  std::size_t differ = 0;   // of them, those whose table differs from their base's
};

// Every state with a table whose short class has an earlier state with a table: derived from that
// state's table, with each filter, against the table built from scratch.
Counts check_derived(const Grammar& g, const Vocabulary& vocab, const std::string& name) {
  const Automaton a = build_automaton(g, AutomatonLimits{});
  std::vector<std::uint32_t> short_classes;
  future_classes(a, vocab.index().max_token_length(), 256, nullptr, VocabularyIndex::kShortTokenBytes, &short_classes);
  EXPECT_EQ(short_classes.size(), a.n_states()) << name;
  Counts n;
  StackDfa dfa(a);
  std::map<std::uint32_t, std::uint32_t> first_of_class;  // short class -> its first state with a table
  for (std::uint32_t s = 0; s < a.n_states(); ++s) {
    if (!a.reachable[s] || !a.has_bytes(s)) continue;
    const auto [it, inserted] = first_of_class.emplace(short_classes[s], s);
    if (inserted) continue;
    const std::uint32_t b = it->second;
    const std::vector<std::uint32_t> far = long_tokens_read_far(a, vocab, b, nullptr, &dfa);
    for (const FollowFilter filter : {FollowFilter::kFull, FollowFilter::kBytes}) {
      const TokenTable base = build_token_table(a, vocab, b, nullptr, &dfa, Walker::kAuto, filter);
      const TokenTable full = build_token_table(a, vocab, s, nullptr, &dfa, Walker::kAuto, filter);
      const TokenTable derived = derive_token_table(a, vocab, s, base, far, nullptr, &dfa, Walker::kAuto, filter);
      const std::string where = name + ": state " + std::to_string(s) + " from " + std::to_string(b) +
                                (filter == FollowFilter::kFull ? " (full filter)" : " (byte filter)");
      EXPECT_TRUE(sets_of(derived) == sets_of(full)) << where;
      // (Earley's walks agree: the derived table's walks run on the chart too.)
      if (filter == FollowFilter::kFull) {
        const TokenTable on_chart =
            derive_token_table(a, vocab, s, base, far, nullptr, nullptr, Walker::kEarley, filter);
        EXPECT_TRUE(sets_of(on_chart) == sets_of(full)) << where << " on the chart";
        ++n.derived;
        if (!(sets_of(base) == sets_of(full))) ++n.differ;
      }
    }
  }
  return n;
}

// check_derived over several grammars: each must derive some state; returns how many derived tables
// differ from their base (none would mean the long tokens were never exercised).
std::size_t check_all_derived(const std::vector<std::pair<std::string, Grammar>>& grammars, const Vocabulary& vocab) {
  std::size_t differ = 0;
  for (const auto& [name, g] : grammars) {
    const Counts n = check_derived(g, vocab, name);
    EXPECT_GT(n.derived, 0u) << name << ": no state derived";
    differ += n.differ;
  }
  return differ;
}

// Short tokens of a few bytes, and long ones (runs of letters, dashes, spaces, with an ending): the
// positions of a counted repetition read the short ones alike and the long ones each their own way.
std::shared_ptr<const Vocabulary> vocabulary_with_long_tokens() {
  std::vector<std::string> t = pse::testing::every_string("ab-@ ,", 3);
  for (std::size_t n = VocabularyIndex::kShortTokenBytes - 2; n <= 40; n += 3) {
    t.push_back(std::string(n, 'a'));
    t.push_back(std::string(n, 'a') + "@");
    t.push_back(std::string(n, 'a') + ",b");
    t.push_back("b" + std::string(n, 'a'));
    t.push_back(std::string(n, '-'));
    t.push_back(std::string(n, ' ') + "a");
    t.push_back(std::string(n / 2, 'a') + std::string(n - n / 2, 'b'));
  }
  return std::make_shared<const Vocabulary>(std::move(t), std::vector<pse::TokenId>{}, std::vector<pse::TokenId>{});
}

TEST(DerivedTables, EqualFullBuildsOnLongTokens) {
  const auto vocab = vocabulary_with_long_tokens();
  ASSERT_FALSE(vocab->index().long_tokens().empty());
  const std::vector<std::pair<std::string, Grammar>> grammars = {
      {"letters then @", pse::parse_regex("[ab]{1,40}@[ab]{1,30}")},
      {"dashes", pse::parse_regex("-{0,35}[ab]{2,30}")},
      {"spaces", pse::parse_regex("( {0,30}a){1,3}")},
      // Rule ends part-way (uncertain tokens, the follow and every-caller checks): a list of bounded words.
      {"list", pse::parse_gbnf("root ::= item (\",\" item)*\nitem ::= [ab]{1,38} | \"-\"{2,30}\n")},
  };
  EXPECT_GT(check_all_derived(grammars, *vocab), 0u) << "no derived table differs from its base";
}

// Through compile: the tables built ahead (derived where they can be, on one thread and on the pool)
// equal the tables built at first use (never derived), table by table.
TEST(DerivedTables, CompiledTablesEqualThoseBuiltAtFirstUse) {
  const auto vocab = vocabulary_with_long_tokens();
  const Grammar g = pse::parse_gbnf("root ::= item (\",\" item)*\nitem ::= [ab]{1,38} | \"-\"{2,30}\n");
  pse::CompileOptions lazy;
  lazy.tables = pse::TableBuild::kAtFirstUse;
  lazy.shared_tables = false;
  const pse::CompiledGrammar reference = pse::compile_grammar(g, vocab, lazy);
  std::size_t n_derived = 0;
  for (const std::size_t threads : {std::size_t{1}, std::size_t{0}}) {
    for (const bool shared : {false, true}) {
      pse::clear_shared_table_cache();
      pse::CompileOptions eager;
      eager.threads = threads;
      eager.shared_tables = shared;
      const pse::CompiledGrammar cg = pse::compile_grammar(g, vocab, eager);
      ASSERT_TRUE(cg.stats().precomputed);
      const auto& impl = *cg.impl();
      for (std::uint32_t s = 0; s < impl.automaton.n_states(); ++s) {
        if (impl.scan_index[s] == pse::CompiledGrammar::Impl::kNoTable) continue;
        const std::uint32_t i = impl.scan_index[s];
        n_derived += !impl.table_base.empty() && impl.table_base[i] != pse::CompiledGrammar::Impl::kNoTable;
        EXPECT_TRUE(sets_of(impl.tables[i]) == sets_of(reference.impl()->table(s)))
            << "state " << s << " threads " << threads << (shared ? " shared" : "");
      }
    }
  }
  EXPECT_GT(n_derived, 0u) << "no table had a base to derive from";
}

// Both walks stop with a LimitError once the compile's deadline has passed (checked every 1,024 tokens).
TEST(DerivedTables, WalksStopAtTheDeadline) {
  std::vector<std::string> t;
  for (int i = 0; i < 1100; ++i) t.push_back(std::string(20, 'a') + std::to_string(i));
  const Vocabulary vocab(std::move(t), {}, {});
  ASSERT_EQ(vocab.index().long_tokens().size(), 1100u);
  const Automaton a = build_automaton(pse::parse_regex("[a0-9]{1,40}"), AutomatonLimits{});
  std::uint32_t s = 0;
  while (!a.reachable[s] || !a.has_bytes(s)) ++s;
  const Deadline passed{std::chrono::steady_clock::now() - std::chrono::seconds(1)};
  // A cancellation stops them the same way, long before the clock would.
  const std::function<bool()> cancel = [] { return true; };
  const Deadline cancelled{std::chrono::steady_clock::now() + std::chrono::hours(1), &cancel};
  EXPECT_THROW(long_tokens_read_far(a, vocab, s, &passed), pse::LimitError);
  EXPECT_THROW(long_tokens_read_far(a, vocab, s, &cancelled), pse::LimitError);
  const std::vector<std::uint32_t> far = long_tokens_read_far(a, vocab, s, nullptr);
  ASSERT_EQ(far.size(), 1100u) << "every token reads past 16 bytes";
  const TokenTable base = build_token_table(a, vocab, s, nullptr);
  EXPECT_THROW(derive_token_table(a, vocab, s, base, far, &passed), pse::LimitError);
  EXPECT_THROW(derive_token_table(a, vocab, s, base, far, &cancelled), pse::LimitError);
  EXPECT_TRUE(sets_of(derive_token_table(a, vocab, s, base, far, nullptr)) == sets_of(base));
}

TEST(DerivedTables, EqualFullBuildsOnLlama3) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama3/encoder.json");
  const auto vocab =
      pse::testing::load_llama3_vocabulary(orchard::testing::shared_data("tokenizers/llama3/encoder.json"));
  const std::vector<std::pair<std::string, Grammar>> grammars = {
      {"email", pse::parse_regex("[a-z0-9._]{1,64}@([a-z]{1,63}\\.){1,2}(com|org)")},
      {"indent", pse::parse_gbnf("root ::= (line \"\\n\")+\nline ::= [ ]{0,48} [a-z]{1,20} | \"-\"{3,40}\n")},
  };
  EXPECT_GT(check_all_derived(grammars, *vocab), 0u) << "no derived table differs from its base";
  // And through compile, on the pool: every table as built at first use.
  pse::CompileOptions lazy;
  lazy.tables = pse::TableBuild::kAtFirstUse;
  lazy.shared_tables = false;
  pse::CompileOptions eager;
  eager.shared_tables = false;
  const pse::CompiledGrammar built_ahead = pse::compile_grammar(grammars[0].second, vocab, eager);
  const pse::CompiledGrammar at_first_use = pse::compile_grammar(grammars[0].second, vocab, lazy);
  const auto& impl = *built_ahead.impl();
  for (std::uint32_t s = 0; s < impl.automaton.n_states(); ++s) {
    if (impl.scan_index[s] == pse::CompiledGrammar::Impl::kNoTable) continue;
    EXPECT_TRUE(sets_of(impl.tables[impl.scan_index[s]]) == sets_of(at_first_use.impl()->table(s))) << "state " << s;
  }
}

}  // namespace
