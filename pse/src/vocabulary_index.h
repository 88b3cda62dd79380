// What pse precomputes over a vocabulary's text tokens for its compiler and matcher (not part of pse's API):
// the tokens sorted by bytes with their common prefixes, first-byte groups (as positions, masks and mask
// words), the classes of tokens a walk reads whole, per-token ASCII byte sets, and indexes of ASCII sets
// built on demand. Built once by Vocabulary's constructor; read-only afterwards (ascii_set_index is
// thread-safe).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pse/vocabulary.h"

namespace pse {

class VocabularyIndex {
 public:
  // tokens: every token's bytes; kind: 0 for text, else special (never indexed); mask_words: the
  // vocabulary's mask width.
  VocabularyIndex(const std::vector<std::string>& tokens, const std::vector<std::uint8_t>& kind,
                  std::size_t mask_words);
  ~VocabularyIndex();
  VocabularyIndex(const VocabularyIndex&) = delete;
  VocabularyIndex& operator=(const VocabularyIndex&) = delete;

  std::size_t n_mask_words() const { return n_mask_words_; }
  // text_tokens: every non-special token with bytes,
  // sorted by bytes; lcp[i]: the length of the common prefix of text_tokens[i-1] and text_tokens[i]
  // (lcp[0] = 0); first_byte_begin[b]..first_byte_begin[b+1]: the positions whose first byte is b.
  const std::vector<TokenId>& text_tokens() const { return sorted_; }
  const std::vector<std::uint32_t>& lcp() const { return lcp_; }
  const std::vector<std::uint32_t>& first_byte_begin() const { return first_byte_begin_; }  // [257]
  std::size_t max_token_length() const { return max_length_; }
  // Classes of tokens that a walk reads whole, without stepping through their bytes, when the
  // configuration it is in loops on every such token (a JSON string's characters, a free-text rule):
  // kPlain: every byte plain (is_plain_byte); kText: well-formed UTF-8 characters, none a control
  // character, DEL, '"' or '\\', the last possibly cut short (what a JSON string reads in a loop; plain
  // tokens are text).
  enum class TokenClass { kPlain, kText };
  struct TokenClassIndex {
    std::vector<std::uint8_t> member;     // [text_tokens().size()] by position
    std::vector<std::uint32_t> next_out;  // [text_tokens().size()] the first position >= p not a member
    std::vector<std::uint32_t> begin;     // [257] the members whose first byte is b: ids[begin[b] .. begin[b + 1])
    std::vector<TokenId> ids;
    std::vector<std::uint32_t> bits;      // [n_mask_words()] the members as a mask
    // [256] the members whose first byte is b as a mask, for the groups with more members than mask
    // words (else empty): a walk or-s them in instead of copying their ids.
    std::vector<std::vector<std::uint32_t>> group_bits;
    // kText only: per position, the member's length in characters, a cut-short last one included (0 for
    // non-members), and up_to[n]: the members of at most n characters as a mask, for n up to the longest
    // member's length (at most kMaxRunChars).
    std::vector<std::uint32_t> chars;
    std::vector<std::vector<std::uint32_t>> up_to;
    // The first position >= p that is not a member of at most up_to.size() - 1 characters.
    std::vector<std::uint32_t> next_out_of_run;
    // [text_tokens().size()] by position: the first byte from which the rest of the token would be a
    // member (0 for members; the token's length when no non-empty rest is): a walk that reaches a
    // configuration looping on the class at that depth or later accepts the token without reading on.
    std::vector<std::uint32_t> member_from;
    // from_depth[d], d < kReadWholeDepths: bit p % 64 of word p / 64 set when member_from[p] <= d and byte d
    // starts a character (or ends the token): the tokens a loop on the class reached at depth d reads
    // whole, found a word at a time.
    std::vector<std::vector<std::uint64_t>> from_depth;
  };
  // The loop depths for which the indexes below keep bitsets of the tokens read whole.
  static constexpr std::size_t kReadWholeDepths = 8;
  static constexpr std::size_t kMaxRunChars = 32;
  // Plain bytes: printable ASCII other than '"' and '\\' (DEL, which JSON strings allow but grammars often
  // exclude, is not: the few tokens with it are walked).
  static constexpr std::array<std::pair<unsigned, unsigned>, 3> kPlainRanges = {{{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E}}};
  static constexpr bool is_plain_byte(unsigned b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }
  const TokenClassIndex& token_class(TokenClass c) const { return c == TokenClass::kPlain ? plain_ : text_; }
  // The ASCII bytes of text_tokens()[p] as a set (bit b of word b / 64), and how its other bytes
  // stand: none, whole UTF-8 characters (well-formed; the last may be cut short), or other bytes. A walk
  // in a configuration that loops on a set of ASCII bytes reads a token whole when its ASCII bytes are
  // all in the set and it has no other bytes; also with whole characters when the configuration loops on
  // every multi-byte character too (and the rest starts at a character boundary).
  enum class NonAscii : std::uint8_t { kNone, kCharacters, kOther };
  const std::array<std::uint64_t, 2>& ascii_bytes(std::size_t p) const { return ascii_bytes_[p]; }
  NonAscii non_ascii(std::size_t p) const { return non_ascii_[p]; }
  // Whether text_tokens()[p] is made only of ASCII bytes of `set` (bit b of word b / 64).
  bool made_of(std::size_t p, const std::array<std::uint64_t, 2>& set) const {
    const std::array<std::uint64_t, 2>& used = ascii_bytes_[p];
    return non_ascii_[p] == NonAscii::kNone && (used[0] & ~set[0]) == 0 && (used[1] & ~set[1]) == 0;
  }
  // The tokens made only of the ASCII bytes of a set, for walks that start in a configuration looping
  // on the set or starting a bounded run over it (a counted repetition of a character class): they are
  // accepted at once, as a mask, and the walk jumps over them.
  struct AsciiSetIndex {
    std::array<std::uint64_t, 2> set{};
    std::vector<std::uint8_t> length;     // [text_tokens().size()] a member's length (at most 255); 0 for others
    std::vector<std::uint32_t> next_out;  // [text_tokens().size()] the first position >= p not a member
    // [text_tokens().size()] the first byte from which the rest of the token is made of the set (the
    // token's length when its last byte is not; 255 stands for 255 or more): a walk that reaches a
    // configuration looping on the set at that depth or later accepts the token without reading on.
    std::vector<std::uint8_t> member_from;
    // from_depth[d], d < kReadWholeDepths: bit p % 64 of word p / 64 set when member_from[p] <= d, so that
    // a walk finds a run of tokens read whole from a loop on the set at depth d a word at a time; and
    // from_depth_chars[d], for a loop on the set and every multi-byte character: also the tokens of whole
    // characters (non_ascii) whose rest from byte d starts a character and has its ASCII bytes
    // in the set.
    std::vector<std::vector<std::uint64_t>> from_depth, from_depth_chars;
    std::size_t max_length = 0;           // the longest member's length
    std::vector<std::uint32_t> all;       // [n_mask_words()] every member
    // up_to[n]: the members of at most n bytes, for n up to min(max_length, kMaxSetRunBytes); and fits[n]
    // the same by position (bit p % 64 of word p / 64), where a walk finds the end of a run of them.
    std::vector<std::vector<std::uint32_t>> up_to;
    std::vector<std::vector<std::uint64_t>> fits;
  };
  static constexpr std::size_t kMaxSetRunBytes = 32;
  // The index of `set` (bit b of word b / 64; NUL is never a member byte), built when it is asked for
  // the kAsciiSetIndexAfter-th time and kept for the vocabulary's lifetime, for up to
  // kMaxAsciiSetIndexes sets; nullptr before, and past them (the walk checks each token instead).
  // Thread-safe. With `count` false, only an index built already is returned, and the question does
  // not count towards building one (for walks that gain little from it).
  static constexpr std::size_t kMaxAsciiSetIndexes = 32;
  static constexpr std::uint32_t kAsciiSetIndexAfter = 4;
  std::shared_ptr<const AsciiSetIndex> ascii_set_index(const std::array<std::uint64_t, 2>& set,
                                                       bool count = true) const;
  // The bytes of text_tokens()[p], stored contiguously in sorted order (walks touch memory in order).
  std::size_t sorted_token_size(std::size_t p) const { return sorted_offset_[p + 1] - sorted_offset_[p]; }
  std::string_view sorted_token(std::size_t p) const {
    return {sorted_bytes_.data() + sorted_offset_[p], sorted_offset_[p + 1] - sorted_offset_[p]};  // no range check: hot
  }
  // The ids of a large first-byte group (at least kMinMaskedGroup tokens: Llama 3.1's 57,875 that start
  // with a space) as a mask; empty for the others. A table that accepts most of such a group takes the
  // mask less the ids it rejects (fewer ids to set one by one).
  static constexpr std::size_t kMinMaskedGroup = 8192;
  const std::vector<std::uint32_t>& first_byte_mask(std::uint8_t b) const { return first_byte_masks_[b]; }
  // The same, sparse, for a first-byte group of at least kMinWordGroup tokens (else empty): the mask words
  // its ids fall in, ascending (group_words), the group's bits in each (group_word_bits), and per sorted
  // position of the group, the index in those of its id's word (word_of_position).
  static constexpr std::size_t kMinWordGroup = 64;
  std::span<const std::uint32_t> group_words(std::uint8_t b) const {
    return {group_words_.data() + group_word_begin_[b], group_word_begin_[b + 1] - group_word_begin_[b]};
  }
  std::span<const std::uint32_t> group_word_bits(std::uint8_t b) const {
    return {group_word_bits_.data() + group_word_begin_[b], group_word_begin_[b + 1] - group_word_begin_[b]};
  }
  const std::uint32_t* word_of_position() const { return word_of_position_.data(); }
  // Tokens longer than kShortTokenBytes: few (1,312 of Llama 3.1's 128,000 text tokens). States that read
  // every string of at most that many bytes alike classify the shorter tokens alike, so their tables
  // differ only in these (derive_token_table walks only them). Their sorted positions, ascending, and
  // long_token_lcp()[k]: the length of the common prefix of long tokens k - 1 and k (0 for k = 0).
  static constexpr std::size_t kShortTokenBytes = 16;
  const std::vector<std::uint32_t>& long_tokens() const { return long_tokens_; }
  const std::vector<std::uint32_t>& long_token_lcp() const { return long_token_lcp_; }
  // The first position after p whose token does not start with the first d + 1 bytes of
  // text_tokens()[p] (d < its length): a walk that fails at byte d skips the whole run in one step.
  std::uint32_t subtree_end(std::size_t p, std::size_t d) const { return subtree_end_[sorted_offset_[p] + d]; }

