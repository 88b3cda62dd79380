// Token tables built on background threads after compile() returns (TableBuild::kInBackground): the same
// tables as built in compile, masks exact while they are being built (from several threads at once),
// grammars dropped part-way, and the time, memory and size bounds, which leave the rest to first use.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "compiled_grammar_impl.h"
#include "engine_test_util.h"
#include "llama3_vocabulary.h"
#include "pse/compiler.h"
#include "pse/gbnf.h"
#include "pse/matcher.h"
#include "shared_data.h"
#include "token_table_sets.h"

namespace pse::testing {
namespace {

CompileOptions with(TableBuild build, std::size_t threads = 0) {
  CompileOptions o;
  o.tables = build;
  o.threads = threads;
  o.shared_tables = false;
  return o;
}

// Every table of `cg`, as built in the background (read without building), equals the table of the same
// state in `first_use` (built there now, never derived).
void expect_built_tables(const CompiledGrammar& cg, const CompiledGrammar& first_use, const std::string& what) {
  const auto& impl = *cg.impl();
  for (std::uint32_t s = 0; s < impl.automaton.n_states(); ++s) {
    if (impl.scan_index[s] == CompiledGrammar::Impl::kNoTable) continue;
    EXPECT_TRUE(sets_of(impl.tables[impl.scan_index[s]]) == sets_of(first_use.impl()->table(s)))
        << what << ": state " << s;
  }
}

// A grammar of ../shared/data/grammars (present: the test requires it first).
Grammar shared_gbnf(const std::string& name) {
  std::ifstream in(orchard::testing::shared_data("grammars/" + name));
  std::stringstream text;
  text << in.rdbuf();
  return parse_gbnf(text.str());
}

std::shared_ptr<const Vocabulary> llama3() {
  return load_llama3_vocabulary(orchard::testing::shared_data("tokenizers/llama3/encoder.json"));
}

TEST(BackgroundTables, SameTablesAsBuiltInCompile) {
  const auto vocab = small_vocabulary();
  for (const auto& [name, grammar] : all_small_grammars()) {
    const CompiledGrammar reference = compile_grammar(grammar, vocab, with(TableBuild::kInCompile, 1));
    const CompiledGrammar first_use = compile_grammar(grammar, vocab, with(TableBuild::kAtFirstUse));
    ASSERT_TRUE(reference.stats().precomputed) << name;
    for (const std::size_t threads : {std::size_t{1}, std::size_t{0}}) {
      const CompiledGrammar cg = compile_grammar(grammar, vocab, with(TableBuild::kInBackground, threads));
      const CompileStats st = cg.wait_for_tables();
      EXPECT_TRUE(st.precomputed) << name;
      EXPECT_EQ(st.n_tables, reference.stats().n_tables) << name;
      EXPECT_EQ(st.n_uncertain, reference.stats().n_uncertain) << name;
      EXPECT_EQ(st.memory_bytes, reference.stats().memory_bytes) << name;
      expect_built_tables(cg, first_use, name);
    }
  }
}

// Grammars compiled in compile or at first use have no background build: the stats at once.
TEST(BackgroundTables, WaitingWithoutABackgroundBuildReturnsAtOnce) {
  const auto vocab = small_vocabulary();
  const CompiledGrammar eager = compile_grammar(json_like_grammar(), vocab, with(TableBuild::kInCompile));
  EXPECT_TRUE(eager.wait_for_tables().precomputed);
  const CompiledGrammar lazy = compile_grammar(json_like_grammar(), vocab, with(TableBuild::kAtFirstUse));
  EXPECT_FALSE(lazy.wait_for_tables().precomputed);
  EXPECT_EQ(lazy.impl()->background, nullptr);
}

// Masks filled from four threads while the Llama 3.1 tables of json.gbnf are built behind them equal the
// masks of the grammar whose tables were built in compile, state by state.
TEST(BackgroundTables, MasksWhileTheTablesAreBuiltAreExact) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama3/encoder.json");
  ORCHARD_REQUIRE_SHARED_DATA("grammars/json.gbnf");
  const auto vocab = llama3();
  const Grammar g = shared_gbnf("json.gbnf");
  const CompiledGrammar reference = compile_grammar(g, vocab, with(TableBuild::kInCompile));
  const CompiledGrammar first_use = compile_grammar(g, vocab, with(TableBuild::kAtFirstUse));
  std::vector<std::string> texts;
  std::vector<std::vector<std::uint32_t>> masks;
  random_walk(reference, 120, 3, [&](Matcher& m, const std::string& text) {
    texts.push_back(text);
    masks.push_back(fast_mask(m));
  });
  for (int round = 0; round < 3; ++round) {
    const CompiledGrammar cg = compile_grammar(g, vocab, with(TableBuild::kInBackground));
    std::vector<std::thread> threads;
    std::vector<std::size_t> wrong(4, 0);
    for (std::size_t t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (std::size_t k = t; k < texts.size(); k += 4) {
          Matcher m(cg);
          if (!m.accept_bytes(texts[k]) || fast_mask(m) != masks[k]) ++wrong[t];
        }
      });
    }
    for (std::thread& th : threads) th.join();
    for (std::size_t t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0u) << "thread " << t << ", round " << round;
    EXPECT_TRUE(cg.wait_for_tables().precomputed);
    expect_built_tables(cg, first_use, "json.gbnf");
  }
}

