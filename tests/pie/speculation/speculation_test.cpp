// The drafter (prompt lookup) and the adaptive draft length of speculative decoding.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "default_model.h"
#include "pie/speculation.h"
#include "tokenizers/tokenizer.h"

namespace pie {
namespace {

TEST(PromptLookup, ProposesWhatFollowedTheLatestMatch) {
  const std::vector<std::int32_t> c{5, 1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2};
  // "1 2" last occurred at 5..6, followed by 3 7 8 1 2.
  EXPECT_EQ(prompt_lookup(c, 3), (std::vector<std::int32_t>{3, 7, 8}));
  EXPECT_EQ(prompt_lookup(c, 10), (std::vector<std::int32_t>{3, 7, 8, 1, 2}));
  // The longest suffix wins: "8 1 2"? absent; "1 2": present.
  const std::vector<std::int32_t> d{4, 4, 4};
  EXPECT_EQ(prompt_lookup(d, 2), (std::vector<std::int32_t>{4}));  // overlapping repeat: "4 4" at 0, then 4
  EXPECT_TRUE(prompt_lookup(std::vector<std::int32_t>{1, 2, 3}, 4).empty());
  EXPECT_TRUE(prompt_lookup(c, 0).empty());
  EXPECT_TRUE(prompt_lookup(std::vector<std::int32_t>{}, 4).empty());
}

// A key followed by different tokens in different places (JSON's `":"` before every value) guesses
// nothing; one followed by the same token everywhere guesses it.
TEST(PromptLookup, AnAmbiguousKeyGuessesNothing) {
  const std::vector<std::int32_t> json{1, 9, 5, 2, 9, 6, 3, 9};  // 9 precedes 5, then 6
  EXPECT_TRUE(prompt_lookup(json, 4).empty());
  const std::vector<std::int32_t> agreed{1, 9, 5, 2, 9, 5, 3, 9};  // 9 precedes 5 twice
  EXPECT_EQ(prompt_lookup(agreed, 2), (std::vector<std::int32_t>{5, 3}));
  // The longest recurring suffix decides: "3 9" once (then 5), though "9" alone is ambiguous.
  const std::vector<std::int32_t> longer{3, 9, 5, 9, 6, 3, 9};
  EXPECT_EQ(prompt_lookup(longer, 1), (std::vector<std::int32_t>{5}));
}

// Prompt lookup by text: a span copied into a JSON string, whose tokens differ from the prose's (no
// leading space after the quote), is guessed from the text as the tokenizer spells it; a key that goes on
// differently in two places, one found nowhere and one of punctuation guess nothing. (The default model's
// tokenizer.)
TEST(TextLookup, GuessesACopyWhoseTokensDifferFromItsSource) {
  ORCHARD_REQUIRE_DEFAULT_MODEL();
  const auto tok = tokenizers::Tokenizer::load(orchard::testing::default_model_path());
  const std::vector<std::int32_t> prose =
      tok.encode("Maria Lopez works at Tidewater Labs and lives in Lisbon. Her email is maria@tidewater.io.");
  auto with = [&](const std::string& output) {
    std::vector<std::int32_t> c = prose;
    const std::vector<std::int32_t> o = tok.encode(output);
    c.insert(c.end(), o.begin(), o.end());
    return c;
  };
  const std::vector<std::int32_t> company = with("{\"company\":\"Tide");
  const std::vector<std::int32_t> guess = text_lookup(company, 6, tok);
  ASSERT_FALSE(guess.empty());
  EXPECT_LE(guess.size(), 6u);
  EXPECT_EQ(tok.decode(guess).rfind("water Labs", 0), 0u) << tok.decode(guess);
  EXPECT_EQ(text_lookup(company, 2, tok).size(), 2u);
  EXPECT_TRUE(text_lookup(company, 0, tok).empty());
  // "Lis" once in the prose: "bon." follows.
  EXPECT_EQ(tok.decode(text_lookup(with("{\"city\":\"Lis"), 4, tok)).rfind("bon", 0), 0u);
  // "Tidewater" goes on with " Labs" in one place and " Inc" in another: no guess.
  std::vector<std::int32_t> two = tok.encode("at Tidewater Labs, not Tidewater Inc.");
  const std::vector<std::int32_t> tail = tok.encode("{\"c\":\"Tidewater");
  two.insert(two.end(), tail.begin(), tail.end());
  EXPECT_TRUE(text_lookup(two, 4, tok).empty());
  EXPECT_TRUE(text_lookup(with("{\"x\":\"Zq"), 4, tok).empty());
  // The output's own punctuation (`y":"` after "company" and "city") is no key.
  EXPECT_TRUE(text_lookup(with("{\"company\":\"Tidewater Labs\",\"city\":\""), 4, tok).empty());
  EXPECT_TRUE(text_lookup(std::vector<std::int32_t>{}, 4, tok).empty());
}

TEST(DraftLength, WeighsTheAcceptanceRateAgainstTheCost) {
  DraftLength k(8);
  for (int i = 0; i < 20; ++i) k.record(4, 4);  // everything accepted: drafting always pays
  EXPECT_EQ(k.next(0.5), 8);
  for (int i = 0; i < 20; ++i) k.record(4, 3);  // three of four: a rate of 3/4
  EXPECT_NEAR(k.acceptance(), 0.75, 0.01);
  EXPECT_GE(k.next(0.01), 6);  // drafts nearly free: long ones
  const std::int32_t costly = k.next(0.5);
  EXPECT_GE(costly, 1);
  EXPECT_LE(costly, 2);  // each costs half a step: short ones
  for (int i = 0; i < 10; ++i) k.record(4, 0);  // every first draft rejected
  EXPECT_LT(k.acceptance(), 0.05);
  EXPECT_EQ(k.next(0.3), 0);  // does not pay
  std::int32_t retried = 0;
  for (int i = 0; i < 16; ++i) retried += k.next(0.3);
  EXPECT_EQ(retried, 1);  // one token again after a while
  DraftLength fixed(5, /*fixed=*/true);
  fixed.record(5, 0);
  EXPECT_EQ(fixed.next(10.0), 5);
}

TEST(StepCost, ReadsTheCostOfATokenFromTheSteps) {
  StepCost c;
  EXPECT_DOUBLE_EQ(c.relative_token_cost(1), 0.3);  // the prior
  for (int i = 0; i < 50; ++i) c.record(1, 0.010);
  EXPECT_DOUBLE_EQ(c.relative_token_cost(1), 0.3);  // one size only: still the prior
  // t = 10 ms + 2 ms per token beyond... : 8 ms base + 2 ms a token.
  for (int i = 0; i < 200; ++i) c.record(1 + i % 4, 0.008 + 0.002 * (1 + i % 4));
  EXPECT_NEAR(c.relative_token_cost(1), 0.002 / 0.010, 0.02);
  EXPECT_NEAR(c.relative_token_cost(4), 0.002 / 0.016, 0.02);
  c.record(0, 1.0);  // ignored
  c.record(3, -1.0);
  EXPECT_NEAR(c.relative_token_cost(1), 0.2, 0.02);
}

// The rule drafts only when the tokens a step is expected to yield beat what the step costs against a
// one-token step: a second token costing half a step loses at an acceptance of 0.5 and pays at 0.9; the
// same rate drafts when tokens cost little.
TEST(DraftLength, NeverDraftsWhenTheMeasuredCostLoses) {
  const std::vector<double> steep{1.0, 1.55, 1.8, 1.95, 2.25, 2.5, 2.8, 3.1, 3.4};  // a CPU's steps
  const std::vector<double> flat{1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4};   // a GPU's
  DraftLength half(8);
  for (int i = 0; i < 30; ++i) half.record(2, 1);  // one of the two tried kept: a rate of 1/2
  EXPECT_NEAR(half.acceptance(), 0.5, 0.01);
  EXPECT_EQ(half.next(steep), 0);
  EXPECT_GE(half.next(flat), 1);
  DraftLength high(8);
  for (int i = 0; i < 30; ++i) high.record(9, 8);  // 8 of the 9 tried
  EXPECT_GE(high.next(steep), 3);
  // Costs for fewer sizes cap K; a fixed K ignores them.
  EXPECT_LE(high.next(std::span<const double>(flat).first(3)), 2);
  DraftLength fixed(4, /*fixed=*/true);
  EXPECT_EQ(fixed.next(steep), 4);
}

// In a batch a draft pays for the whole step's growth: a rate of 3/4 with a token costing a fifth of the
// step drafts for a lone row, not for one of four rows (its 0.75 expected tokens against the 0.8 tokens the
// four rows' step loses to the growth), and drafts again once tokens cost little; the same costs at one
// row give the same answer as the rule without rows.
TEST(DraftLength, ARowOfABatchDraftsOnlyWhatPaysForEveryRow) {
  const std::vector<double> batch{1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 2.4, 2.6};
  const std::vector<double> cheap{1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08};
  DraftLength k(8);
  for (int i = 0; i < 30; ++i) k.record(4, 3);
  ASSERT_NEAR(k.acceptance(), 0.75, 0.01);
  EXPECT_GE(k.next(batch, 1), 1);
  EXPECT_EQ(k.next(batch, 1), k.next(batch));
  EXPECT_EQ(k.next(batch, 4), 0);
  EXPECT_EQ(k.next(batch, 16), 0);
  EXPECT_GE(k.next(cheap, 4), 1);
  // Sixteen steps without a draft bring the retry of one token where a higher rate could pay (four rows:
  // a rate of 1 would), none where even every token kept would not (sixteen rows).
  for (const auto& [rows, retries] : {std::pair{4, 1}, std::pair{16, 0}}) {
    DraftLength idle(8);
    for (int i = 0; i < 30; ++i) idle.record(4, 3);
    std::int32_t retried = 0;
    for (int i = 0; i < 16; ++i) retried += idle.next(batch, rows);
    EXPECT_EQ(retried, retries) << rows << " rows";
  }
}

// Each size's own mean, not a line through them: a two-token step measured at 1.5x a one-token step is
// 1.5x, though the larger ones grow by a quarter a token; unseen sizes lie between seen ones; steps without
// logits on every token (a prompt chunk) stay out of the means.
TEST(StepCost, EachSizeHasItsOwnMean) {
  StepCost c;
  const std::vector<double> prior = c.relative_costs(1, 3);  // 0.3 of a step a token
  ASSERT_EQ(prior.size(), 4u);
  for (std::size_t k = 0; k < prior.size(); ++k) EXPECT_NEAR(prior[k], 1.0 + 0.3 * static_cast<double>(k), 1e-12);
  const std::vector<std::pair<std::int32_t, double>> steps{{1, 0.010}, {2, 0.015}, {3, 0.0175}, {6, 0.025}};
  for (int i = 0; i < 40; ++i) {
    for (const auto& [n, t] : steps) c.record(n, t);
  }
  c.record(5, 0.001, 1);  // a prompt chunk of 5 tokens: cheap, not a step of 5 drafted tokens
  EXPECT_NEAR(c.seconds(2), 0.015, 1e-9);
  EXPECT_NEAR(c.seconds(4), 0.0175 + (0.025 - 0.0175) / 3, 1e-9);
  EXPECT_NEAR(c.seconds(5), 0.0175 + 2 * (0.025 - 0.0175) / 3, 1e-9);
  const std::vector<double> costs = c.relative_costs(1, 8);
  ASSERT_EQ(costs.size(), 9u);
  EXPECT_DOUBLE_EQ(costs[0], 1.0);
  EXPECT_NEAR(costs[1], 1.5, 1e-9);
  EXPECT_NEAR(costs[2], 1.75, 1e-9);
  for (std::size_t k = 1; k < costs.size(); ++k) EXPECT_GE(costs[k], costs[k - 1]);
  EXPECT_GT(costs[8], costs[5]);  // past the largest size seen: the line's slope
  // The mean follows the machine: a slower one-token step moves it.
  for (int i = 0; i < 40; ++i) c.record(1, 0.020);
  EXPECT_NEAR(c.seconds(1), 0.020, 0.001);  // a moving mean of about 16 steps
}

}  // namespace
}  // namespace pie
