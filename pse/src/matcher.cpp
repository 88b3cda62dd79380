#include "pse/matcher.h"

#include <algorithm>
#include <array>
#include <cstring>

#include <fmt/format.h>

#include "compiled_grammar_impl.h"
#include "earley.h"
#include "vocabulary_index.h"

namespace pse {

struct Matcher::Scratch {
  static constexpr std::size_t kMaxChainDepth = 8;  // levels of callers followed up with chain tables
  std::vector<std::uint32_t> scan_states;
  std::vector<std::uint8_t> in_set;  // [token sets] accept_token: which sets read the token
  std::vector<std::uint64_t> marks;  // [ceil(n_text_tokens / 64)], all zero between calls
  std::vector<std::uint32_t> chain;
  // The call edges of the items of one Earley set, as (callee rule, caller's origin, caller's rule,
  // return state), sorted: the callers of a rule at that position are one range. Built when a set is
  // asked for callers a second time in a mask fill (a resolution may ask one set for hundreds of rules).
  struct CallersAt {
    std::uint32_t origin = 0;
    std::vector<std::array<std::uint32_t, 4>> edges;
  };
  std::vector<CallersAt> callers_at;
  std::size_t n_callers_at = 0;  // entries valid in this fill
  std::vector<std::uint32_t> asked_once;  // sets asked for callers once in this fill (not indexed)
  // resolve_up's callers, per recursion depth (at most kMaxChainDepth + 1).
  std::vector<std::vector<std::array<std::uint32_t, 4>>> parents =
      std::vector<std::vector<std::array<std::uint32_t, 4>>>(kMaxChainDepth + 1);
};

namespace {

bool last_can_stop(const detail::Automaton& a, const detail::Chart& c) {
  return c.last_has_final(a.root, 0);
}

// mask[w] |= src[w] for w < n, in the direction that keeps the loads of `src` from false dependencies
// on the stores to `mask` just before them: a load whose address equals a pending store's in its low
// 12 bits waits for it (4K aliasing). Going forwards, that happens when `src` sits just below `mask`
// modulo 4 KiB; going backwards, just above. Where the two buffers land is up to the allocator (a
// binary that differed only in heap layout had a median mask a fifth slower; this was the likely cause).
void or_into(std::uint32_t* mask, const std::uint32_t* src, std::size_t n) {
  const auto d = (reinterpret_cast<std::uintptr_t>(src) - reinterpret_cast<std::uintptr_t>(mask)) & 4095;
  if (d < 2048) {
    for (std::size_t w = 0; w < n; ++w) mask[w] |= src[w];
  } else {
    for (std::size_t w = n; w-- > 0;) mask[w] |= src[w];
  }
}

}  // namespace

Matcher::Matcher(CompiledGrammar grammar)
    : grammar_(std::move(grammar)),
      impl_(grammar_.impl().get()),
      chart_(std::make_unique<detail::Chart>(&impl_->automaton)),
      scratch_(std::make_unique<Scratch>()) {
  chart_->reset(impl_->automaton.rule_start[impl_->automaton.root]);
}

Matcher::Matcher(const Matcher& other)
    : grammar_(other.grammar_),
      impl_(other.impl_),
      chart_(std::make_unique<detail::Chart>(*other.chart_)),
      history_(other.history_),
      terminated_(other.terminated_),
      scratch_(std::make_unique<Scratch>()) {}

Matcher& Matcher::operator=(const Matcher& other) {
  if (this != &other) {
    grammar_ = other.grammar_;
    impl_ = other.impl_;
    chart_ = std::make_unique<detail::Chart>(*other.chart_);
    history_ = other.history_;
    terminated_ = other.terminated_;
    scratch_ = std::make_unique<Scratch>();
  }
  return *this;
}

Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;
Matcher::~Matcher() = default;

std::size_t Matcher::mask_words() const { return impl_->vocabulary->n_mask_words(); }

std::size_t Matcher::n_bytes() const { return chart_->n_sets() - 1; }

void Matcher::reset() {
  chart_->reset(impl_->automaton.rule_start[impl_->automaton.root]);
  history_.clear();
  terminated_ = false;
}

bool Matcher::can_stop() const { return !terminated_ && last_can_stop(impl_->automaton, *chart_); }

bool Matcher::must_stop() const {
  if (terminated_) return true;
  if (!can_stop()) return false;
  for (const detail::Item& it : chart_->last())
    if (impl_->automaton.has_bytes(it.state) || impl_->automaton.has_tokens(it.state)) return false;
  return true;
}

void Matcher::allow_token_edges(std::span<std::uint32_t> mask) const {
  const detail::Automaton& a = impl_->automaton;
  std::uint32_t done = ~0u;  // the last set or-ed in (items of one state come together)
  for (const detail::Item& it : chart_->last()) {
    for (std::uint32_t e = a.token_begin[it.state]; e < a.token_begin[it.state + 1]; ++e) {
      const std::uint32_t set = a.token_edges[e].set;
      if (set == done) continue;
      done = set;
      const detail::TokenSetMask& t = impl_->token_sets[set];
      if (!t.ids.empty()) {
        for (const TokenId id : t.ids) mask[static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
      } else {
        or_into(mask.data(), t.bits.data(), t.bits.size());
      }
    }
  }
}

void Matcher::fill_next_token_bitmask(std::span<std::uint32_t> mask) {
  const Vocabulary& vocab = *impl_->vocabulary;
  const VocabularyIndex& ix = vocab.index();
  const std::size_t words = vocab.n_mask_words();
  if (mask.size() < words) {
    throw InputError(fmt::format("[matcher] fill_next_token_bitmask: the mask has {} words, {} needed "
                                 "for {} rows",
                                 mask.size(), words, vocab.n_rows()));
  }
  if (terminated_) {
    std::memset(mask.data(), 0, words * sizeof(std::uint32_t));
    return;
  }
  const detail::Automaton& a = impl_->automaton;
  std::vector<std::uint32_t>& states = scratch_->scan_states;
  states.clear();
  for (const detail::Item& it : chart_->last())
    if (a.has_bytes(it.state)) states.push_back(it.state);
  std::sort(states.begin(), states.end());
  states.erase(std::unique(states.begin(), states.end()), states.end());
  // The mask starts as a copy of the first table held as a bitset (one pass over the mask instead of
  // clearing it and or-ing that table in), else empty.
  const std::uint32_t* copied = nullptr;
  for (std::uint32_t s : states) {
    const detail::TokenTable& t = impl_->table(s);
    if (!t.accepted_bits.empty()) {
      copied = t.accepted_bits.data();
      std::memcpy(mask.data(), copied, words * sizeof(std::uint32_t));
      break;
    }
  }
  if (copied == nullptr) std::memset(mask.data(), 0, words * sizeof(std::uint32_t));

  // Uncertain tokens: their positions in the sorted vocabulary, merged through a bitset so that they
  // are visited in byte order without sorting.
  std::vector<std::uint64_t>& marks = scratch_->marks;
  scratch_->n_callers_at = 0;
  scratch_->asked_once.clear();
  const std::size_t n_text = ix.text_tokens().size();
  if (marks.size() != (n_text + 63) / 64) marks.assign((n_text + 63) / 64, 0);
  std::size_t lo_word = SIZE_MAX, hi_word = 0;
  for (std::uint32_t s : states) {
    const detail::TokenTable& t = impl_->table(s);
    if (!t.accepted_bits.empty()) {
      if (t.accepted_bits.data() != copied) or_into(mask.data(), t.accepted_bits.data(), words);
    } else {
      for (TokenId id : t.accepted_list) mask[id >> 5] |= 1u << (id & 31);
    }
    if (t.uncertain.empty()) continue;
    // Resolve the uncertain tokens up the real parse stack: the items of this state in the last set
    // were called by items (in their origin sets) that continue at return states, and so on up. Each
    // chain of return states has its table; what no bounded chain resolves is checked on the chart.
    // Chains start at the table (states sharing a table share their chain tables too).
    std::vector<std::uint32_t>& chain = scratch_->chain;
    chain.assign(1, impl_->scan_index[s]);
    std::size_t budget = 1024;
    for (const detail::Item& it : chart_->last()) {
      if (it.state == s) resolve_up(chain, t.view(), a.state_rule[s], it.origin, 0, budget, mask, lo_word, hi_word);
    }
  }
  if (lo_word != SIZE_MAX) {
    // Check the uncertain tokens against the real chart, in byte order so that each shares the work
    // of the common prefix with the one before, and a dead prefix is not tried twice.
    detail::Chart& c = *chart_;
    const std::size_t base = c.n_sets();
    const std::vector<TokenId>& sorted = ix.text_tokens();
    const std::vector<std::uint32_t>& lcp = ix.lcp();
    std::size_t prev = SIZE_MAX;
    std::size_t dead_at = SIZE_MAX;  // byte index where the previous token died
    for (std::size_t w = lo_word; w <= hi_word; ++w) {
      std::uint64_t bits = marks[w];
      marks[w] = 0;
      while (bits != 0) {
        const std::size_t p = w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits));
        bits &= bits - 1;
        const TokenId id = sorted[p];
        if ((mask[id >> 5] >> (id & 31)) & 1) continue;
        const std::string_view tok = ix.sorted_token(p);
        std::size_t l = 0;
        if (prev != SIZE_MAX) {
          if (p - prev <= 32) {
            l = SIZE_MAX;
            for (std::size_t q = prev + 1; q <= p; ++q) l = std::min<std::size_t>(l, lcp[q]);
          } else {
            const std::string_view pv = ix.sorted_token(prev);
            const std::size_t n = std::min(pv.size(), tok.size());
            while (l < n && pv[l] == tok[l]) ++l;
          }
        }
        prev = p;
        if (dead_at != SIZE_MAX && l > dead_at) continue;
        const std::size_t depth = std::min(l, c.n_sets() - base);
        c.truncate(base + depth);
        dead_at = SIZE_MAX;
        for (std::size_t j = depth; j < tok.size(); ++j) {
          if (!c.push(static_cast<std::uint8_t>(tok[j]))) {
            dead_at = j;
            break;
          }
        }
        if (dead_at == SIZE_MAX) mask[id >> 5] |= 1u << (id & 31);
      }
    }
    c.truncate(base);
  }
  if (!impl_->token_sets.empty()) allow_token_edges(mask);
  if (last_can_stop(a, *chart_)) {
    for (TokenId id : vocab.eos_ids()) mask[id >> 5] |= 1u << (id & 31);
  }
}