// Grammars dropped while their tables are built are left (the threads hold a grammar only for a chunk);
// a grammar compiled after them is still built to the end. (Under ASan, a thread that used a dropped
// grammar fails here.)
TEST(BackgroundTables, GrammarsDroppedWhileBuildingAreLeft) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama3/encoder.json");
  ORCHARD_REQUIRE_SHARED_DATA("grammars/c.gbnf");
  const auto vocab = llama3();
  const Grammar g = shared_gbnf("c.gbnf");
  for (int i = 0; i < 6; ++i) {
    const CompiledGrammar dropped = compile_grammar(g, vocab, with(TableBuild::kInBackground));
    Matcher m(dropped);
    (void)fast_mask(m);  // (a first mask may meet a table being built)
  }
  const CompiledGrammar kept = compile_grammar(g, vocab, with(TableBuild::kInBackground));
  const CompileStats st = kept.wait_for_tables();
  EXPECT_TRUE(st.precomputed);
  EXPECT_EQ(st.n_tables, compile_grammar(g, vocab, with(TableBuild::kInCompile)).stats().n_tables);
}

// Past the time bound (eager_table_ms) or the memory bound, the background build stops without an error
// (compile() has returned): the tables not built are built at first use, and the masks stay exact.
TEST(BackgroundTables, BoundsStopTheBuildAndLeaveTheRestToFirstUse) {
  const auto vocab = small_vocabulary();
  CompileOptions no_time = with(TableBuild::kInBackground);
  no_time.eager_table_ms = 0;
  const CompiledGrammar timed_out = compile_grammar(json_like_grammar(), vocab, no_time);
  EXPECT_FALSE(timed_out.wait_for_tables().precomputed);
  expect_masks_are_brute_force(timed_out, 60, 5);

  // Room for the automaton, not for the tables: compile throws when it builds them, not in the background.
  const std::size_t automaton_bytes =
      compile_grammar(json_like_grammar(), vocab, with(TableBuild::kAtFirstUse)).stats().memory_bytes;
  CompileOptions tight = with(TableBuild::kInCompile);
  tight.max_memory_bytes = automaton_bytes + 1;
  EXPECT_THROW(compile_grammar(json_like_grammar(), vocab, tight), LimitError);
  tight.tables = TableBuild::kInBackground;
  const CompiledGrammar over_memory = compile_grammar(json_like_grammar(), vocab, tight);
  const CompileStats st = over_memory.wait_for_tables();
  EXPECT_FALSE(st.precomputed);
  EXPECT_GT(st.memory_bytes, tight.max_memory_bytes);
  expect_masks_are_brute_force(over_memory, 60, 6);
}

// Above 8,192 states, finding the classes would hold up the first mask: such a grammar builds its tables
// at first use, as with TableBuild::kAtFirstUse (classes rule by rule, a table slot per state).
TEST(BackgroundTables, LargeAutomataBuildAtFirstUse) {
  const auto vocab = small_vocabulary();
  G builder;
  const RuleId root = builder.rule("root");
  std::vector<ExprId> letters(9000, builder.cls('a', 'c'));  // (a sequence: a state per letter)
  builder.define(root, builder.seq(letters));
  const Grammar g = builder.done(root);
  const CompiledGrammar cg = compile_grammar(g, vocab, with(TableBuild::kInBackground));
  ASSERT_GT(cg.stats().n_states, 8192u);
  EXPECT_EQ(cg.impl()->background, nullptr);
  EXPECT_TRUE(cg.impl()->classes_by_rule);
  EXPECT_EQ(cg.stats().n_tables, compile_grammar(g, vocab, with(TableBuild::kAtFirstUse)).stats().n_tables);
  EXPECT_FALSE(cg.wait_for_tables().precomputed);
  expect_masks_are_brute_force(cg, 40, 7);
}

}  // namespace
}  // namespace pse::testing
