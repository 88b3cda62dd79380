// What a CompiledGrammar holds: the automaton and, per reachable state that reads bytes, its token
// table (built in compile() or on first use). Shared read-only by every matcher of the grammar.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "automaton.h"
#include "pse/compiler.h"
#include "stack_dfa.h"
#include "state_classes.h"
#include "table_cache.h"
#include "tables_ahead.h"
#include "token_sets.h"
#include "token_table.h"
#include "u32_hash.h"
#include "vocabulary_index.h"

namespace pse {

struct CompiledGrammar::Impl {
  std::shared_ptr<const Vocabulary> vocabulary;
  detail::Automaton automaton;
  std::vector<detail::TokenSetMask> token_sets;  // [automaton.token_sets.size()] the ids each reads
  // [n_states] index into tables, or kNoTable. With classes found rule by rule, a rule's entries change
  // once, under dfa_mutex, before its flag in rule_classified is set (and read only after it is).
  mutable std::vector<std::uint32_t> scan_index;
  static constexpr std::uint32_t kNoTable = ~0u;
  std::vector<std::uint32_t> table_state;  // [n_tables] the state a table is built from
  // [n_tables] (when every table is built in compile) an earlier table whose state reads every string of
  // at most VocabularyIndex::kShortTokenBytes bytes alike (derive_token_table), or kNoTable.
  std::vector<std::uint32_t> table_base;
  // Tables shared with other grammars (CompileOptions::shared_tables): per rule, its entry in the
  // TableCache, looked up at the first table built in the rule (identifying a rule writes out its
  // closure: only for the rules masks reach when tables are built on first use); null when its closure
  // is too large to identify.
  bool share_tables = false;
  std::uint64_t vocabulary_hash = 0;
  mutable std::vector<std::shared_ptr<detail::TableCache::RuleTables>> rule_shared;
  mutable std::unique_ptr<std::once_flag[]> rule_shared_once;
  // Words of closures written out so far; past the bound, further rules are not shared (a grammar of
  // many large rules would otherwise spend more on identifying them than sharing saves).
  static constexpr std::size_t kMaxClosureWords = std::size_t{24} << 20;
  mutable std::atomic<std::size_t> closure_words{0};
  // Built once each (eagerly in compile, or lazily under the once flags).
  mutable std::vector<detail::TokenTable> tables;
  mutable std::unique_ptr<std::once_flag[]> table_once;
  CompileStats stats;
  // memory_bytes(): the automaton and the table slots (compile), plus each table once built.
  std::size_t base_memory_bytes = 0;
  mutable std::atomic<std::size_t> table_bytes{0};
  // The stack automaton of the walks, kept from compile() for the tables and chain tables built on
  // first use (they meet the configurations met before); one build at a time uses it.
  static constexpr std::size_t kMaxSharedConfigs = 2048;  // bounds its memory (about 2 MiB)
  static constexpr std::size_t kMaxCompileConfigs = 16384;  // while compile() builds the tables (16 MiB)
  static constexpr std::size_t kMaxSharedGroupBytes = std::size_t{4} << 20;  // group results kept afterwards
  mutable std::mutex dfa_mutex;
  mutable std::unique_ptr<detail::StackDfa> dfa;
  // With TableBuild::kInBackground: the build of every table that continues after compile().
  std::unique_ptr<detail::TablesAhead> background;
  // [n_states] the class representative (see StackDfa); or empty. With classes found rule by rule, the
  // identity on a rule's states until it is classified (written under dfa_mutex: the walks read it; a
  // representative is equivalent to the state, so walks may meet either).
  mutable std::vector<std::uint32_t> canonical_states;
  // Classes found rule by rule (large automata whose tables are built on first use; compiler.cpp): a rule
  // is classified once, before its first table; rule_classified[r] is set when it is done (or left
  // without).
  bool classes_by_rule = false;
  std::size_t class_horizon = 0;
  mutable std::unique_ptr<std::atomic<std::uint8_t>[]> rule_classified;

