// Token tables shared by every grammar compiled against one vocabulary. A state's table, built with
// only the byte-level follow filter (FollowFilter::kBytes), depends only on its rule, the rules that rule
// calls and the bytes that may follow the rule, so a rule whose closure is identical, state for state,
// and with the same follow bytes in two grammars has the same tables in both. JSON Schema grammars are
// made of a few such building blocks (strings, numbers, any value, whitespace): after the first schemas,
// a new schema builds only the tables of its own structure (its keys, enums, patterns).
// Process-wide, bounded in memory (least recently used rules evicted), thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "automaton.h"
#include "token_table.h"

namespace pse::detail {

// A rule's closure written canonically: its states, then those of the rules it calls in order of first
// call, edges relative to each rule's first state, callees by that order; then the rule's follow bytes.
// Equal vectors, equal tables.
using RuleClosure = std::vector<std::uint32_t>;

// The canonical closure of `rule` in `a`, or nullptr when the closure has more than `max_states` states.
std::shared_ptr<const RuleClosure> rule_closure(const Automaton& a, std::uint32_t rule, std::size_t max_states = 4096);

class TableCache {
 public:
  explicit TableCache(std::size_t max_bytes = kMaxBytes) : max_bytes_(max_bytes) {}
  static TableCache& instance();

  // One rule's shared tables, by state offset from the rule's first state.
  struct RuleTables {
    std::shared_ptr<const RuleClosure> closure;
    std::mutex mutex;
    std::unordered_map<std::uint32_t, std::shared_ptr<const TokenTable>> by_offset;
    std::size_t bytes = 0;  // of the closure and the tables in by_offset (under mutex)
    bool evicted = false;   // no longer counted in the cache (under the cache's mutex)
  };

  // The entry of a rule with this closure under this vocabulary, created empty when absent.
  std::shared_ptr<RuleTables> rule(std::uint64_t vocabulary_hash, const std::shared_ptr<const RuleClosure>& closure);
  // Adds a table to an entry (kept when another thread added one first) and evicts the least recently
  // used rules past the memory bound. Returns the table in the entry.
  std::shared_ptr<const TokenTable> add(RuleTables& rule, std::uint32_t offset, TokenTable table);

  // What an entry for `closure` counts before any table is added (the closure it holds).
  static std::size_t entry_bytes(const RuleClosure& closure);

  void clear();
  std::size_t bytes() const;  // of the tables and closures of the rules in the cache
  // A new bound; rules past it are evicted at once.
  void set_max_bytes(std::size_t max_bytes);

  // Tables and closures together (a MaskBench dev run fills it; 256 MiB read a few percent slower at p99,
  // within the VM's noise).
  static constexpr std::size_t kMaxBytes = std::size_t{512} << 20;

 private:
  struct Key {
    std::uint64_t vocabulary, closure;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const { return static_cast<std::size_t>(k.vocabulary * 0x9e3779b97f4a7c15ULL ^ k.closure); }
  };
  // Evicts the least recently used rules while bytes_ is over the bound (mutex_ held).
  void evict_past_bound();
  std::size_t max_bytes_;  // (under mutex_)
  mutable std::mutex mutex_;
  std::size_t bytes_ = 0;
  struct Slot {
    std::vector<std::shared_ptr<RuleTables>> rules;  // closures with the same hash (collisions)
    std::list<Key>::iterator use;                    // its place in lru_
  };
  std::unordered_map<Key, Slot, KeyHash> slots_;
  std::list<Key> lru_;  // most recently used first: eviction takes the back in constant time
};

}  // namespace pse::detail
