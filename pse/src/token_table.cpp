#include "token_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "earley.h"
#include "pse/error.h"

namespace pse::detail {

TokenTable build_token_table(const Automaton& a, const Vocabulary& vocab, std::uint32_t state,
                             const std::chrono::steady_clock::time_point* deadline) {
  TokenTable table;
  const std::uint32_t rule = a.state_rule[state];
  const ByteSet& follow = a.rule_follow[rule];
  const std::vector<TokenId>& sorted = vocab.text_tokens();
  const std::vector<std::uint32_t>& fb = vocab.first_byte_begin();

  Chart chart(&a);
  chart.reset_detached({&state, 1});
  ByteSet first{};
  for (const Item& it : chart.set(1)) {
    for (std::uint32_t e = a.byte_begin[it.state]; e < a.byte_begin[it.state + 1]; ++e) {
      for (unsigned b = a.byte_edges[e].lo; b <= a.byte_edges[e].hi; ++b) first[b >> 6] |= 1ULL << (b & 63);
    }
  }

  // Whether the bytes after the rule's end can continue in some caller context (a superset of the real
  // ones: the rule's follow contexts, transitively). A final item of an outer rule reached part-way
  // leaves the answer to the run-time check (true). Memoized per suffix.
  const std::vector<std::uint32_t>& contexts = a.rule_contexts[rule];
  Chart follow_chart(&a);
  if (!contexts.empty()) follow_chart.reset_detached(contexts);
  std::unordered_map<std::string_view, bool> suffix_memo;
  auto suffix_viable = [&](std::string_view suffix) {
    if (contexts.empty()) return true;
    auto it = suffix_memo.find(suffix);
    if (it != suffix_memo.end()) return it->second;
    follow_chart.truncate(2);
    bool viable = true;
    for (std::size_t i = 0; i < suffix.size(); ++i) {
      if (i > 0 && follow_chart.last_has_any_final_at_origin0()) break;
      if (!follow_chart.push(static_cast<std::uint8_t>(suffix[i]))) {
        viable = false;
        break;
      }
    }
    suffix_memo.emplace(suffix, viable);
    return viable;
  };

  std::vector<TokenId> accepted;
  // ends: the depths j > 0 of the current prefix after which the rule's end is reached (a property of
  // the prefix, so it survives truncation to a shorter prefix).
  std::vector<std::uint32_t> ends;
  std::size_t n_checked = 0;
  // Records p as uncertain, with its end depths, when the rest after some end may continue in a caller.
  auto uncertain = [&](std::uint32_t p, std::string_view tok, std::size_t died_at) {
    const std::size_t before = table.end_depths.size();
    for (std::uint32_t j : ends) {
      if (j > died_at || j >= tok.size()) break;
      if (byte_set_has(follow, static_cast<unsigned char>(tok[j])) && suffix_viable(tok.substr(j))) {
        table.end_depths.push_back(j);
      }
    }
    if (table.end_depths.size() == before) return;
    table.end_begin.push_back(static_cast<std::uint32_t>(before));
    table.uncertain.push_back(p);
  };
  for (unsigned b = 0; b < 256; ++b) {
    if (!byte_set_has(first, b)) continue;
    std::size_t depth_dead = SIZE_MAX;  // byte index at which the previous token died, if it did
    bool first_in_group = true;
    chart.truncate(2);
    ends.clear();
    for (std::uint32_t p = fb[b]; p < fb[b + 1]; ++p) {
      if (deadline != nullptr && (++n_checked & 0x3FFF) == 0 &&
          std::chrono::steady_clock::now() > *deadline) {
        throw LimitError(fmt::format("[compile] compile time limit exceeded building the token "
                                     "table of automaton state {}",
                                     state));
      }
      const TokenId id = sorted[p];
      const std::string_view tok = vocab.sorted_token(p);
      const std::size_t l = first_in_group ? 0 : vocab.lcp()[p];
      first_in_group = false;
      if (depth_dead != SIZE_MAX && l > depth_dead) {
        // Same bytes up to the one that failed: same chart, but the suffixes after an end differ.
        uncertain(p, tok, depth_dead);
        continue;
      }
      const std::size_t depth = std::min(l, chart.n_sets() - 2);
      chart.truncate(depth + 2);
      while (!ends.empty() && ends.back() > depth) ends.pop_back();
      depth_dead = SIZE_MAX;
      for (std::size_t j = depth; j < tok.size(); ++j) {
        if (!chart.push(static_cast<unsigned char>(tok[j]))) {
          depth_dead = j;
          break;
        }
        if (chart.last_has_final(rule, 0)) ends.push_back(static_cast<std::uint32_t>(j + 1));
      }
      if (depth_dead == SIZE_MAX) {
        accepted.push_back(id);
      } else {
        uncertain(p, tok, depth_dead);
      }
    }
  }
  std::sort(accepted.begin(), accepted.end());
  if (accepted.size() > vocab.n_mask_words()) {
    table.accepted_bits.assign(vocab.n_mask_words(), 0);
    for (TokenId id : accepted) table.accepted_bits[id >> 5] |= 1u << (id & 31);
  } else {
    table.accepted_list = std::move(accepted);
  }
  table.end_begin.push_back(static_cast<std::uint32_t>(table.end_depths.size()));
  table.uncertain.shrink_to_fit();
  table.end_depths.shrink_to_fit();
  return table;
}

CallerTable build_caller_table(const Automaton& a, const Vocabulary& vocab, const TokenTable& table,
                               std::uint32_t caller_return) {
  // The rest of a token after an end of the callee, read from caller_return: 0 rejected, 1 uncertain
  // (the caller's rule may end part-way, at any depth including 0, with a byte its callers may read),
  // 2 accepted.
  const std::uint32_t rule = a.state_rule[caller_return];
  const ByteSet& follow = a.rule_follow[rule];
  Chart chart(&a);
  chart.reset_detached({&caller_return, 1});
  std::unordered_map<std::string_view, std::uint8_t> memo;
  auto classify = [&](std::string_view rest) -> std::uint8_t {
    auto it = memo.find(rest);
    if (it != memo.end()) return it->second;
    chart.truncate(2);
    std::uint8_t verdict = 2;
    bool may_leave = false;
    for (std::size_t i = 0; i < rest.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(rest[i]);
      may_leave = may_leave || (byte_set_has(follow, c) && chart.last_has_final(rule, 0));
      if (!chart.push(c)) {
        verdict = may_leave ? 1 : 0;
        break;
      }
    }
    memo.emplace(rest, verdict);
    return verdict;
  };
  CallerTable out;
  const std::vector<TokenId>& sorted = vocab.text_tokens();
  for (std::size_t i = 0; i < table.uncertain.size(); ++i) {
    const std::uint32_t p = table.uncertain[i];
    const std::string_view tok = vocab.sorted_token(p);
    std::uint8_t best = 0;
    for (std::uint32_t e = table.end_begin[i]; e < table.end_begin[i + 1] && best < 2; ++e) {
      best = std::max(best, classify(tok.substr(table.end_depths[e])));
    }
    if (best == 2) {
      out.accepted.push_back(sorted[p]);
    } else if (best == 1) {
      out.uncertain.push_back(p);
    }
  }
  return out;
}

}  // namespace pse::detail
