// Token terminals (Expr::kToken) resolved against a vocabulary: per token set of an automaton, the token
// ids its edges read. Names are looked up by bytes (Vocabulary::find_token); a negated set reads every
// other token that may be allowed at all (text tokens and special tokens, never an end-of-sequence id,
// which only ends the output, nor a padded row).
#pragma once

#include <cstdint>
#include <vector>

#include "automaton.h"
#include "pse/grammar.h"
#include "pse/vocabulary.h"

namespace pse::detail {

struct TokenSetMask {
  static constexpr std::size_t kMaxListed = 64;
  std::vector<std::uint32_t> bits;  // [n_mask_words] bit i % 32 of word i / 32: token i is read
  std::vector<TokenId> ids;         // the same ids ascending when at most kMaxListed; else empty
  bool contains(TokenId id) const {
    const auto i = static_cast<std::size_t>(id);
    return i / 32 < bits.size() && ((bits[i / 32] >> (i % 32)) & 1) != 0;
  }
};

// One per automaton.token_sets, in order. Throws GrammarError naming the token expression when a name
// matches no token, an id is outside the vocabulary, or a set reads no token at all.
std::vector<TokenSetMask> resolve_token_sets(const Grammar& grammar, const Automaton& automaton,
                                             const Vocabulary& vocabulary);

}  // namespace pse::detail
