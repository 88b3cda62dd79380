#include "pse/vocabulary.h"
#include "vocabulary_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace pse {
namespace {

TEST(Vocabulary, SortsTextTokensAndIndexesFirstBytes) {
  Vocabulary v({"b", "ab", "a", "<s>", "", "\xff", "abc"}, {3}, {}, 40);
  EXPECT_EQ(v.n_tokens(), 7u);
  EXPECT_EQ(v.n_rows(), 40u);
  EXPECT_EQ(v.n_mask_words(), 2u);
  EXPECT_EQ(v.index().text_tokens(), (std::vector<TokenId>{2, 1, 6, 0, 5}));
  EXPECT_EQ(v.index().lcp(), (std::vector<std::uint32_t>{0, 1, 2, 0, 0}));
  EXPECT_EQ(v.index().first_byte_begin()['a'], 0u);
  EXPECT_EQ(v.index().first_byte_begin()['b'], 3u);
  EXPECT_EQ(v.index().first_byte_begin()[0xff], 4u);
  EXPECT_EQ(v.index().first_byte_begin()[256], 5u);
  EXPECT_TRUE(v.is_special(3));
  EXPECT_FALSE(v.is_special(39));  // padded
  EXPECT_EQ(v.token_bytes(39), "");
  EXPECT_EQ(v.index().max_token_length(), 3u);
}

TEST(Vocabulary, SubtreeEndSkipsEveryTokenWithTheSamePrefix) {
  // Random tokens over a small alphabet share long prefixes; compare with a linear scan.
  std::vector<std::string> tokens;
  std::uint32_t seed = 7;
  auto next = [&] { return seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff; };
  for (int i = 0; i < 600; ++i) {
    std::string t(1 + next() % 6, 'a');
    for (char& c : t) c = static_cast<char>('a' + next() % 3);
    tokens.push_back(t);
  }
  Vocabulary v(tokens, {}, {});
  const std::size_t n = v.index().text_tokens().size();
  for (std::size_t p = 0; p < n; ++p) {
    const std::string_view t = v.index().sorted_token(p);
    for (std::size_t d = 0; d < t.size(); ++d) {
      std::size_t q = p + 1;
      while (q < n && v.index().sorted_token(q).starts_with(t.substr(0, d + 1))) ++q;
      ASSERT_EQ(v.index().subtree_end(p, d), q) << "token " << t << " depth " << d;
    }
  }
}

TEST(Vocabulary, TokenClassesIndexPlainAndJsonText) {
  // Text: well-formed UTF-8 characters, none a control character, '"' or '\\'; the last may be cut short
  // (a lone lead byte, "a" and the first two bytes of a 3-byte character). Not text: a surrogate, a value
  // past U+10FFFF, an overlong form, a cut-short sequence that is not the start of a well-formed one, a
  // leading continuation byte, a quote, a control character.
  const std::vector<std::string> tokens = {"ab", "\xc3\xa9", "\xc3", "a\"", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                           " x", "\x01", "\xc0\xaf", "a\xe4\xb8\xad", "aa", "ac",
                                           "a\xe4\xb8", "\xe0\x80", "\xb8" "ab"};
  Vocabulary v(tokens, {}, {});
  const auto& plain = v.index().token_class(VocabularyIndex::TokenClass::kPlain);
  const auto& text = v.index().token_class(VocabularyIndex::TokenClass::kText);
  std::set<TokenId> plain_ids, text_ids;
  std::map<TokenId, std::size_t> position;
  for (std::size_t p = 0; p < v.index().text_tokens().size(); ++p) {
    position[v.index().text_tokens()[p]] = p;
    if (plain.member[p]) plain_ids.insert(v.index().text_tokens()[p]);
    if (text.member[p]) text_ids.insert(v.index().text_tokens()[p]);
  }
  EXPECT_EQ(plain_ids, (std::set<TokenId>{0, 6, 10, 11}));
  EXPECT_EQ(text_ids, (std::set<TokenId>{0, 1, 2, 6, 9, 10, 11, 12}));
  // Where the rest of a token is a member: 0 for members, the length when no rest is.
  for (const auto& [id, from] : std::map<TokenId, std::uint32_t>{{0, 0}, {14, 1}, {3, 2}, {7, 1}, {13, 2}}) {
    EXPECT_EQ(text.member_from[position[id]], from) << id;
  }
  EXPECT_EQ(plain.member_from[position[14]], 1u);
  EXPECT_EQ(plain.member_from[position[12]], 3u);
  // Ids by first byte, the mask, and the jump to the next non-member.
  EXPECT_EQ(std::vector<TokenId>(text.ids.begin() + text.begin['a'], text.ids.begin() + text.begin['a' + 1]),
            (std::vector<TokenId>{10, 0, 11, 12, 9}));
  for (TokenId id = 0; id < static_cast<TokenId>(tokens.size()); ++id)
    EXPECT_EQ((text.bits[0] >> id) & 1, text_ids.count(id)) << id;
  for (std::size_t p = 0; p < v.index().text_tokens().size(); ++p) {
    std::size_t q = p;
    while (q < v.index().text_tokens().size() && text.member[q]) ++q;
    EXPECT_EQ(text.next_out[p], q) << p;
  }
  // Lengths in characters (a cut-short last one counts), the masks by length, the jump past the members
  // of any length up to the longest.
  const std::map<TokenId, std::uint32_t> expected_chars = {{1, 1}, {9, 2}, {2, 1}, {12, 2}, {13, 0}};
  for (std::size_t p = 0; p < v.index().text_tokens().size(); ++p) {
    if (const auto it = expected_chars.find(v.index().text_tokens()[p]); it != expected_chars.end()) {
      EXPECT_EQ(text.chars[p], it->second) << it->first;
    }
    EXPECT_EQ(text.next_out_of_run[p], text.next_out[p]) << p;  // every member here fits the longest run
  }
  ASSERT_EQ(text.up_to.size(), 3u);  // lengths 0, 1, 2
  EXPECT_EQ(text.up_to[1][0], 1u << 1 | 1u << 2);
  EXPECT_EQ(text.up_to[2][0], text.bits[0]);
  // Groups larger than the mask (one word here) also come as masks.
  EXPECT_EQ(text.group_bits['a'], (std::vector<std::uint32_t>{1u << 0 | 1u << 9 | 1u << 10 | 1u << 11 | 1u << 12}));
  EXPECT_TRUE(text.group_bits[' '].empty());
}

// Each token's ASCII bytes as a set, and how its other bytes stand: whole characters (the last may be
// cut short) or not.
TEST(Vocabulary, AsciiBytesAndNonAsciiKinds) {
  using K = VocabularyIndex::NonAscii;
  const std::vector<std::pair<std::string, K>> cases = {
      {"ab", K::kNone},       {"\xc3\xa9", K::kCharacters}, {"a\xc3", K::kCharacters},   {"\xf0\x9f", K::kCharacters},
      {"\xb8" "b", K::kOther}, {"\xc3" "a", K::kOther},      {"\xed\xa0\x80", K::kOther}, {"\xc0\xaf", K::kOther},
      {"x\xe4\xb8\xad/", K::kCharacters}, {"\xff", K::kOther}};
  std::vector<std::string> tokens;
  for (const auto& [t, k] : cases) tokens.push_back(t);
  Vocabulary v(tokens, {}, {});
  for (std::size_t p = 0; p < v.index().text_tokens().size(); ++p) {
    const std::string& t = tokens[static_cast<std::size_t>(v.index().text_tokens()[p])];
    std::array<std::uint64_t, 2> ascii{};
    for (const char c : t)
      if (static_cast<unsigned char>(c) < 0x80) ascii[static_cast<unsigned char>(c) >> 6] |= std::uint64_t{1} << (c & 63);
    EXPECT_EQ(v.index().ascii_bytes(p), ascii) << t;
    EXPECT_EQ(v.index().non_ascii(p), cases[static_cast<std::size_t>(v.index().text_tokens()[p])].second) << t;
  }
}

// A set's index: nothing until it is asked for the kAsciiSetIndexAfter-th time, then each token's length
// when made only of the set (ASCII only), where its rest in the set begins, the jump past members, the
// member masks (all, and by length).
TEST(Vocabulary, AsciiSetIndexListsTheTokensMadeOfASet) {
  const std::vector<std::string> tokens = {"ab", "abc", "a", "b!", "ba", "\xc3\xa9", "a\xc3\xa9", "abcabc", "c", "!",
                                           " ab", "!a!bc", "\xc3\xa9" "ab"};
  Vocabulary v(tokens, {}, {});
  std::array<std::uint64_t, 2> set{};
  for (const char c : std::string("abc")) set[static_cast<unsigned char>(c) >> 6] |= std::uint64_t{1} << (c & 63);
  // Questions that do not count build nothing, and leave the count as it was.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(v.index().ascii_set_index(set, false), nullptr) << i;
  for (std::uint32_t i = 1; i < VocabularyIndex::kAsciiSetIndexAfter; ++i) EXPECT_EQ(v.index().ascii_set_index(set), nullptr) << i;
  const auto index = v.index().ascii_set_index(set);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(v.index().ascii_set_index(set), index);  // kept
  EXPECT_EQ(v.index().ascii_set_index(set, false), index);
  EXPECT_EQ(index->max_length, 6u);
  std::set<TokenId> members;
  for (std::size_t p = 0; p < v.index().text_tokens().size(); ++p) {
    const std::string& t = tokens[static_cast<std::size_t>(v.index().text_tokens()[p])];
    const bool member = t.find_first_not_of("abc") == std::string::npos;
    EXPECT_EQ(index->length[p], member ? t.size() : 0u) << t;
    const std::size_t last_out = t.find_last_not_of("abc");
    EXPECT_EQ(index->member_from[p], last_out == std::string::npos ? 0u : last_out + 1) << t;
    if (member) members.insert(v.index().text_tokens()[p]);
    std::size_t q = p;
    while (q < v.index().text_tokens().size() &&
           tokens[static_cast<std::size_t>(v.index().text_tokens()[q])].find_first_not_of("abc") == std::string::npos)
      ++q;
    EXPECT_EQ(index->next_out[p], q) << t;
  }
  // Up to kMaxAsciiSetIndexes sets are kept; past them, none is built.
  for (std::size_t k = 1; k <= VocabularyIndex::kMaxAsciiSetIndexes; ++k) {
    std::array<std::uint64_t, 2> other = set;
    other[1] |= std::uint64_t{1} << k;  // one more byte each
    std::shared_ptr<const VocabularyIndex::AsciiSetIndex> got;
    for (std::uint32_t i = 0; i < VocabularyIndex::kAsciiSetIndexAfter; ++i) got = v.index().ascii_set_index(other);
    EXPECT_EQ(got == nullptr, k == VocabularyIndex::kMaxAsciiSetIndexes) << k;
  }
  // NUL is never a member byte: the set asked with it is the same index.
  std::array<std::uint64_t, 2> with_nul = set;
  with_nul[0] |= 1;
  EXPECT_EQ(v.index().ascii_set_index(with_nul), index);
  ASSERT_EQ(index->up_to.size(), 7u);  // lengths 0..6
  ASSERT_EQ(index->fits.size(), 7u);
  for (std::size_t n = 0; n < index->fits.size(); ++n) {
    for (std::size_t p = 0; p < v.index().text_tokens().size(); ++p) {
      EXPECT_EQ((index->fits[n][p >> 6] >> (p & 63)) & 1, index->length[p] != 0 && index->length[p] <= n ? 1u : 0u)
          << "position " << p << ", length " << n;
    }
  }
  for (TokenId id = 0; id < static_cast<TokenId>(tokens.size()); ++id) {
    EXPECT_EQ((index->all[0] >> id) & 1, members.count(id)) << tokens[static_cast<std::size_t>(id)];
    EXPECT_EQ((index->up_to[2][0] >> id) & 1, members.count(id) && tokens[static_cast<std::size_t>(id)].size() <= 2)
        << tokens[static_cast<std::size_t>(id)];
  }
}

// The per-depth bitsets that let a walk accept a run of tokens read whole from a loop a word at a time:
// each bit is compared with its definition, token by token, at every depth kept.
TEST(Vocabulary, ReadWholeBitsByDepthFollowTheirDefinitions) {
  const std::vector<std::string> tokens = {"ab",         "abc",        "a",      "b!",     "ba",
                                           "\xc3\xa9",   "a\xc3\xa9",  "abcabc", "c",      "!",
                                           " ab",        "!a!bc",      "\xc3\xa9" "ab", "!\xc3\xa9" "b",
                                           "a\xc3",      "\xa9" "ab",   "x\"y",   "!!!!!!!!ab",
                                           "\x01" "ab",   " \xe2\x82\xac!"};
  Vocabulary v(tokens, {}, {});
  std::array<std::uint64_t, 2> set{};
  for (const char c : std::string("abc")) set[static_cast<unsigned char>(c) >> 6] |= std::uint64_t{1} << (c & 63);
  std::shared_ptr<const VocabularyIndex::AsciiSetIndex> index;
  for (std::uint32_t i = 0; i < VocabularyIndex::kAsciiSetIndexAfter; ++i) index = v.index().ascii_set_index(set);
  ASSERT_NE(index, nullptr);
  ASSERT_EQ(index->from_depth.size(), VocabularyIndex::kReadWholeDepths);
  ASSERT_EQ(index->from_depth_chars.size(), VocabularyIndex::kReadWholeDepths);
  auto bit = [](const std::vector<std::uint64_t>& bits, std::size_t p) {
    return ((bits[p >> 6] >> (p & 63)) & 1) != 0;
  };
  auto starts_char = [](std::string_view t, std::size_t d) {
    return d == t.size() || (static_cast<unsigned char>(t[d]) & 0xC0) != 0x80;
  };
  const VocabularyIndex::TokenClassIndex& text = v.index().token_class(VocabularyIndex::TokenClass::kText);
  const VocabularyIndex::TokenClassIndex& plain = v.index().token_class(VocabularyIndex::TokenClass::kPlain);
  for (std::size_t p = 0; p < v.index().text_tokens().size(); ++p) {
    const std::string& t = tokens[static_cast<std::size_t>(v.index().text_tokens()[p])];
    for (std::size_t d = 0; d < VocabularyIndex::kReadWholeDepths; ++d) {
      // (Past the token's end the rest is empty: made of the set. A run's tokens are never that short.)
      const std::string rest = d <= t.size() ? t.substr(d) : std::string();
      const bool in_set = rest.find_first_not_of("abc") == std::string::npos;
      EXPECT_EQ(bit(index->from_depth[d], p), in_set) << t << " at " << d;
      // Whole characters: the rest starts one, its ASCII bytes are in the set and the token is of
      // whole characters (VocabularyIndex::NonAscii::kCharacters), or the rest is in the set alone.
      bool chars = d <= t.size() && starts_char(t, d) && v.index().non_ascii(p) == VocabularyIndex::NonAscii::kCharacters;
      for (std::size_t i = d; chars && i < t.size(); ++i) {
        const auto c = static_cast<unsigned char>(t[i]);
        chars = c >= 0x80 || (c == 'a' || c == 'b' || c == 'c');
      }
      EXPECT_EQ(bit(index->from_depth_chars[d], p), in_set || chars) << t << " at " << d;
      EXPECT_EQ(bit(text.from_depth[d], p), text.member_from[p] <= d && d <= t.size() && starts_char(t, d))
          << t << " at " << d;
      EXPECT_EQ(bit(plain.from_depth[d], p), plain.member_from[p] <= d && d <= t.size()) << t << " at " << d;
    }
  }
}

// Where a long token's rest is of a class is found in one pass: with a check per suffix, a 200,000-byte
// token ending in a control character would take minutes.
TEST(Vocabulary, LongTokensFindTheirClassRestInLinearTime) {
  const std::string letters(200'000, 'a');
  Vocabulary v({letters + "\x01", "\x01" + letters, letters + "\xE4\xB8"}, {}, {});
  const auto& plain = v.index().token_class(VocabularyIndex::TokenClass::kPlain);
  const auto& text = v.index().token_class(VocabularyIndex::TokenClass::kText);
  std::map<TokenId, std::size_t> position;
  for (std::size_t p = 0; p < v.index().text_tokens().size(); ++p) position[v.index().text_tokens()[p]] = p;
  EXPECT_EQ(text.member_from[position[0]], letters.size() + 1);  // no rest but the empty one
  EXPECT_EQ(plain.member_from[position[0]], letters.size() + 1);
  EXPECT_EQ(text.member_from[position[1]], 1u);
  EXPECT_EQ(plain.member_from[position[1]], 1u);
  EXPECT_EQ(text.member_from[position[2]], 0u);  // ends cut short: text
  EXPECT_EQ(plain.member_from[position[2]], letters.size() + 2);
}

// A first-byte group's sparse mask words hold exactly its ids, each position points at its id's word, and
// a group below kMinWordGroup tokens has none.
TEST(Vocabulary, GroupWordsHoldExactlyTheGroupsIds) {
  std::vector<std::string> t;
  for (int i = 0; i < 300; ++i) {  // 'a' and 'b' groups interleaved over the ids, a small 'c' group
    t.push_back("a" + std::to_string(i));
    t.push_back("b" + std::to_string(i));
    if (i % 10 == 0) t.push_back("c" + std::to_string(i));
  }
  const Vocabulary v(t, {}, {});
  for (const char first : {'a', 'b'}) {
    const auto b = static_cast<std::uint8_t>(first);
    const std::span<const std::uint32_t> words = v.index().group_words(b), bits = v.index().group_word_bits(b);
    ASSERT_EQ(words.size(), bits.size());
    ASSERT_FALSE(words.empty()) << first;
    EXPECT_TRUE(std::is_sorted(words.begin(), words.end()));
    std::set<TokenId> from_words, from_group;
    for (std::size_t k = 0; k < words.size(); ++k)
      for (unsigned j = 0; j < 32; ++j)
        if ((bits[k] >> j) & 1) from_words.insert(static_cast<TokenId>(words[k] * 32 + j));
    for (std::uint32_t p = v.index().first_byte_begin()[b]; p < v.index().first_byte_begin()[b + 1]; ++p) {
      const TokenId id = v.index().text_tokens()[p];
      from_group.insert(id);
      EXPECT_EQ(words[v.index().word_of_position()[p]], static_cast<std::uint32_t>(id) / 32) << "position " << p;
    }
    EXPECT_EQ(from_words, from_group) << first;
  }
  EXPECT_TRUE(v.index().group_words(static_cast<std::uint8_t>('c')).empty()) << "30 tokens: below kMinWordGroup";
}

TEST(Vocabulary, LongestTextPrefixMatchesALinearScan) {
  // Random tokens over three bytes (one of them >= 0x80, to check unsigned order), duplicates and a
  // special token that would match; every text's answer against the longest match found by a scan.
  std::vector<std::string> tokens{"<s>", "a", "a"};
  std::uint32_t seed = 11;
  auto next = [&] { return seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff; };
  const char alphabet[] = {'a', 'b', '\xC3'};
  for (int i = 0; i < 400; ++i) {
    std::string t(1 + next() % 5, 'a');
    for (char& c : t) c = alphabet[next() % 3];
    tokens.push_back(t);
  }
  tokens.push_back("bbbbbbbbbbbb");  // a special token: never a match
  const auto special = static_cast<TokenId>(tokens.size() - 1);
  Vocabulary v(tokens, {0, special}, {});
  for (int i = 0; i < 2000; ++i) {
    std::string text(next() % 9, 'a');
    for (char& c : text) c = alphabet[next() % 3];
    std::size_t best_len = 0;
    for (std::size_t id = 0; id < tokens.size(); ++id) {
      if (v.is_special(static_cast<TokenId>(id))) continue;
      if (tokens[id].size() > best_len && text.starts_with(tokens[id])) best_len = tokens[id].size();
    }
    const std::optional<TokenId> got = v.longest_text_prefix(text);
    if (best_len == 0) {
      EXPECT_FALSE(got) << text;
    } else {
      ASSERT_TRUE(got) << text;
      EXPECT_EQ(tokens[static_cast<std::size_t>(*got)].size(), best_len) << text;
      EXPECT_TRUE(text.starts_with(tokens[static_cast<std::size_t>(*got)])) << text;
    }
  }
  EXPECT_FALSE(v.longest_text_prefix("<s>x"));
  EXPECT_FALSE(v.longest_text_prefix(""));
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
