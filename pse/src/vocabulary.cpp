#include "pse/vocabulary.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "vocabulary_index.h"

namespace pse {

namespace {

std::uint64_t fnv1a(std::uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<TokenId> special_ids,
                       std::vector<TokenId> eos_ids, std::size_t n_rows)
    : tokens_(std::move(token_bytes)),
      kind_(tokens_.size(), 0) {
  n_rows_ = n_rows == 0 ? tokens_.size() : n_rows;
  if (n_rows_ < tokens_.size()) {
    throw InputError(fmt::format("[vocabulary] n_rows {} is smaller than the {} tokens", n_rows_,
                                 tokens_.size()));
  }
  if (n_rows_ > static_cast<std::size_t>(INT32_MAX)) {
    throw InputError(fmt::format("[vocabulary] n_rows {} exceeds the token id range", n_rows_));
  }
  auto check = [&](TokenId id, const char* what) {
    if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size()) {
      throw InputError(fmt::format("[vocabulary] {} id {} is outside [0, {})", what, id,
                                   tokens_.size()));
    }
  };
  for (TokenId id : special_ids) {
    check(id, "special");
    kind_[id] = 1;
  }
  std::sort(eos_ids.begin(), eos_ids.end());
  eos_ids.erase(std::unique(eos_ids.begin(), eos_ids.end()), eos_ids.end());
  for (TokenId id : eos_ids) {
    check(id, "end-of-sequence");
    kind_[id] = 2;
  }
  eos_ids_ = std::move(eos_ids);

  std::uint64_t h = 0xcbf29ce484222325ULL;
  h = mix(h, tokens_.size());
  h = mix(h, n_rows_);
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    h = mix(fnv1a(h, tokens_[i]), kind_[i] + 7 * tokens_[i].size());
  }
  hash_ = h;

  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    if (kind_[i] != 0) special_ids_.push_back(static_cast<TokenId>(i));
  }
  index_ = std::make_shared<const VocabularyIndex>(tokens_, kind_, n_mask_words());
}

const std::string& Vocabulary::token_bytes(TokenId id) const {
  static const std::string kEmpty;
  if (id < 0 || static_cast<std::size_t>(id) >= n_rows_) {
    throw InputError(fmt::format("[vocabulary] token id {} is outside [0, {})", id, n_rows_));
  }
  if (static_cast<std::size_t>(id) >= tokens_.size()) return kEmpty;
  return tokens_[id];
}

std::optional<TokenId> Vocabulary::find_token(std::string_view bytes) const {
  const VocabularyIndex& ix = *index_;
  if (bytes.empty()) return std::nullopt;
  for (const TokenId id : special_ids_)
    if (tokens_[id] == bytes) return id;
  // The text tokens sorted by bytes: a binary search over their positions.
  std::size_t lo = 0, hi = ix.text_tokens().size();
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (ix.sorted_token(mid) < bytes) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < ix.text_tokens().size() && ix.sorted_token(lo) == bytes) return ix.text_tokens()[lo];
  return std::nullopt;
}

std::optional<TokenId> Vocabulary::longest_text_prefix(std::string_view text) const {
  const VocabularyIndex& ix = *index_;
  // [lo, hi): the sorted text tokens that begin with text[0, d). Within it, a token of exactly d bytes
  // sorts first, then the others by their byte d; bytes compare as unsigned, as std::string orders them.
  std::size_t lo = 0, hi = ix.text_tokens().size();
  std::optional<TokenId> best;
  for (std::size_t d = 0; lo < hi; ++d) {
    if (ix.sorted_token_size(lo) == d) {
      if (d > 0) best = ix.text_tokens()[lo];
      ++lo;
      while (lo < hi && ix.sorted_token_size(lo) == d) ++lo;  // tokens with the same bytes
    }
    if (d == text.size() || lo == hi) break;
    const auto c = static_cast<unsigned char>(text[d]);
    const auto byte_at = [&](std::size_t p) { return static_cast<unsigned char>(ix.sorted_token(p)[d]); };
    std::size_t a = lo, b = hi;  // first position whose byte d is >= c
    while (a < b) {
      const std::size_t mid = a + (b - a) / 2;
      if (byte_at(mid) < c) a = mid + 1; else b = mid;
    }
    std::size_t e = a, f = hi;  // first position whose byte d is > c
    while (e < f) {
      const std::size_t mid = e + (f - e) / 2;
      if (byte_at(mid) <= c) e = mid + 1; else f = mid;
    }
    lo = a;
    hi = e;
  }
  return best;
}

bool Vocabulary::is_special(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < tokens_.size() && kind_[id] != 0;
}

bool Vocabulary::is_eos(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < tokens_.size() && kind_[id] == 2;
}

}  // namespace pse
