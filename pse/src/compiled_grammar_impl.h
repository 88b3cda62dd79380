// What a CompiledGrammar holds: the automaton and, per reachable state that reads bytes, its token
// table (built in compile() or on first use). Shared read-only by every matcher of the grammar.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "automaton.h"
#include "pse/compiler.h"
#include "token_table.h"

namespace pse {

struct CompiledGrammar::Impl {
  std::shared_ptr<const Vocabulary> vocabulary;
  detail::Automaton automaton;
  std::vector<std::uint32_t> scan_index;  // [n_states] index into tables, or kNoTable
  static constexpr std::uint32_t kNoTable = ~0u;
  // Built once each (eagerly in compile, or lazily under the once flags).
  mutable std::vector<detail::TokenTable> tables;
  mutable std::unique_ptr<std::once_flag[]> table_once;
  CompileStats stats;

  // Caller tables, built on first use per (state, caller return state); bounded in number (beyond it,
  // the uncertain tokens are checked against the chart directly).
  static constexpr std::size_t kMaxCallerTables = 4096;
  mutable std::mutex caller_mutex;
  mutable std::unordered_map<std::uint64_t, std::shared_ptr<const detail::CallerTable>> caller_tables;

  // nullptr when the bound is reached.
  std::shared_ptr<const detail::CallerTable> caller_table(std::uint32_t state, std::uint32_t caller_return) const {
    const std::uint64_t key = (static_cast<std::uint64_t>(state) << 32) | caller_return;
    {
      std::lock_guard<std::mutex> lock(caller_mutex);
      auto it = caller_tables.find(key);
      if (it != caller_tables.end()) return it->second;
      if (caller_tables.size() >= kMaxCallerTables) return nullptr;
    }
    auto built = std::make_shared<const detail::CallerTable>(
        detail::build_caller_table(automaton, *vocabulary, table(state), caller_return));
    std::lock_guard<std::mutex> lock(caller_mutex);
    return caller_tables.emplace(key, std::move(built)).first->second;
  }

  // The token table of a state that reads bytes; builds it on first use when not precomputed.
  const detail::TokenTable& table(std::uint32_t state) const {
    const std::uint32_t i = scan_index[state];
    std::call_once(table_once[i], [&] {
      tables[i] = detail::build_token_table(automaton, *vocabulary, state, nullptr);
    });
    return tables[i];
  }
};

}  // namespace pse
