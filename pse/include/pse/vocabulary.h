// The vocabulary a grammar is compiled against: plain data (token id -> raw bytes, special ids,
// end-of-sequence ids, the number of logits rows). pse never links a tokenizer: the engine (or any other
// host) fills a Vocabulary from its own. Preprocessing (VocabularyIndex: tokens sorted by bytes, first-byte
// and class indexes) happens once in the constructor and is shared, read-only, by every grammar compiled
// against it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pse/error.h"

namespace pse {

using TokenId = std::int32_t;

class VocabularyIndex;

class Vocabulary {
 public:
  // token_bytes[i]: the raw bytes token i produces in the middle of a text. special_ids: tokens that
  // are never text (control tokens); they are allowed only where a grammar names them (a token
  // terminal, Expr::kToken), and the eos_ids when the grammar may stop. A special token's bytes are its
  // name (`<|eot_id|>`, possibly empty), by which a grammar may name it; never text. n_rows: rows of the model's logits (>= token_bytes.size(); 0 means token_bytes.size()); the
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
  // The token whose bytes (a special token's: its name) are exactly `bytes`, a special one first; none
  // for empty bytes.
  std::optional<TokenId> find_token(std::string_view bytes) const;
  // The longest text (non-special) token whose bytes begin `text`; none when no token does. Engines use
  // it to spell forced text in tokens (jump-forward). O(length of the match x log of the vocabulary).
  std::optional<TokenId> longest_text_prefix(std::string_view text) const;
  const std::vector<TokenId>& special_ids() const { return special_ids_; }  // ascending, eos ids included
  bool is_eos(TokenId id) const;
  const std::vector<TokenId>& eos_ids() const { return eos_ids_; }
  // A 64-bit content hash (bytes, specials, eos, rows): the compile cache's vocabulary identity.
  std::uint64_t hash() const { return hash_; }

  // pse's preprocessed views of these tokens (sorted, indexed by first byte and by class), built once here
  // and shared by copies: what the compiler and matcher walk (pse/src/vocabulary_index.h), not API.
  const VocabularyIndex& index() const { return *index_; }

 private:
  std::vector<std::string> tokens_;
  std::vector<std::uint8_t> kind_;  // 0 text, 1 special, 2 eos
  std::vector<TokenId> special_ids_;
  std::vector<TokenId> eos_ids_;
  std::size_t n_rows_ = 0;
  std::uint64_t hash_ = 0;
  std::shared_ptr<const VocabularyIndex> index_;
};

}  // namespace pse