 private:
  std::size_t n_rows_ = 0;
  std::uint64_t hash_ = 0;
  std::vector<TokenId> sorted_;
  std::vector<std::uint32_t> lcp_;
  std::vector<std::uint32_t> first_byte_begin_;
  std::size_t max_length_ = 0;
  std::string sorted_bytes_;
  std::vector<std::uint32_t> sorted_offset_;  // [text_tokens().size() + 1]
  std::vector<std::uint32_t> subtree_end_;    // [sorted_bytes_.size()], by the offsets of sorted_offset_
  std::vector<std::array<std::uint64_t, 2>> ascii_bytes_;  // [text_tokens().size()]
  std::vector<NonAscii> non_ascii_;                        // [text_tokens().size()]
  std::vector<std::uint32_t> long_tokens_, long_token_lcp_;
  std::array<std::vector<std::uint32_t>, 256> first_byte_masks_;
  std::vector<std::uint32_t> group_word_begin_, group_words_, group_word_bits_;  // [257], then by group
  std::vector<std::uint32_t> word_of_position_;                                 // [text_tokens().size()]
  TokenClassIndex plain_, text_;
  struct AsciiSetIndexes;  // ascii_set_index's (vocabulary_index.cpp)
  std::size_t n_mask_words_ = 0;
  std::unique_ptr<AsciiSetIndexes> ascii_set_indexes_;
};

}  // namespace pse
