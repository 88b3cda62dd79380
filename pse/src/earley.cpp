#include "earley.h"

namespace pse::detail {

namespace {
constexpr std::uint64_t kEmptySlot = ~0ULL;
inline std::uint64_t key_of(std::uint32_t s, std::uint32_t o) {
  return (static_cast<std::uint64_t>(o) << 32) | s;
}
inline std::uint64_t hash_key(std::uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}
}  // namespace

void Chart::clear_dedup() {
  for (std::uint32_t h : used_) table_[h] = kEmptySlot;
  used_.clear();
}

void Chart::add(std::uint32_t state, std::uint32_t origin) {
  // Small sets: linear scan of the open set; larger ones: the hash table (built on demand).
  const std::size_t begin = set_begin_.back();
  const std::size_t size = items_.size() - begin;
  if (size < 24) {
    for (std::size_t i = begin; i < items_.size(); ++i)
      if (items_[i].state == state && items_[i].origin == origin) return;
    items_.push_back({state, origin});
    return;
  }
  if (table_.size() < size * 4) {
    std::size_t cap = 64;
    while (cap < size * 8) cap <<= 1;
    table_.assign(cap, kEmptySlot);
    used_.clear();
    for (std::size_t i = begin; i < items_.size(); ++i) {
      std::uint64_t k = key_of(items_[i].state, items_[i].origin);
      std::size_t h = hash_key(k) & (cap - 1);
      while (table_[h] != kEmptySlot) h = (h + 1) & (cap - 1);
      table_[h] = k;
      used_.push_back(static_cast<std::uint32_t>(h));
    }
  } else if (used_.size() != size) {
    // The table belongs to an older set: rebuild it for this one.
    clear_dedup();
    for (std::size_t i = begin; i < items_.size(); ++i) {
      std::uint64_t k = key_of(items_[i].state, items_[i].origin);
      std::size_t h = hash_key(k) & (table_.size() - 1);
      while (table_[h] != kEmptySlot) h = (h + 1) & (table_.size() - 1);
      table_[h] = k;
      used_.push_back(static_cast<std::uint32_t>(h));
    }
  }
  const std::uint64_t k = key_of(state, origin);
  std::size_t h = hash_key(k) & (table_.size() - 1);
  while (table_[h] != kEmptySlot) {
    if (table_[h] == k) return;
    h = (h + 1) & (table_.size() - 1);
  }
  table_[h] = k;
  used_.push_back(static_cast<std::uint32_t>(h));
  items_.push_back({state, origin});
}

void Chart::close(std::size_t from) {
  const Automaton& a = *a_;
  const std::uint32_t k = static_cast<std::uint32_t>(set_begin_.size() - 1);  // the open set
  for (std::size_t i = from; i < items_.size(); ++i) {
    const Item it = items_[i];
    const std::uint32_t s = it.state;
    for (std::uint32_t e = a.eps_begin[s]; e < a.eps_begin[s + 1]; ++e) add(a.eps_edges[e], it.origin);
    for (std::uint32_t e = a.call_begin[s]; e < a.call_begin[s + 1]; ++e) {
      const CallEdge& c = a.call_edges[e];
      add(a.rule_start[c.rule], k);
      // Aycock-Horspool: a nullable callee may complete right here; advance over it at once.
      if (a.rule_nullable[c.rule]) add(c.target, it.origin);
    }
    if (a.rule_final[a.state_rule[s]] == s) {
      const std::uint32_t rule = a.state_rule[s];
      const std::size_t ob = set_begin_[it.origin];
      const std::size_t oe = it.origin == k ? items_.size() : set_begin_[it.origin + 1];
      for (std::size_t j = ob; j < oe; ++j) {
        const Item w = items_[j];
        for (std::uint32_t e = a.call_begin[w.state]; e < a.call_begin[w.state + 1]; ++e) {
          if (a.call_edges[e].rule == rule) add(a.call_edges[e].target, w.origin);
        }
      }
    }
  }
}

void Chart::reset(std::uint32_t start) {
  items_.clear();
  set_begin_.assign(1, 0);  // the open set 0 begins at 0
  clear_dedup();
  items_.push_back({start, 0});
  close(0);
  set_begin_.push_back(static_cast<std::uint32_t>(items_.size()));
}

void Chart::reset_detached(std::span<const std::uint32_t> starts) {
  items_.clear();
  set_begin_.assign(2, 0);  // set 0 empty; the open set 1 begins at 0
  clear_dedup();
  for (std::uint32_t s : starts) add(s, 0);
  close(0);
  set_begin_.push_back(static_cast<std::uint32_t>(items_.size()));
}

bool Chart::last_has_any_final_at_origin0() const {
  for (const Item& it : last())
    if (it.origin == 0 && a_->is_final(it.state)) return true;
  return false;
}

bool Chart::push(std::uint8_t byte) {
  const Automaton& a = *a_;
  const std::size_t prev_begin = set_begin_[set_begin_.size() - 2];
  const std::size_t prev_end = set_begin_.back();
  // The open set starts at items_.size(); set_begin_.back() marks it while it is built.
  clear_dedup();
  for (std::size_t i = prev_begin; i < prev_end; ++i) {
    const Item it = items_[i];
    for (std::uint32_t e = a.byte_begin[it.state]; e < a.byte_begin[it.state + 1]; ++e) {
      const ByteEdge& be = a.byte_edges[e];
      if (byte >= be.lo && byte <= be.hi) add(be.target, it.origin);
    }
  }
  if (items_.size() == prev_end) return false;
  close(prev_end);
  set_begin_.push_back(static_cast<std::uint32_t>(items_.size()));
  return true;
}

bool Chart::scan_token(std::size_t from, std::span<const std::uint8_t> in_set, bool join_last) {
  const Automaton& a = *a_;
  const std::size_t from_begin = set_begin_[from], from_end = set_begin_[from + 1];
  const std::size_t before = items_.size();
  // Reopen the last set (its end marker off), or open a new one; either way the dedup table starts
  // afresh for it (add rebuilds it from the set's items).
  if (join_last) set_begin_.pop_back();
  clear_dedup();
  for (std::size_t i = from_begin; i < from_end; ++i) {
    const Item it = items_[i];
    for (std::uint32_t e = a.token_begin[it.state]; e < a.token_begin[it.state + 1]; ++e) {
      const TokenEdge& te = a.token_edges[e];
      if (in_set[te.set] != 0) add(te.target, it.origin);
    }
  }
  const bool read = items_.size() != before;
  // (Closing only the new items is enough: a rule they call that completes in this set without input is
  // nullable, which close() advances over at the call itself.)
  if (read) close(before);
  if (read || join_last) set_begin_.push_back(static_cast<std::uint32_t>(items_.size()));
  return read;
}

bool Chart::last_has_tokens() const {
  for (const Item& it : last())
    if (a_->has_tokens(it.state)) return true;
  return false;
}

bool Chart::last_has_final(std::uint32_t rule, std::uint32_t origin) const {
  const std::uint32_t f = a_->rule_final[rule];
  for (const Item& it : last())
    if (it.state == f && it.origin == origin) return true;
  return false;
}

}  // namespace pse::detail
