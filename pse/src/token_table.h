// Per automaton state that reads bytes: which text tokens are accepted whatever the parser stack holds
// (the token's bytes are all read inside the state's rule), which are rejected whatever it holds, and
// which are uncertain (they reach the end of the rule part-way, with a byte the rule may be followed
// by) and must be checked against the real stack at run time. XGrammar's adaptive token mask idea.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "automaton.h"
#include "pse/vocabulary.h"
#include "vocabulary_index.h"

namespace pse::detail {

// Uncertain tokens with, per token, the byte depths at which the current rule may be left with the
// rest of the token still to read (a view of a TokenTable or a ChainTable).
struct UncertainView {
  std::span<const std::uint32_t> uncertain, end_begin, end_depths;
};

struct TokenTable {
  // Accepted tokens: a bitset over the mask rows when many, else a sorted id list.
  std::vector<std::uint32_t> accepted_bits;  // [n_mask_words] or empty
  std::vector<TokenId> accepted_list;
  // Uncertain tokens as positions in VocabularyIndex::text_tokens() (sorted by bytes, so the run-time walk
  // shares prefixes).
  std::vector<std::uint32_t> uncertain;
  // For uncertain[i]: the byte depths at which the state's rule may end with the rest of the token left
  // to the caller: end_depths[end_begin[i] .. end_begin[i + 1]).
  std::vector<std::uint32_t> end_begin;
  std::vector<std::uint32_t> end_depths;
  std::size_t memory_bytes() const {
    return (accepted_bits.capacity() + accepted_list.capacity() + uncertain.capacity() + end_begin.capacity() +
            end_depths.capacity()) * 4;
  }
  UncertainView view() const { return {uncertain, end_begin, end_depths}; }
};

// A table's uncertain tokens resolved one caller further up: the rule was called by items that
// continue at `caller_returns` (states of one rule, called at the same position) once it is complete.
// Tokens whose rest is read inside the caller's rule (from one of them) are accepted; those whose rest
// may leave that rule too stay uncertain, with the new depths (for the next caller up); the others are
// rejected.
struct ChainTable {
  // Accepted tokens: a bitset over the mask rows when many (OR-ed word by word), else ascending ids.
  std::vector<std::uint32_t> accepted_bits;  // [n_mask_words] or empty
  std::vector<TokenId> accepted;
  std::vector<std::uint32_t> uncertain;  // positions in VocabularyIndex::text_tokens(), ascending
  std::vector<std::uint32_t> end_begin;  // [uncertain.size() + 1]
  std::vector<std::uint32_t> end_depths;
  UncertainView view() const { return {uncertain, end_begin, end_depths}; }
  std::size_t memory_bytes() const {
    return (accepted_bits.capacity() + accepted.capacity() + uncertain.capacity() + end_begin.capacity() +
            end_depths.capacity()) * 4;
  }
};

class StackDfa;

// How the walks read bytes: kAuto through a StackDfa (memoized steps; the Earley chart when its bounds
// are exceeded), kEarley through the Earley chart only (the reference the tests compare kAuto with).
enum class Walker { kAuto, kEarley };

// Classifies every text token for `state`. Throws LimitError when `deadline` (if given) passes.
// `shared`: a StackDfa of this automaton reused across calls (one thread at a time), so configurations
// met by earlier tables are not built again; nullptr: a fresh one.
// `follow`: which uncertain tokens to drop. kFull: those whose rest can follow the rule in none of its
// callers (a property of this grammar). kBytes: only those whose rest starts with a byte that never
// follows the rule; the table then depends only on the rule, the rules it calls and that byte set, so it
// can be shared with other grammars (table_cache.h), and apply_follow_filter finishes it.
enum class FollowFilter { kFull, kBytes };

TokenTable build_token_table(const Automaton& automaton, const Vocabulary& vocabulary,
                             std::uint32_t state,
                             const Deadline* deadline,
                             StackDfa* shared = nullptr, Walker walker = Walker::kAuto,
                             FollowFilter follow = FollowFilter::kFull);

// Deriving tables from tables. Two states of one rule that read every byte string of at most
// VocabularyIndex::kShortTokenBytes bytes alike (future_classes at that horizon: the positions of a counted
// repetition) classify every token that dies within that many bytes alike. long_tokens_read_far: the
// long tokens (VocabularyIndex::long_tokens) that `state` reads past that many bytes, ascending.
// derive_token_table: build_token_table's result for `state` from `base`, the table (built with the same
// `follow`) of such a state, and that state's long_tokens_read_far: only those are walked. Both throw
// LimitError when `deadline` (if given) passes.
std::vector<std::uint32_t> long_tokens_read_far(const Automaton& automaton, const Vocabulary& vocabulary,
                                                std::uint32_t state,
                                                const Deadline* deadline,
                                                StackDfa* shared = nullptr, Walker walker = Walker::kAuto);
TokenTable derive_token_table(const Automaton& automaton, const Vocabulary& vocabulary, std::uint32_t state,
                              const TokenTable& base, std::span<const std::uint32_t> read_far,
                              const Deadline* deadline, StackDfa* shared = nullptr,
                              Walker walker = Walker::kAuto, FollowFilter follow = FollowFilter::kFull);

// The full follow filter of build_token_table applied afterwards to a table built with kBytes (a shared
// table, see table_cache.h), for `state`'s rule in this grammar: drops the end depths whose rest can
// follow the rule in none of its callers, and the uncertain tokens left with none.
void apply_follow_filter(const Automaton& automaton, const Vocabulary& vocabulary, std::uint32_t state,
                         TokenTable& table, StackDfa* shared = nullptr);

ChainTable build_chain_table(const Automaton& automaton, const Vocabulary& vocabulary, UncertainView below,
                             std::span<const std::uint32_t> caller_returns, StackDfa* shared = nullptr,
                             Walker walker = Walker::kAuto);

}  // namespace pse::detail
