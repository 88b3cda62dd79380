// Heavier engine checks (label conformance): thousands of random states per small grammar, and the
// real Llama 3.1 vocabulary (128,256 tokens) with llama.cpp's json.gbnf along a valid document.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "engine_test_util.h"
#include "llama3_vocabulary.h"
#include "pse/gbnf.h"
#include "reference_recognizer.h"
#include "shared_data.h"
#include "vocabulary_index.h"

namespace pse::testing {
namespace {

using ::orchard::testing::shared_data;

class BruteForceHeavy : public ::testing::TestWithParam<int> {};

TEST_P(BruteForceHeavy, ThousandsOfRandomStates) {
  auto [name, grammar] = all_small_grammars().at(GetParam());
  auto vocab = small_vocabulary();
  for (const TableBuild build : {TableBuild::kInCompile, TableBuild::kInBackground, TableBuild::kAtFirstUse}) {
    CompileOptions options;
    options.tables = build;
    CompiledGrammar cg = compile_grammar(grammar, vocab, options);
    random_walk(cg, 2000, 1000 + GetParam(), [&](Matcher& m, const std::string& text) {
      ASSERT_EQ(fast_mask(m), brute_force_mask(m)) << name << " after \"" << text << "\"";
    });
  }
}

TEST_P(BruteForceHeavy, ReferenceRecognizerOnManyStates) {
  auto [name, grammar] = all_small_grammars().at(GetParam());
  TokenId eos = 0;
  auto vocab = small_vocabulary(&eos);
  CompiledGrammar cg = compile_grammar(grammar, vocab);
  random_walk(cg, 60, 2000 + GetParam(), [&](Matcher& m, const std::string& text) {
    std::vector<std::uint32_t> mask = fast_mask(m);
    for (std::size_t id = 0; id < vocab->n_tokens(); ++id) {
      const TokenId t = static_cast<TokenId>(id);
      if (vocab->is_special(t) || vocab->token_bytes(t).empty()) continue;
      ASSERT_EQ(static_cast<bool>((mask[id >> 5] >> (id & 31)) & 1),
                is_viable_prefix(grammar, text + vocab->token_bytes(t)))
          << name << " after \"" << text << "\" token \"" << vocab->token_bytes(t) << "\"";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(SmallGrammars, BruteForceHeavy, ::testing::Range(0, 6));

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Greedy longest-match tokens of `text` through the matcher (a valid, if not canonical, tokenization).
std::vector<TokenId> greedy_tokens(const CompiledGrammar& cg, const std::string& text) {
  const Vocabulary& v = cg.vocabulary();
  Matcher m(cg);
  std::vector<TokenId> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    TokenId best = -1;
    std::size_t best_len = 0;
    for (std::size_t id = 0; id < v.n_tokens(); ++id) {
      const TokenId t = static_cast<TokenId>(id);
      if (v.is_special(t)) continue;
      const std::string& b = v.token_bytes(t);
      if (b.size() > best_len && text.compare(pos, b.size(), b) == 0) {
        best = t;
        best_len = b.size();
      }
    }
    if (best < 0 || !m.accept_token(best)) throw std::logic_error("greedy_tokens: stuck");
    out.push_back(best);
    pos += best_len;
  }
  return out;
}

// Preprocessing the full Llama 3.1 vocabulary keeps every token's bytes and classifies the specials (its
// time is measured by BM_VocabularyPreprocessing in tests/bench/grammar_mask_bench.cpp, not asserted here).
TEST(Llama3, VocabularyPreprocessingKeepsEveryToken) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama3/encoder.json");
  auto vocab = load_llama3_vocabulary(shared_data("tokenizers/llama3/encoder.json"));
  std::vector<std::string> tokens;
  for (std::size_t i = 0; i < vocab->n_tokens(); ++i) tokens.push_back(vocab->token_bytes(static_cast<TokenId>(i)));
  std::vector<TokenId> special;
  for (TokenId i = 128000; i < 128256; ++i) special.push_back(i);
  Vocabulary again(tokens, special, {128001, 128009});
  EXPECT_EQ(again.n_tokens(), 128256u);
  EXPECT_EQ(again.index().text_tokens().size(), 128000u);
  for (TokenId id : {0, 1000, 127999, 128000, 128255}) {
    EXPECT_EQ(again.token_bytes(id), tokens[static_cast<std::size_t>(id)]) << id;
  }
}

TEST(Llama3, JsonGbnfFastMaskEqualsBruteForceAlongADocument) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama3/encoder.json");
  ORCHARD_REQUIRE_SHARED_DATA("grammars/json.gbnf");
  auto vocab = load_llama3_vocabulary(shared_data("tokenizers/llama3/encoder.json"));
  Grammar g = parse_gbnf(read_file(shared_data("grammars/json.gbnf")));
  CompiledGrammar cg = compile_grammar(g, vocab);
  const std::string doc =
      "{\"name\": \"Zo\xC3\xAB \\u00e9\", \"tags\": [\"a\", \"b\\n\"], \"age\": -12.5e3, \"ok\": true,\n"
      "  \"nested\": {\"x\": null, \"y\": [1, 2, {}]}}";
  std::vector<TokenId> tokens = greedy_tokens(cg, doc);
  Matcher m(cg);
  for (std::size_t i = 0; i <= tokens.size(); ++i) {
    ASSERT_EQ(fast_mask(m), brute_force_mask(m)) << "after token " << i;
    if (i < tokens.size()) {
      ASSERT_TRUE(m.accept_token(tokens[i]));
    }
  }
  EXPECT_TRUE(m.can_stop());
  EXPECT_TRUE(m.accept_token(128009));
}

TEST(Llama3, LlamaCppGrammarsCompile) {
  ORCHARD_REQUIRE_SHARED_DATA("tokenizers/llama3/encoder.json");
  auto vocab = load_llama3_vocabulary(shared_data("tokenizers/llama3/encoder.json"));
  for (const char* name : {"arithmetic", "c", "chess", "english", "japanese", "json", "json_arr", "list"}) {
    const auto path = shared_data(std::string("grammars/") + name + ".gbnf");
    if (!std::filesystem::exists(path)) continue;
    CompiledGrammar cg = compile_grammar(parse_gbnf(read_file(path)), vocab);
    Matcher m(cg);
    std::vector<std::uint32_t> mask = fast_mask(m);
    std::size_t n = 0;
    for (std::uint32_t w : mask) n += __builtin_popcount(w);
    EXPECT_GT(n, 0u) << name;
  }
}

}  // namespace
}  // namespace pse::testing
