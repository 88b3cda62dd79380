#include "table_cache.h"

#include <algorithm>

#include "u32_hash.h"

namespace pse::detail {

std::shared_ptr<const RuleClosure> rule_closure(const Automaton& a, std::uint32_t r, std::size_t max_states) {
  // Discover the closure's rules in order of first call, bounded by its number of states.
  std::unordered_map<std::uint32_t, std::uint32_t> index{{r, 0}};
  std::vector<std::uint32_t> order{r};
  std::size_t n_states = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::uint32_t q = order[i];
    n_states += a.rule_final[q] - a.rule_start[q] + 1;
    if (n_states > max_states) return nullptr;
    for (std::uint32_t s = a.rule_start[q]; s <= a.rule_final[q]; ++s) {
      for (std::uint32_t e = a.call_begin[s]; e < a.call_begin[s + 1]; ++e) {
        const std::uint32_t callee = a.call_edges[e].rule;
        if (index.try_emplace(callee, static_cast<std::uint32_t>(order.size())).second) order.push_back(callee);
      }
    }
  }
  auto c = std::make_shared<RuleClosure>();
  c->reserve(n_states * 6);
  for (const std::uint32_t q : order) {
    const std::uint32_t base = a.rule_start[q];
    c->push_back(a.rule_final[q] - base + 1);
    for (std::uint32_t s = base; s <= a.rule_final[q]; ++s) {
      c->push_back(a.byte_begin[s + 1] - a.byte_begin[s]);
      for (std::uint32_t e = a.byte_begin[s]; e < a.byte_begin[s + 1]; ++e) {
        c->push_back(std::uint32_t{a.byte_edges[e].lo} << 8 | a.byte_edges[e].hi);
        c->push_back(a.byte_edges[e].target - base);
      }
      // Token edges: a byte walk stops at them, whatever their set (the tables do not depend on it).
      c->push_back(a.token_begin[s + 1] - a.token_begin[s]);
      for (std::uint32_t e = a.token_begin[s]; e < a.token_begin[s + 1]; ++e)
        c->push_back(a.token_edges[e].target - base);
      c->push_back(a.eps_begin[s + 1] - a.eps_begin[s]);
      for (std::uint32_t e = a.eps_begin[s]; e < a.eps_begin[s + 1]; ++e) c->push_back(a.eps_edges[e] - base);
      c->push_back(a.call_begin[s + 1] - a.call_begin[s]);
      for (std::uint32_t e = a.call_begin[s]; e < a.call_begin[s + 1]; ++e) {
        c->push_back(index.at(a.call_edges[e].rule));
        c->push_back(a.call_edges[e].target - base);
      }
    }
  }
  for (const std::uint64_t w : a.rule_follow[r]) {  // the bytes that may follow it (FollowFilter::kBytes)
    c->push_back(static_cast<std::uint32_t>(w));
    c->push_back(static_cast<std::uint32_t>(w >> 32));
  }
  return c;
}

TableCache& TableCache::instance() {
  static TableCache cache;
  return cache;
}

std::shared_ptr<TableCache::RuleTables> TableCache::rule(std::uint64_t vocabulary_hash,
                                                         const std::shared_ptr<const RuleClosure>& closure) {
  const Key key{vocabulary_hash, hash_u32s(*closure)};
  std::lock_guard<std::mutex> lock(mutex_);
  auto [at, fresh] = slots_.try_emplace(key);
  Slot& slot = at->second;
  if (fresh) {
    lru_.push_front(key);
    slot.use = lru_.begin();
  } else {
    lru_.splice(lru_.begin(), lru_, slot.use);
  }
  for (const auto& r : slot.rules)
    if (*r->closure == *closure) return r;  // equal closures only: a hash collision never shares tables
  auto r = std::make_shared<RuleTables>();
  r->closure = closure;
  // The closure is held as long as the entry: counted like its tables (closures of large rules weigh
  // more than their tables; uncounted, a MaskBench run held twice the bound).
  r->bytes = entry_bytes(*closure);
  bytes_ += r->bytes;
  slot.rules.push_back(r);
  evict_past_bound();
  return r;
}

std::size_t TableCache::entry_bytes(const RuleClosure& closure) {
  return closure.capacity() * sizeof(std::uint32_t) + sizeof(RuleClosure) + sizeof(RuleTables);
}

void TableCache::set_max_bytes(std::size_t max_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_bytes_ = max_bytes;
  evict_past_bound();
}

void TableCache::evict_past_bound() {
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    auto oldest = slots_.find(lru_.back());
    for (const auto& r : oldest->second.rules) {
      std::lock_guard<std::mutex> rule_lock(r->mutex);
      bytes_ -= std::min(bytes_, r->bytes);
      r->evicted = true;
    }
    slots_.erase(oldest);  // grammars compiled from these entries keep their own copies
    lru_.pop_back();
  }
}

std::shared_ptr<const TokenTable> TableCache::add(RuleTables& rule, std::uint32_t offset, TokenTable table) {
  const std::size_t bytes = table.memory_bytes() + sizeof(TokenTable);
  std::shared_ptr<const TokenTable> kept;
  {
    std::lock_guard<std::mutex> lock(rule.mutex);
    auto [it, fresh] = rule.by_offset.emplace(offset, nullptr);
    if (!fresh) return it->second;
    it->second = std::make_shared<const TokenTable>(std::move(table));
    rule.bytes += bytes;
    kept = it->second;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (rule.evicted) return kept;  // the grammar keeps it; the cache no longer counts the rule
  bytes_ += bytes;
  evict_past_bound();
  return kept;
}

std::size_t TableCache::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

void TableCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, slot] : slots_)
    for (const auto& r : slot.rules) r->evicted = true;
  slots_.clear();
  lru_.clear();
  bytes_ = 0;
}

}  // namespace pse::detail
