// The fast mask (token tables + run-time checks of uncertain tokens) equals the brute-force mask (try
// every token on a fork), and both agree with the independent reference recognizer. Quick sizes
// here (unit, run under the sanitizers too); brute_force_conformance.cpp runs thousands of states.
#include <gtest/gtest.h>

#include "engine_test_util.h"
#include "pse/gbnf.h"
#include "reference_recognizer.h"
#include "vocabulary_index.h"

namespace pse::testing {
namespace {

class BruteForce : public ::testing::TestWithParam<int> {};

TEST_P(BruteForce, FastMaskEqualsBruteForceOnRandomStates) {
  auto [name, grammar] = all_small_grammars().at(GetParam());
  auto vocab = small_vocabulary();
  for (const TableBuild build : {TableBuild::kInCompile, TableBuild::kInBackground, TableBuild::kAtFirstUse}) {
    CompileOptions options;
    options.tables = build;
    CompiledGrammar cg = compile_grammar(grammar, vocab, options);
    std::size_t n = 0;
    random_walk(cg, 80, 7 + GetParam(), [&](Matcher& m, const std::string& text) {
      ASSERT_EQ(fast_mask(m), brute_force_mask(m)) << name << " after \"" << text << "\"";
      ++n;
    });
    EXPECT_EQ(n, 80u);
  }
}

TEST_P(BruteForce, MaskAgreesWithReferenceRecognizer) {
  auto [name, grammar] = all_small_grammars().at(GetParam());
  TokenId eos = 0;
  auto vocab = small_vocabulary(&eos);
  CompiledGrammar cg = compile_grammar(grammar, vocab);
  random_walk(cg, 4, 100 + GetParam(), [&](Matcher& m, const std::string& text) {
    std::vector<std::uint32_t> mask = fast_mask(m);
    for (std::size_t id = 0; id < vocab->n_rows(); ++id) {
      const bool allowed = (mask[id >> 5] >> (id & 31)) & 1;
      const TokenId t = static_cast<TokenId>(id);
      bool expected;
      if (t == eos) {
        expected = accepts(grammar, text);
      } else if (vocab->is_special(t) || id >= vocab->n_tokens() || vocab->token_bytes(t).empty()) {
        expected = false;
      } else {
        expected = is_viable_prefix(grammar, text + vocab->token_bytes(t));
      }
      ASSERT_EQ(allowed, expected) << name << " after \"" << text << "\" token " << id << " \""
                                   << vocab->token_bytes(t) << "\"";
    }
    ASSERT_EQ(m.can_stop(), accepts(grammar, text)) << name << " after \"" << text << "\"";
  });
}

INSTANTIATE_TEST_SUITE_P(SmallGrammars, BruteForce, ::testing::Range(0, 6));

// First-byte groups large enough to be taken whole less the ids a table rejects: as a mask
// (VocabularyIndex::kMinMaskedGroup) or as sparse mask words (VocabularyIndex::kMinWordGroup). Words after spaces,
// some with a letter the grammar never reads ('t') or ending in a comma it reads only after a word; their
// ids interleaved with those of words without the space (other groups share their mask words).
std::shared_ptr<const Vocabulary> space_group_vocabulary(char last_z, TokenId* eos) {
  std::vector<std::string> t;
  for (int b = 0; b < 128; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  for (char x = 'a'; x <= 't'; ++x)
    for (char y = 'a'; y <= 't'; ++y) {
      t.push_back(std::string{' ', x, y});
      t.push_back(std::string{x, y});
      for (char z = 'a'; z <= last_z; ++z) t.push_back(std::string{' ', x, y, z});
    }
  for (const char* s : {" ,", " (", " x,", ", ", "ab,"}) t.emplace_back(s);
  *eos = static_cast<TokenId>(t.size());
  t.push_back("<eos>");
  return std::make_shared<const Vocabulary>(std::move(t), std::vector<TokenId>{*eos}, std::vector<TokenId>{*eos});
}

TEST(BruteForceLargeGroup, FastMaskEqualsBruteForce) {
  for (const char last_z : {'t', 'e'}) {  // 8,400 tokens after a space (a mask), then 2,400 (sparse words)
    TokenId eos;
    const auto vocab = space_group_vocabulary(last_z, &eos);
    const auto space = static_cast<std::uint8_t>(' ');
    ASSERT_EQ(vocab->index().first_byte_mask(space).empty(), last_z != 't') << last_z;
    ASSERT_FALSE(vocab->index().group_words(space).empty()) << last_z;
    const Grammar g = parse_gbnf("root ::= \"x\" (\" \" [a-s]+ \",\"?)*\n");
    for (const TableBuild build : {TableBuild::kInCompile, TableBuild::kInBackground, TableBuild::kAtFirstUse}) {
      CompileOptions options;
      options.tables = build;
      CompiledGrammar cg = compile_grammar(g, vocab, options);
      std::size_t n = 0;
      random_walk(cg, 30, 5, [&](Matcher& m, const std::string& text) {
        ASSERT_EQ(fast_mask(m), brute_force_mask(m)) << "after \"" << text << "\", last letter " << last_z;
        ++n;
      });
      EXPECT_EQ(n, 30u);
    }
  }
}

}  // namespace
}  // namespace pse::testing
