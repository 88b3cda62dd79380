// The drafter (prompt lookup) and the adaptive draft length of speculative decoding.
#include <gtest/gtest.h>

#include <vector>

#include "pie/speculation.h"

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

}  // namespace
}  // namespace pie
