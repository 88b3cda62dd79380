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

ChainTable build_chain_table(const Automaton& a, const Vocabulary& vocab, UncertainView below,
                             std::uint32_t caller_return) {
  // The rest of each token after a depth where the callee ends, read from caller_return in a detached
  // chart. Consumed: accepted. Dead: the depths where the caller's rule ended (outer end, any depth
  // including 0) with a byte its own callers may read carry the token one level up; none: rejected.
  // The rests come mostly in byte order (tokens are sorted and usually end the callee at the same
  // depth), so consecutive ones share the chart of their common prefix; `leaves` is a prefix property.
  const std::uint32_t rule = a.state_rule[caller_return];
  const ByteSet& follow = a.rule_follow[rule];
  Chart chart(&a);
  chart.reset_detached({&caller_return, 1});
  std::vector<std::uint32_t> leaves;  // rest positions i where the caller's rule may be left
  std::string_view prev;
  std::size_t dead_at = SIZE_MAX;
  bool have_prev = false;
  std::vector<std::uint32_t> next_ends;
  // Returns true when the rest is consumed; else appends offset + leave positions (< dead index) to
  // next_ends.
  auto walk = [&](std::string_view rest, std::uint32_t offset) {
    std::size_t l = 0;
    if (have_prev) {
      const std::size_t n = std::min(prev.size(), rest.size());
      while (l < n && prev[l] == rest[l]) ++l;
    }
    have_prev = true;
    prev = rest;
    if (!(dead_at != SIZE_MAX && l > dead_at)) {
      const std::size_t depth = std::min(l, chart.n_sets() - 2);
      chart.truncate(depth + 2);
      while (!leaves.empty() && leaves.back() >= depth) leaves.pop_back();
      dead_at = SIZE_MAX;
      for (std::size_t i = depth; i < rest.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(rest[i]);
        if (byte_set_has(follow, c) && chart.last_has_final(rule, 0)) leaves.push_back(static_cast<std::uint32_t>(i));
        if (!chart.push(c)) {
          dead_at = i;
          break;
        }
      }
      if (dead_at == SIZE_MAX) return true;
    }
    for (std::uint32_t i : leaves) {
      if (i > dead_at) break;
      next_ends.push_back(offset + i);
    }
    return false;
  };
  ChainTable out;
  const std::vector<TokenId>& sorted = vocab.text_tokens();
  for (std::size_t k = 0; k < below.uncertain.size(); ++k) {
    const std::uint32_t p = below.uncertain[k];
    const std::string_view tok = vocab.sorted_token(p);
    next_ends.clear();
    bool accepted = false;
    for (std::uint32_t e = below.end_begin[k]; e < below.end_begin[k + 1] && !accepted; ++e) {
      const std::uint32_t j = below.end_depths[e];
      accepted = walk(tok.substr(j), j);
    }
    if (accepted) {
      out.accepted.push_back(sorted[p]);
    } else if (!next_ends.empty()) {
      std::sort(next_ends.begin(), next_ends.end());
      next_ends.erase(std::unique(next_ends.begin(), next_ends.end()), next_ends.end());
      out.uncertain.push_back(p);
      out.end_begin.push_back(static_cast<std::uint32_t>(out.end_depths.size()));
      out.end_depths.insert(out.end_depths.end(), next_ends.begin(), next_ends.end());
    }
  }
  out.end_begin.push_back(static_cast<std::uint32_t>(out.end_depths.size()));
  std::sort(out.accepted.begin(), out.accepted.end());
  return out;
}

}  // namespace pse::detail