void Matcher::resolve_up(std::vector<std::uint32_t>& chain, const detail::UncertainView& below, std::uint32_t rule,
                         std::uint32_t origin, std::size_t depth, std::size_t& budget, std::span<std::uint32_t> mask,
                         std::size_t& lo_word, std::size_t& hi_word) {
  const detail::Automaton& a = impl_->automaton;
  std::vector<std::uint64_t>& marks = scratch_->marks;
  auto check_all = [&] {
    for (std::uint32_t p : below.uncertain) marks[p >> 6] |= 1ULL << (p & 63);
    lo_word = std::min<std::size_t>(lo_word, below.uncertain.front() >> 6);
    hi_word = std::max<std::size_t>(hi_word, below.uncertain.back() >> 6);
  };
  if (below.uncertain.empty()) return;
  // Callers of (rule, origin): items of the origin set with a call edge to the rule, as (the rule, the
  // caller's origin, the caller's rule, the state it returns to), sorted. Callers in one rule at one
  // origin are one level of the chain, all their return states together: they share their own callers,
  // so the rest of a token is walked once from all of them (a rule whose parse paths diverge, such as an
  // object with dependent properties, may call the same rule from hundreds of states at one position).
  // The buffer is reused per recursion depth (sized once: a resize here would move the vectors of the
  // frames below).
  std::vector<std::array<std::uint32_t, 4>>& parents = scratch_->parents[depth];
  parents.clear();
  const Scratch::CallersAt* index = nullptr;
  for (std::size_t i = 0; i < scratch_->n_callers_at && index == nullptr; ++i)
    if (scratch_->callers_at[i].origin == origin) index = &scratch_->callers_at[i];
  const bool asked_before =
      index == nullptr && std::find(scratch_->asked_once.begin(), scratch_->asked_once.end(), origin) != scratch_->asked_once.end();
  if (index == nullptr && !asked_before) {
    // The first question to this set: look for this rule's callers only.
    scratch_->asked_once.push_back(origin);
    for (const detail::Item& w : chart_->set(origin)) {
      for (std::uint32_t e = a.call_begin[w.state]; e < a.call_begin[w.state + 1]; ++e) {
        const detail::CallEdge& call = a.call_edges[e];
        if (call.rule == rule) parents.push_back({call.rule, w.origin, a.state_rule[call.target], call.target});
      }
    }
    std::sort(parents.begin(), parents.end());
    parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
  } else {
    if (index == nullptr) {  // asked again: index every call edge of the set
      if (scratch_->n_callers_at == scratch_->callers_at.size()) scratch_->callers_at.emplace_back();
      Scratch::CallersAt& at = scratch_->callers_at[scratch_->n_callers_at++];
      at.origin = origin;
      at.edges.clear();
      for (const detail::Item& w : chart_->set(origin)) {
        for (std::uint32_t e = a.call_begin[w.state]; e < a.call_begin[w.state + 1]; ++e) {
          const detail::CallEdge& call = a.call_edges[e];
          at.edges.push_back({call.rule, w.origin, a.state_rule[call.target], call.target});
        }
      }
      std::sort(at.edges.begin(), at.edges.end());
      at.edges.erase(std::unique(at.edges.begin(), at.edges.end()), at.edges.end());
      index = &at;
    }
    // This rule's range, copied: the recursion below may add sets to the index.
    const auto first = std::lower_bound(index->edges.begin(), index->edges.end(), std::array<std::uint32_t, 4>{rule, 0, 0, 0});
    auto last = first;
    while (last != index->edges.end() && (*last)[0] == rule) ++last;
    parents.assign(first, last);
  }
  if (parents.empty()) {
    // The top-level root item: after it comes the end of the output, which reads nothing. Any other
    // item without a caller cannot occur; check on the chart rather than assume.
    if (!(rule == a.root && origin == 0)) check_all();
    return;
  }
  std::size_t n_groups = 0;
  for (std::size_t i = 0; i < parents.size(); ++i)
    n_groups += i == 0 || parents[i][1] != parents[i - 1][1] || parents[i][2] != parents[i - 1][2];
  if (depth >= Scratch::kMaxChainDepth || n_groups > 256 || budget < n_groups) {
    check_all();
    return;
  }
  budget -= n_groups;
  for (std::size_t i = 0; i < parents.size();) {
    std::size_t j = i;
    while (j < parents.size() && parents[j][1] == parents[i][1] && parents[j][2] == parents[i][2]) ++j;
    const std::size_t level = chain.size();
    chain.push_back(static_cast<std::uint32_t>(j - i));
    for (std::size_t k = i; k < j; ++k) chain.push_back(parents[k][3]);
    std::shared_ptr<const detail::ChainTable> ct =
        impl_->chain_table(chain, std::span<const std::uint32_t>(chain).subspan(level + 1), below);
    if (ct == nullptr) {
      chain.resize(level);
      check_all();
      return;
    }
    if (!ct->accepted_bits.empty()) {
      or_into(mask.data(), ct->accepted_bits.data(), ct->accepted_bits.size());
    } else {
      for (TokenId id : ct->accepted) mask[id >> 5] |= 1u << (id & 31);
    }
    resolve_up(chain, ct->view(), parents[i][2], parents[i][1], depth + 1, budget, mask, lo_word, hi_word);
    chain.resize(level);
    i = j;
  }
}

