// States of one rule that read the same byte strings the same way, up to a horizon, get the same token
// table: a token table only depends on what the state's rule (and the rules it calls) can read from the
// state for as many bytes as the longest token. Front-ends repeat structure freely (the characters of a
// JSON string after each position of a trie of excluded keys, every copy of an inlined sub-expression),
// so many states have the same future; one table serves each class.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "automaton.h"

namespace pse::detail {

// Class ids per state (dense, from 0): two states share a class only when they belong to the same rule
// and, for every byte string of at most `horizon` bytes, reading it from either reaches the rule's end at
// the same depths and dies (or not) at the same byte, with the same calls on the way (Moore's partition
// refinement, stopped at `horizon` rounds or when stable). States whose epsilon closure is larger than
// `max_closure` stay alone in their class (the refinement would cost more than it saves), and so do the
// states marked distinct (Automaton::distinct: a minimal DFA's, already known apart) and those whose
// closure reads whole tokens (token edges).
// Throws LimitError when `deadline` (if given) passes. With `coarse`, also the classes at `coarse_horizon`
// rounds (at most `horizon`; the returned ones refine them), found on the way.
std::vector<std::uint32_t> future_classes(const Automaton& a, std::size_t horizon, std::size_t max_closure = 256,
                                          const Deadline* deadline = nullptr,
                                          std::size_t coarse_horizon = 0, std::vector<std::uint32_t>* coarse = nullptr);

// The same for the states [lo, hi) only, which must be whole rules (each rule's states are contiguous,
// and no edge leaves its rule, so the classes of a rule depend on it alone): class ids dense from 0,
// per state from lo. Classes can then be found rule by rule, as the rules are needed.
std::vector<std::uint32_t> future_classes(const Automaton& a, std::uint32_t lo, std::uint32_t hi, std::size_t horizon,
                                          std::size_t max_closure = 256,
                                          const Deadline* deadline = nullptr,
                                          std::size_t coarse_horizon = 0, std::vector<std::uint32_t>* coarse = nullptr);

}  // namespace pse::detail
