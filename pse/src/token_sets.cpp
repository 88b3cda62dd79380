#include "token_sets.h"
#include "vocabulary_index.h"

#include <fmt/format.h>

namespace pse::detail {

std::vector<TokenSetMask> resolve_token_sets(const Grammar& grammar, const Automaton& automaton,
                                             const Vocabulary& vocabulary) {
  std::vector<TokenSetMask> out;
  out.reserve(automaton.token_sets.size());
  const std::size_t n_tokens = vocabulary.n_tokens();
  for (const ExprId id : automaton.token_sets) {
    const Expr& e = grammar.expr(id);
    auto fail = [&](const std::string& why) {
      throw GrammarError(fmt::format("[compile] token {}: {}", grammar.to_string(id), why));
    };
    TokenSetMask set;
    set.bits.assign(vocabulary.n_mask_words(), 0);
    auto mark = [&](std::size_t t) { set.bits[t / 32] |= 1u << (t % 32); };
    std::vector<TokenIdRange> named;
    if (!e.token_name.empty()) {
      const std::optional<TokenId> t = vocabulary.find_token(e.token_name);
      if (!t) fail("no token of the vocabulary has exactly these bytes");
      named.push_back({static_cast<std::uint32_t>(*t), static_cast<std::uint32_t>(*t)});
    }
    const std::vector<TokenIdRange>& ranges = e.token_name.empty() ? e.token_ids : named;
    if (!e.negated) {
      for (const TokenIdRange& r : ranges) {
        if (r.hi >= n_tokens) fail(fmt::format("id {} is outside the vocabulary's {} tokens", r.hi, n_tokens));
        for (std::size_t t = r.lo; t <= r.hi; ++t) mark(t);
      }
    } else {
      for (const TokenId t : vocabulary.index().text_tokens()) mark(static_cast<std::size_t>(t));
      for (const TokenId t : vocabulary.special_ids())
        if (!vocabulary.is_eos(t)) mark(static_cast<std::size_t>(t));
      for (const TokenIdRange& r : ranges) {  // (ids past the vocabulary exclude nothing)
        for (std::size_t t = r.lo; t <= r.hi && t < n_tokens; ++t) set.bits[t / 32] &= ~(1u << (t % 32));
      }
    }
    std::size_t n = 0;
    for (const std::uint32_t w : set.bits) n += static_cast<std::size_t>(__builtin_popcount(w));
    if (n == 0) fail("it reads no token of the vocabulary");
    if (n <= TokenSetMask::kMaxListed) {
      for (std::size_t w = 0; w < set.bits.size(); ++w)
        for (std::uint32_t x = set.bits[w]; x != 0; x &= x - 1)
          set.ids.push_back(static_cast<TokenId>(w * 32 + static_cast<std::size_t>(__builtin_ctz(x))));
    }
    out.push_back(std::move(set));
  }
  return out;
}

}  // namespace pse::detail
