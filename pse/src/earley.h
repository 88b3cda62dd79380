// An Earley recognizer over the byte automaton: item (state, origin); one set per byte read. The sets
// live in one flat array so that pushing a byte and popping back (mask walks, rollback) are cheap.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "automaton.h"

namespace pse::detail {

struct Item {
  std::uint32_t state = 0;
  std::uint32_t origin = 0;
};

class Chart {
 public:
  explicit Chart(const Automaton* automaton = nullptr) : a_(automaton) {}
  Chart(const Chart& other) : a_(other.a_), items_(other.items_), set_begin_(other.set_begin_) {}
  Chart& operator=(const Chart& other) {
    a_ = other.a_;
    items_ = other.items_;
    set_begin_ = other.set_begin_;
    return *this;
  }

  // Set 0 becomes the closure of (start, 0); everything else is dropped.
  void reset(std::uint32_t start);
  // Detached start, for walks from a state in the middle of a rule: set 0 is empty and set 1 is the
  // closure of (s, 0) for every s in starts, so an item (final, 0) is exactly a start item's rule
  // ending (a rule called again inside has origin >= 1). Byte depth = n_sets() - 2.
  void reset_detached(std::span<const std::uint32_t> starts);
  // True when the last set holds the final state of any rule with origin 0.
  bool last_has_any_final_at_origin0() const;
  // Reads one byte: appends the next set and returns true, or returns false (chart unchanged) when no
  // item can read it.
  bool push(std::uint8_t byte);
  // Reads one whole token through the token edges of the items of set `from` whose token set s has
  // in_set[s] != 0: when `join_last` (the token's bytes were read from `from` too), the items they lead
  // to join the last set, else they make a new set. Returns false (chart unchanged) when no edge reads
  // it.
  bool scan_token(std::size_t from, std::span<const std::uint8_t> in_set, bool join_last);
  // Some item of the last set reads whole tokens.
  bool last_has_tokens() const;
  // Keeps the first n_sets sets (n_sets >= 1).
  void truncate(std::size_t n_sets) {
    items_.resize(set_begin_[n_sets]);
    set_begin_.resize(n_sets + 1);
  }
  std::size_t n_sets() const { return set_begin_.size() - 1; }
  std::span<const Item> set(std::size_t k) const {
    return {items_.data() + set_begin_[k], set_begin_[k + 1] - set_begin_[k]};
  }
  std::span<const Item> last() const { return set(n_sets() - 1); }
  // True when the last set holds (final state of `rule`, origin).
  bool last_has_final(std::uint32_t rule, std::uint32_t origin) const;
  std::size_t memory_bytes() const { return items_.capacity() * sizeof(Item) + set_begin_.capacity() * 4; }

 private:
  void add(std::uint32_t state, std::uint32_t origin);
  void clear_dedup();  // empties the dedup table (for a new open set)
  void close(std::size_t from);  // closure of the open set, from item index `from`

  const Automaton* a_ = nullptr;
  std::vector<Item> items_;
  std::vector<std::uint32_t> set_begin_;  // [n_sets + 1]; the last entry is items_.size()
  // Dedup of the set being built: open addressing on (state, origin); not part of the value.
  std::vector<std::uint64_t> table_;
  std::vector<std::uint32_t> used_;
};

}  // namespace pse::detail