bool Matcher::accept_token(TokenId id) {
  const Vocabulary& vocab = *impl_->vocabulary;
  if (id < 0 || static_cast<std::size_t>(id) >= vocab.n_rows()) {
    throw InputError(fmt::format("[matcher] accept_token: token id {} is outside [0, {})", id,
                                 vocab.n_rows()));
  }
  if (terminated_) return false;
  const bool text = !vocab.is_special(id) && static_cast<std::size_t>(id) < vocab.n_tokens() &&
                    !vocab.token_bytes(id).empty();
  auto end_of_sequence = [&] {
    if (!vocab.is_eos(id) || !can_stop()) return false;
    history_.push_back(static_cast<std::uint32_t>(chart_->n_sets()));
    terminated_ = true;
    return true;
  };
  // Token terminals of the last set that read this id, if any (an end-of-sequence id they name is read
  // as a token, not as the end).
  std::vector<std::uint8_t>& in_set = scratch_->in_set;
  bool by_token = false;
  if (!impl_->token_sets.empty() && chart_->last_has_tokens()) {
    in_set.assign(impl_->token_sets.size(), 0);
    for (std::size_t s = 0; s < in_set.size(); ++s) {
      in_set[s] = impl_->token_sets[s].contains(id) ? 1 : 0;
      by_token = by_token || in_set[s] != 0;
    }
  }
  if (!by_token) {
    if (vocab.is_eos(id)) return end_of_sequence();
    return text && accept_bytes(vocab.token_bytes(id));
  }
  // Its bytes, when it is text, and the token edges, together: the parses of both continue.
  const std::size_t base = chart_->n_sets();
  bool bytes_read = text;
  if (text) {
    for (const unsigned char c : vocab.token_bytes(id)) {
      if (!chart_->push(c)) {
        chart_->truncate(base);
        bytes_read = false;
        break;
      }
    }
  }
  const bool scanned = chart_->scan_token(base - 1, in_set, bytes_read);
  if (!scanned && !bytes_read) return end_of_sequence();  // (no item of the last set has such an edge)
  history_.push_back(static_cast<std::uint32_t>(base));
  return true;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  const std::size_t base = chart_->n_sets();
  for (unsigned char c : bytes) {
    if (!chart_->push(c)) {
      chart_->truncate(base);
      return false;
    }
  }
  history_.push_back(static_cast<std::uint32_t>(base));
  return true;
}

