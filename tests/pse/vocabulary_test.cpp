#include "pse/vocabulary.h"

#include <gtest/gtest.h>

namespace pse {
namespace {

TEST(Vocabulary, SortsTextTokensAndIndexesFirstBytes) {
  Vocabulary v({"b", "ab", "a", "<s>", "", "\xff", "abc"}, {3}, {}, 40);
  EXPECT_EQ(v.n_tokens(), 7u);
  EXPECT_EQ(v.n_rows(), 40u);
  EXPECT_EQ(v.n_mask_words(), 2u);
  EXPECT_EQ(v.text_tokens(), (std::vector<TokenId>{2, 1, 6, 0, 5}));
  EXPECT_EQ(v.lcp(), (std::vector<std::uint32_t>{0, 1, 2, 0, 0}));
  EXPECT_EQ(v.first_byte_begin()['a'], 0u);
  EXPECT_EQ(v.first_byte_begin()['b'], 3u);
  EXPECT_EQ(v.first_byte_begin()[0xff], 4u);
  EXPECT_EQ(v.first_byte_begin()[256], 5u);
  EXPECT_TRUE(v.is_special(3));
  EXPECT_FALSE(v.is_special(39));  // padded
  EXPECT_EQ(v.token_bytes(39), "");
  EXPECT_EQ(v.max_token_length(), 3u);
}

TEST(Vocabulary, EosIdsAreSpecialAndSorted) {
  Vocabulary v({"a", "</s>", "<eot>"}, {}, {2, 1, 2});
  EXPECT_EQ(v.eos_ids(), (std::vector<TokenId>{1, 2}));
  EXPECT_TRUE(v.is_eos(1));
  EXPECT_TRUE(v.is_special(2));
  EXPECT_FALSE(v.is_eos(0));
}

TEST(Vocabulary, BadInputThrows) {
  EXPECT_THROW(Vocabulary({"a"}, {1}, {}), InputError);
  EXPECT_THROW(Vocabulary({"a"}, {}, {-1}), InputError);
  EXPECT_THROW(Vocabulary({"a", "b"}, {}, {}, 1), InputError);
  Vocabulary v({"a"}, {}, {}, 4);
  EXPECT_THROW(v.token_bytes(4), InputError);
  EXPECT_THROW(v.token_bytes(-1), InputError);
}

TEST(Vocabulary, HashIsContentIdentity) {
  Vocabulary a({"a", "b"}, {}, {1}), b({"a", "b"}, {}, {1}), c({"a", "b"}, {}, {}), d({"a", "b"}, {}, {1}, 64);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_NE(a.hash(), d.hash());
}

}  // namespace
}  // namespace pse
