// The byte-level recursive transition network a Grammar compiles to: one small NFA per rule, whose
// edges read a byte range, read one whole token of a token set (kToken), call another rule (and continue
// at a return state), or move without input.
// Every state left in it can reach its rule's final state (dead states and unproductive rules are
// pruned), so any live parse state has a valid completion: the soundness of the masks rests on that.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "deadline.h"
#include "pse/grammar.h"

namespace pse::detail {

struct ByteEdge {
  std::uint8_t lo = 0;
  std::uint8_t hi = 0;
  std::uint32_t target = 0;
};

// Reads one whole token of token set `set` (Automaton::token_sets) as a single step, whatever its bytes.
struct TokenEdge {
  std::uint32_t set = 0;
  std::uint32_t target = 0;
};

struct CallEdge {
  std::uint32_t rule = 0;
  std::uint32_t target = 0;  // where the caller continues once the rule is complete
};

using ByteSet = std::array<std::uint64_t, 4>;
inline bool byte_set_has(const ByteSet& s, unsigned b) { return (s[b >> 6] >> (b & 63)) & 1; }

struct AutomatonLimits {
  std::size_t max_states = 2'000'000;
  std::size_t max_expr_depth = 10'000;
  Deadline deadline;
};

struct Automaton {
  // Per state (CSR): outgoing byte, token, call and epsilon edges; the rule it belongs to.
  std::vector<std::uint32_t> byte_begin, token_begin, call_begin, eps_begin;  // [n_states + 1]
  std::vector<ByteEdge> byte_edges;
  std::vector<TokenEdge> token_edges;
  // The grammar's kToken expressions the token edges read, one per set (resolved against the vocabulary
  // by the compiler).
  std::vector<ExprId> token_sets;
  std::vector<CallEdge> call_edges;
  std::vector<std::uint32_t> eps_edges;
  std::vector<std::uint32_t> state_rule;  // [n_states]
  std::vector<std::uint8_t> reachable;    // [n_states] from the root's start, through live edges
  // [n_states] states of a graph with distinct states (Expr::distinct_states), emitted once: each keeps
  // a token table of its own (state_classes.h).
  std::vector<std::uint8_t> distinct;
  // Per rule: start and final state, whether it derives the empty string, the bytes that may follow it.
  std::vector<std::uint32_t> rule_start, rule_final;
  std::vector<std::uint8_t> rule_nullable;
  std::vector<ByteSet> rule_follow;
  // Per rule: the states its callers continue at once it is complete, and transitively, when such a
  // state can reach its own rule's end without input, those of that rule's callers (empty when there
  // are more than kMaxContexts: the follow check is then skipped).
  std::vector<std::vector<std::uint32_t>> rule_contexts;
  static constexpr std::size_t kMaxContexts = 4096;
  std::uint32_t root = 0;

  std::size_t n_states() const { return state_rule.size(); }
  bool is_final(std::uint32_t s) const { return rule_final[state_rule[s]] == s; }
  bool has_bytes(std::uint32_t s) const { return byte_begin[s] != byte_begin[s + 1]; }
  bool has_tokens(std::uint32_t s) const { return token_begin[s] != token_begin[s + 1]; }
  std::size_t memory_bytes() const;
};

// Builds the automaton of a validated grammar. Throws GrammarError when the language is empty,
// LimitError past limits (states, expression depth, deadline).
Automaton build_automaton(const Grammar& grammar, const AutomatonLimits& limits);

}  // namespace pse::detail