  // Finds rule r's classes, unless known, and points its states at their class's first state
  // (canonical_states) and at the table of its first state that reads bytes (scan_index). Holding
  // dfa_mutex. With a deadline, a rule whose classes take longer goes without them.
  void classify_rule_locked(std::uint32_t r, const detail::Deadline* deadline) const {
    if (rule_classified[r].load(std::memory_order_relaxed) != 0) return;
    const std::uint32_t lo = automaton.rule_start[r];
    std::vector<std::uint32_t> cls;
    if (automaton.rule_final[r] < automaton.n_states()) {  // (an unproductive rule has no table)
      try {
        cls = detail::future_classes(automaton, lo, automaton.rule_final[r] + 1, class_horizon, 256, deadline);
      } catch (const LimitError&) {
        if (deadline == nullptr) throw;
        cls.clear();
      }
    }
    const std::uint32_t n_classes = cls.empty() ? 0 : *std::max_element(cls.begin(), cls.end()) + 1;
    constexpr std::uint32_t kNoState = ~0u;
    std::vector<std::uint32_t> first_state(n_classes, kNoState), first_table(n_classes, kNoTable);
    for (std::uint32_t k = 0; k < cls.size(); ++k) {
      const std::uint32_t s = lo + k, c = cls[k];
      if (first_state[c] == kNoState) first_state[c] = s;
      canonical_states[s] = first_state[c];
      if (scan_index[s] == kNoTable) continue;
      if (first_table[c] == kNoTable) {
        first_table[c] = scan_index[s];
      } else {
        scan_index[s] = first_table[c];
      }
    }
    rule_classified[r].store(1, std::memory_order_release);
  }
  void mark_classified(std::uint32_t r) const { rule_classified[r].store(1, std::memory_order_release); }

  // The token table of a state that reads bytes; builds it on first use when not precomputed.
  const detail::TokenTable& table(std::uint32_t state) const {
    if (classes_by_rule) {
      // (The rules too large to classify here were classified, or left alone, in compile.)
      const std::uint32_t r = automaton.state_rule[state];
      if (rule_classified[r].load(std::memory_order_acquire) == 0) {
        std::lock_guard<std::mutex> lock(dfa_mutex);
        classify_rule_locked(r, nullptr);
      }
    }
    const std::uint32_t i = scan_index[state];
    std::call_once(table_once[i], [&] { build_table(i, nullptr); });
    return tables[i];
  }

  // The TableCache entry of rule r, or null when not shared.
  detail::TableCache::RuleTables* shared_rule(std::uint32_t r) const {
    if (!share_tables) return nullptr;
    std::call_once(rule_shared_once[r], [&] {
      if (closure_words.load(std::memory_order_relaxed) >= kMaxClosureWords) return;
      if (auto closure = detail::rule_closure(automaton, r)) {
        closure_words.fetch_add(closure->size(), std::memory_order_relaxed);
        rule_shared[r] = detail::TableCache::instance().rule(vocabulary_hash, closure);
      }
    });
    return rule_shared[r].get();
  }

