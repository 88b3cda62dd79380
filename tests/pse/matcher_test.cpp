#include "pse/matcher.h"

#include <gtest/gtest.h>

#include "engine_test_util.h"

namespace pse::testing {
namespace {

TokenId id_of(const Vocabulary& v, const std::string& bytes) {
  for (std::size_t i = 0; i < v.n_tokens(); ++i)
    if (!v.is_special(static_cast<TokenId>(i)) && v.token_bytes(static_cast<TokenId>(i)) == bytes)
      return static_cast<TokenId>(i);
  throw std::logic_error("no token " + bytes);
}

bool bit(const std::vector<std::uint32_t>& m, TokenId id) { return (m[id >> 5] >> (id & 31)) & 1; }

TEST(Matcher, AcceptsAndStops) {
  TokenId eos = 0, ctl = 0;
  auto vocab = small_vocabulary(&eos, &ctl);
  Matcher m(compile_grammar(arithmetic_grammar(), vocab));
  EXPECT_FALSE(m.can_stop());
  EXPECT_FALSE(m.accept_token(eos));
  EXPECT_TRUE(m.accept_token(id_of(*vocab, "12")));
  EXPECT_TRUE(m.can_stop());
  EXPECT_FALSE(m.must_stop());
  EXPECT_FALSE(m.accept_token(id_of(*vocab, ")")));  // rejected, state unchanged
  EXPECT_EQ(m.n_bytes(), 2u);
  EXPECT_TRUE(m.accept_token(id_of(*vocab, "+(")));
  EXPECT_FALSE(m.can_stop());
  EXPECT_TRUE(m.accept_bytes("3*4)"));
  EXPECT_TRUE(m.can_stop());
  std::vector<std::uint32_t> mask = fast_mask(m);
  EXPECT_TRUE(bit(mask, eos));
  EXPECT_FALSE(bit(mask, ctl));
  for (std::size_t row = vocab->n_tokens(); row < vocab->n_rows(); ++row) EXPECT_FALSE(bit(mask, static_cast<TokenId>(row)));
  EXPECT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_TRUE(m.must_stop());
  EXPECT_FALSE(m.accept_token(id_of(*vocab, "1")));
  mask = fast_mask(m);
  for (std::uint32_t w : mask) EXPECT_EQ(w, 0u);
  m.rollback(1);  // undo the eos
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.accept_token(id_of(*vocab, "+")));
}

TEST(Matcher, SpecialPaddedAndEmptyTokensNeverAllowed) {
  TokenId eos = 0, ctl = 0;
  auto vocab = small_vocabulary(&eos, &ctl);
  Matcher m(compile_grammar(json_like_grammar(), vocab));
  EXPECT_TRUE(m.accept_bytes("\""));
  EXPECT_FALSE(m.accept_token(ctl));
  EXPECT_FALSE(m.accept_token(static_cast<TokenId>(vocab->n_tokens())));  // a padded row
  EXPECT_FALSE(m.accept_token(id_of(*vocab, "")));
  EXPECT_EQ(m.n_steps(), 1u);
}

TEST(Matcher, BadTokenIdThrows) {
  auto vocab = small_vocabulary();
  Matcher m(compile_grammar(arithmetic_grammar(), vocab));
  EXPECT_THROW(m.accept_token(-1), InputError);
  EXPECT_THROW(m.accept_token(static_cast<TokenId>(vocab->n_rows())), InputError);
  EXPECT_EQ(m.n_bytes(), 0u);
}

TEST(Matcher, RollbackTooFarThrowsAndKeepsState) {
  auto vocab = small_vocabulary();
  Matcher m(compile_grammar(arithmetic_grammar(), vocab));
  ASSERT_TRUE(m.accept_bytes("1+"));
  EXPECT_THROW(m.rollback(2), InputError);
  EXPECT_EQ(m.n_bytes(), 2u);
  m.rollback(0);
  m.rollback(1);
  EXPECT_EQ(m.n_bytes(), 0u);
}

TEST(Matcher, MaskTooSmallThrows) {
  auto vocab = small_vocabulary();
  Matcher m(compile_grammar(arithmetic_grammar(), vocab));
  std::vector<std::uint32_t> mask(m.mask_words() - 1);
  EXPECT_THROW(m.fill_next_token_bitmask(mask), InputError);
}

TEST(Matcher, MaskWordsCoverPaddedRows) {
  auto vocab = small_vocabulary();
  Matcher m(compile_grammar(arithmetic_grammar(), vocab));
  EXPECT_EQ(m.mask_words(), (vocab->n_rows() + 31) / 32);
}

TEST(Matcher, ForcedContinuation) {
  auto vocab = small_vocabulary();
  G g;
  RuleId r = g.rule("root");
  g.define(r, g.seq({g.lit("{\"name\": \""), g.plus(g.cls('a', 'z')), g.lit("\", \"age\": "),
                     g.alt({g.lit("10"), g.lit("11")}), g.lit("}")}));
  Matcher m(compile_grammar(g.done(r), vocab));
  EXPECT_EQ(m.forced_continuation(), "{\"name\": \"");
  EXPECT_EQ(m.n_bytes(), 0u);  // unchanged
  ASSERT_TRUE(m.accept_bytes("{\"name\": \"bob"));
  EXPECT_EQ(m.forced_continuation(), "");
  ASSERT_TRUE(m.accept_bytes("\""));
  EXPECT_EQ(m.forced_continuation(), ", \"age\": 1");
  EXPECT_EQ(m.forced_continuation(3), ", \"");
  ASSERT_TRUE(m.accept_bytes(", \"age\": 11"));
  EXPECT_EQ(m.forced_continuation(), "}");
  ASSERT_TRUE(m.accept_bytes("}"));
  EXPECT_EQ(m.forced_continuation(), "");
  EXPECT_TRUE(m.must_stop());
}

TEST(Matcher, MustStopOnlyWhenNothingElse) {
  auto vocab = small_vocabulary();
  G g;
  RuleId r = g.rule("root");
  g.define(r, g.seq({g.lit("a"), g.opt(g.lit("b"))}));
  Matcher m(compile_grammar(g.done(r), vocab));
  ASSERT_TRUE(m.accept_bytes("a"));
  EXPECT_TRUE(m.can_stop());
  EXPECT_FALSE(m.must_stop());
  ASSERT_TRUE(m.accept_bytes("b"));
  EXPECT_TRUE(m.must_stop());
}

TEST(Matcher, ResetReturnsToStart) {
  auto vocab = small_vocabulary();
  Matcher m(compile_grammar(arithmetic_grammar(), vocab));
  std::vector<std::uint32_t> start = fast_mask(m);
  ASSERT_TRUE(m.accept_bytes("(1"));
  m.reset();
  EXPECT_EQ(m.n_steps(), 0u);
  EXPECT_EQ(fast_mask(m), start);
}

TEST(Matcher, LeftRecursionAndDeepNesting) {
  auto vocab = small_vocabulary();
  Matcher m(compile_grammar(left_recursive_grammar(), vocab));
  std::string deep(3000, '[');
  ASSERT_TRUE(m.accept_bytes(deep));
  ASSERT_TRUE(m.accept_bytes("a,bb"));
  EXPECT_FALSE(m.can_stop());
  std::string close(3000, ']');
  ASSERT_TRUE(m.accept_bytes(close));
  EXPECT_TRUE(m.can_stop());
  EXPECT_FALSE(m.accept_bytes("]"));
}

TEST(Matcher, BatchFillMatchesSingleAndChecksSizes) {
  auto vocab = small_vocabulary();
  CompiledGrammar cg = compile_grammar(json_like_grammar(), vocab);
  std::vector<Matcher> ms;
  for (const char* p : {"", "{", "[1, ", "{\"a\": \"x", "[true", "\"\\"}) {
    ms.emplace_back(cg);
    ASSERT_TRUE(ms.back().accept_bytes(p)) << p;
  }
  std::vector<Matcher*> ptrs;
  for (Matcher& m : ms) ptrs.push_back(&m);
  const std::size_t w = ms[0].mask_words();
  ThreadPool pool(3);
  std::vector<std::uint32_t> masks(ptrs.size() * w, 0xFFFFFFFF);
  fill_next_token_bitmasks(ptrs, masks, &pool);
  for (std::size_t i = 0; i < ms.size(); ++i) {
    std::vector<std::uint32_t> one = fast_mask(ms[i]);
    EXPECT_EQ(std::vector<std::uint32_t>(masks.begin() + i * w, masks.begin() + (i + 1) * w), one);
  }
  std::vector<std::uint32_t> small(ptrs.size() * w - 1);
  EXPECT_THROW(fill_next_token_bitmasks(ptrs, small, &pool), InputError);
}

}  // namespace
}  // namespace pse::testing
