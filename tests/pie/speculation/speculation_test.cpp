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

TEST(DraftLength, FollowsTheAcceptanceRate) {
  DraftLength k(8);
  for (int i = 0; i < 20; ++i) k.record(4, 4);
  EXPECT_EQ(k.next(), 8);
  for (int i = 0; i < 3; ++i) k.record(4, 1);
  const std::int32_t after = k.next();
  EXPECT_GE(after, 1);
  EXPECT_LT(after, 8);
  for (int i = 0; i < 10; ++i) k.record(4, 0);  // keeps failing: pauses
  EXPECT_EQ(k.next(), 0);
}

}  // namespace
}  // namespace pie
