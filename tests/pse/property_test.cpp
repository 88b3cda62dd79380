// Property tests of the engine: sampled completions validate; rollback then re-accept gives the same
// masks; forks are independent; masks are identical on 1 and many threads.
#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"
#include "reference_recognizer.h"

namespace pse::testing {
namespace {

class Property : public ::testing::TestWithParam<int> {};

// Sampling through the matcher until it may stop (taking eos when allowed, at random) always yields a
// sentence of the grammar, checked by the reference recognizer; every prefix is viable.
TEST_P(Property, SampledCompletionsAreValid) {
  auto [name, grammar] = all_small_grammars().at(GetParam());
  TokenId eos = 0;
  auto vocab = small_vocabulary(&eos);
  CompiledGrammar cg = compile_grammar(grammar, vocab);
  std::mt19937 rng(31 + GetParam());
  int finished = 0;
  for (int run = 0; run < 15; ++run) {
    Matcher m(cg);
    std::string text;
    for (int step = 0; step < 200; ++step) {
      std::vector<std::uint32_t> mask = fast_mask(m);
      std::vector<TokenId> allowed;
      for (std::size_t id = 0; id < vocab->n_rows(); ++id)
        if ((mask[id >> 5] >> (id & 31)) & 1) allowed.push_back(static_cast<TokenId>(id));
      ASSERT_FALSE(allowed.empty()) << name << ": dead end after \"" << text << "\"";
      TokenId t = allowed[rng() % allowed.size()];
      const bool eos_allowed = (mask[eos >> 5] >> (eos & 31)) & 1;
      if (eos_allowed && (step > 30 || rng() % 4 == 0)) t = eos;
      ASSERT_TRUE(m.accept_token(t));
      if (t == eos) {
        ASSERT_TRUE(accepts(grammar, text)) << name << ": \"" << text << "\"";
        ++finished;
        break;
      }
      text += vocab->token_bytes(t);
      ASSERT_TRUE(is_viable_prefix(grammar, text)) << name << ": \"" << text << "\"";
    }
  }
  EXPECT_GT(finished, 0) << name;
}

TEST_P(Property, RollbackThenReacceptGivesSameMasks) {
  auto [name, grammar] = all_small_grammars().at(GetParam());
  auto vocab = small_vocabulary();
  CompiledGrammar cg = compile_grammar(grammar, vocab);
  std::mt19937 rng(5 + GetParam());
  random_walk(cg, 150, 11 + GetParam(), [&](Matcher& m, const std::string&) {
    // Take up to 4 random allowed tokens, recording masks, roll back, re-accept, compare.
    Matcher probe = m.fork();
    std::vector<TokenId> taken;
    std::vector<std::vector<std::uint32_t>> masks{fast_mask(probe)};
    for (int i = 0; i < 4; ++i) {
      std::vector<TokenId> allowed;
      const std::vector<std::uint32_t>& mask = masks.back();
      for (std::size_t id = 0; id < vocab->n_tokens(); ++id)
        if (((mask[id >> 5] >> (id & 31)) & 1) && !vocab->is_special(static_cast<TokenId>(id)))
          allowed.push_back(static_cast<TokenId>(id));
      if (allowed.empty()) break;
      taken.push_back(allowed[rng() % allowed.size()]);
      ASSERT_TRUE(probe.accept_token(taken.back()));
      masks.push_back(fast_mask(probe));
    }
    probe.rollback(taken.size());
    ASSERT_EQ(fast_mask(probe), masks[0]);
    for (std::size_t i = 0; i < taken.size(); ++i) {
      ASSERT_TRUE(probe.accept_token(taken[i]));
      ASSERT_EQ(fast_mask(probe), masks[i + 1]);
    }
  });
}

TEST_P(Property, ForksAreIndependent) {
  auto [name, grammar] = all_small_grammars().at(GetParam());
  auto vocab = small_vocabulary();
  CompiledGrammar cg = compile_grammar(grammar, vocab);
  random_walk(cg, 100, 23 + GetParam(), [&](Matcher& m, const std::string&) {
    const std::vector<std::uint32_t> before = fast_mask(m);
    const std::size_t steps = m.n_steps();
    Matcher f = m.fork();
    for (std::size_t id = 0; id < vocab->n_tokens(); ++id) {
      if (f.accept_token(static_cast<TokenId>(id))) break;
    }
    fast_mask(f);
    ASSERT_EQ(m.n_steps(), steps);
    ASSERT_EQ(fast_mask(m), before);
    Matcher g = m.fork();
    ASSERT_EQ(fast_mask(g), before);
  });
}

TEST_P(Property, SameMasksOnOneAndManyThreads) {
  auto [name, grammar] = all_small_grammars().at(GetParam());
  auto vocab = small_vocabulary();
  CompileOptions lazy;
  lazy.tables = TableBuild::kAtFirstUse;  // tables built concurrently on first use
  CompiledGrammar cg = compile_grammar(grammar, vocab, lazy);
  std::vector<Matcher> states;
  random_walk(cg, 64, 41 + GetParam(), [&](Matcher& m, const std::string&) { states.push_back(m.fork()); });
  std::vector<Matcher*> ptrs;
  for (Matcher& m : states) ptrs.push_back(&m);
  const std::size_t w = states[0].mask_words();
  std::vector<std::uint32_t> many(ptrs.size() * w), one(ptrs.size() * w);
  ThreadPool pool(4);
  fill_next_token_bitmasks(ptrs, many, &pool);
  fill_next_token_bitmasks(ptrs, one, nullptr);
  EXPECT_EQ(many, one);
}

INSTANTIATE_TEST_SUITE_P(SmallGrammars, Property, ::testing::Range(0, 6));

}  // namespace
}  // namespace pse::testing
