// The vocabulary a grammar is compiled against: plain data (token id -> raw bytes, special ids,
// end-of-sequence ids, the number of logits rows). pse never links a tokenizer: the engine (or any other
// host) fills a Vocabulary from its own. Preprocessing (tokens sorted by bytes, first-byte index) happens
// once in the constructor and is shared, read-only, by every grammar compiled against it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pse/error.h"

namespace pse {

using TokenId = std::int32_t;

class Vocabulary {
 public:
  // token_bytes[i]: the raw bytes token i produces in the middle of a text. special_ids: tokens that
  // are never text (control tokens); they are never allowed, except the eos_ids when the grammar may
  // stop. n_rows: rows of the model's logits (>= token_bytes.size(); 0 means token_bytes.size()); the
  // padded rows past the tokenizer are never allowed. A non-special token with no bytes is never
  // allowed (it would not advance the output). Throws InputError on an id out of range or n_rows too
  // small.
  Vocabulary(std::vector<std::string> token_bytes, std::vector<TokenId> special_ids,
             std::vector<TokenId> eos_ids, std::size_t n_rows = 0);

  std::size_t n_tokens() const { return tokens_.size(); }  // the tokenizer's size
  std::size_t n_rows() const { return n_rows_; }           // logits rows, >= n_tokens()
  std::size_t n_mask_words() const { return (n_rows_ + 31) / 32; }
  // Throws InputError when id is outside [0, n_rows()); padded rows have no bytes.
  const std::string& token_bytes(TokenId id) const;
  bool is_special(TokenId id) const;  // control tokens and eos ids; false for padded rows
  bool is_eos(TokenId id) const;
  const std::vector<TokenId>& eos_ids() const { return eos_ids_; }
  // A 64-bit content hash (bytes, specials, eos, rows): the compile cache's vocabulary identity.
  std::uint64_t hash() const { return hash_; }

  // Preprocessed views, for the compiler and matcher. text_tokens: every non-special token with bytes,
  // sorted by bytes; lcp[i]: the length of the common prefix of text_tokens[i-1] and text_tokens[i]
  // (lcp[0] = 0); first_byte_begin[b]..first_byte_begin[b+1]: the positions whose first byte is b.
  const std::vector<TokenId>& text_tokens() const { return sorted_; }
  const std::vector<std::uint32_t>& lcp() const { return lcp_; }
  const std::vector<std::uint32_t>& first_byte_begin() const { return first_byte_begin_; }  // [257]
  std::size_t max_token_length() const { return max_length_; }
  // Plain text: printable ASCII other than '"' and '\\' (what JSON strings, and most free-text rules, read
  // in a loop). is_plain_byte(b); plain[p]: every byte of text_tokens()[p] is plain; the ids of the plain
  // tokens whose first byte is b: plain_ids()[plain_begin()[b] .. plain_begin()[b + 1]).
  static bool is_plain_byte(unsigned b) { return b >= 0x20 && b < 0x80 && b != '"' && b != '\\'; }
  const std::vector<std::uint8_t>& plain() const { return plain_; }
  const std::vector<std::uint32_t>& plain_begin() const { return plain_begin_; }  // [257]
  const std::vector<TokenId>& plain_ids() const { return plain_ids_; }
  // The bytes of text_tokens()[p], stored contiguously in sorted order (walks touch memory in order).
  std::string_view sorted_token(std::size_t p) const {
    return std::string_view(sorted_bytes_).substr(sorted_offset_[p], sorted_offset_[p + 1] - sorted_offset_[p]);
  }

 private:
  std::vector<std::string> tokens_;
  std::vector<std::uint8_t> kind_;  // 0 text, 1 special, 2 eos
  std::vector<TokenId> eos_ids_;
  std::size_t n_rows_ = 0;
  std::uint64_t hash_ = 0;
  std::vector<TokenId> sorted_;
  std::vector<std::uint32_t> lcp_;
  std::vector<std::uint32_t> first_byte_begin_;
  std::size_t max_length_ = 0;
  std::string sorted_bytes_;
  std::vector<std::uint32_t> sorted_offset_;  // [text_tokens().size() + 1]
  std::vector<std::uint8_t> plain_;
  std::vector<std::uint32_t> plain_begin_;
  std::vector<TokenId> plain_ids_;
};

}  // namespace pse