void Matcher::rollback(std::size_t n) {
  if (n > history_.size()) {
    throw InputError(fmt::format("[matcher] rollback: {} steps requested, only {} accepted", n,
                                 history_.size()));
  }
  if (n == 0) return;
  const std::uint32_t n_sets = history_[history_.size() - n];
  history_.resize(history_.size() - n);
  chart_->truncate(n_sets);
  terminated_ = false;
}

std::string Matcher::forced_continuation(std::size_t max_bytes) {
  std::string out;
  if (terminated_) return out;
  const detail::Automaton& a = impl_->automaton;
  detail::Chart& c = *chart_;
  const std::size_t base = c.n_sets();
  while (out.size() < max_bytes && !last_can_stop(a, c) && !c.last_has_tokens()) {
    int only = -1;
    bool several = false;
    for (const detail::Item& it : c.last()) {
      for (std::uint32_t e = a.byte_begin[it.state]; e < a.byte_begin[it.state + 1] && !several; ++e) {
        const detail::ByteEdge& be = a.byte_edges[e];
        if (be.lo != be.hi || (only >= 0 && only != be.lo)) {
          several = true;
        } else {
          only = be.lo;
        }
      }
      if (several) break;
    }
    if (several || only < 0 || !c.push(static_cast<std::uint8_t>(only))) break;
    out.push_back(static_cast<char>(only));
  }
  c.truncate(base);
  return out;
}

void fill_next_token_bitmasks(std::span<Matcher* const> matchers, std::span<std::uint32_t> masks,
                              ThreadPool* pool) {
  if (matchers.empty()) return;
  const std::size_t words = matchers[0]->mask_words();
  for (std::size_t i = 0; i < matchers.size(); ++i) {
    if (matchers[i] == nullptr || matchers[i]->mask_words() != words) {
      throw InputError(fmt::format("[matcher] fill_next_token_bitmasks: matcher {} is null or has "
                                   "another vocabulary size",
                                   i));
    }
  }
  if (masks.size() < matchers.size() * words) {
    throw InputError(fmt::format("[matcher] fill_next_token_bitmasks: {} words for {} matchers of {} "
                                 "words each",
                                 masks.size(), matchers.size(), words));
  }
  auto one = [&](std::size_t i) { matchers[i]->fill_next_token_bitmask(masks.subspan(i * words, words)); };
  if (pool == nullptr || matchers.size() == 1) {
    for (std::size_t i = 0; i < matchers.size(); ++i) one(i);
  } else {
    pool->parallel_for(matchers.size(), one);
  }
}

}  // namespace pse