  // Fills tables[i]: from the shared cache when its rule is shared and another grammar built it, else
  // built here (and added to the cache when shared). Returns whether it came from the cache. With
  // `eager`, on the worker's automaton, a table whose base (table_base) is done is derived from it.
  bool build_table(std::size_t i, const detail::Deadline* deadline,
                   detail::EagerBuild* eager = nullptr, detail::EagerWorker* worker = nullptr) const {
    const std::uint32_t s = table_state[i];
    detail::TableCache::RuleTables* shared = shared_rule(automaton.state_rule[s]);
    const std::uint32_t offset = s - automaton.rule_start[automaton.state_rule[s]];
    std::shared_ptr<const detail::TokenTable> cached;
    if (shared != nullptr) {
      std::lock_guard<std::mutex> lock(shared->mutex);
      if (auto it = shared->by_offset.find(offset); it != shared->by_offset.end()) cached = it->second;
    }
    std::uint32_t b = eager != nullptr && !table_base.empty() ? table_base[i] : kNoTable;
    if (b != kNoTable && eager->done[b].load(std::memory_order_acquire) == 0) b = kNoTable;
    std::unique_lock<std::mutex> lock(dfa_mutex, std::defer_lock);  // (a worker has its own automaton)
    detail::StackDfa* const walk_dfa = worker != nullptr ? worker->dfa : dfa.get();
    if (worker == nullptr) lock.lock();
    auto build = [&](detail::FollowFilter filter) {
      if (b == kNoTable)
        return detail::build_token_table(automaton, *vocabulary, s, deadline, walk_dfa, detail::Walker::kAuto, filter);
      auto far = worker->read_far.find(b);
      if (far == worker->read_far.end()) {
        far = worker->read_far
                  .emplace(b, detail::long_tokens_read_far(automaton, *vocabulary, table_state[b], deadline, walk_dfa))
                  .first;
      }
      const detail::TokenTable& base = shared == nullptr ? tables[b] : *eager->as_built[b];
      return detail::derive_token_table(automaton, *vocabulary, s, base, far->second, deadline, walk_dfa,
                                        detail::Walker::kAuto, filter);
    };
    if (shared == nullptr) {
      tables[i] = build(detail::FollowFilter::kFull);
      table_bytes.fetch_add(tables[i].memory_bytes(), std::memory_order_relaxed);
      if (eager != nullptr) eager->done[i].store(1, std::memory_order_release);
      return false;
    }
    const bool from_cache = cached != nullptr;
    if (!from_cache) cached = detail::TableCache::instance().add(*shared, offset, build(detail::FollowFilter::kBytes));
    if (eager != nullptr) eager->as_built[i] = cached;
    // The shared table is this grammar's once its own follow filter has dropped what cannot continue.
    tables[i] = *cached;
    detail::apply_follow_filter(automaton, *vocabulary, s, tables[i], walk_dfa);
    table_bytes.fetch_add(tables[i].memory_bytes(), std::memory_order_relaxed);
    if (eager != nullptr) eager->done[i].store(1, std::memory_order_release);
    return from_cache;
  }

  // Chain tables, built on first use per chain: a table index, then per level up the return states of
  // the callers (one rule, called at one position: all the parse paths through that rule) as a count
  // followed by the states. Bounded in number (beyond it, uncertain tokens are checked on the chart).
  static constexpr std::size_t kMaxChainTables = 16384;
  mutable std::mutex chain_mutex;
  mutable std::unordered_map<std::vector<std::uint32_t>, std::shared_ptr<const detail::ChainTable>,
                             detail::U32VectorHash>
      chain_tables;

  // The table of `chain`, whose last level is `callers`, built from `below` (the table of the chain
  // without its last level) when absent. nullptr when the bound is reached.
  std::shared_ptr<const detail::ChainTable> chain_table(const std::vector<std::uint32_t>& chain,
                                                        std::span<const std::uint32_t> callers,
                                                        detail::UncertainView below) const {
    {
      std::lock_guard<std::mutex> lock(chain_mutex);
      auto it = chain_tables.find(chain);
      if (it != chain_tables.end()) return it->second;
      if (chain_tables.size() >= kMaxChainTables) return nullptr;
    }
    std::shared_ptr<const detail::ChainTable> built;
    {
      std::lock_guard<std::mutex> lock(dfa_mutex);
      built = std::make_shared<const detail::ChainTable>(
          detail::build_chain_table(automaton, *vocabulary, below, callers, dfa.get()));
    }
    std::lock_guard<std::mutex> lock(chain_mutex);
    return chain_tables.emplace(chain, std::move(built)).first->second;
  }
};

}  // namespace pse
