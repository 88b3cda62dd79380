#include "code_point_dfa.h"

#include <algorithm>
#include <array>
#include <map>
#include <span>
#include <unordered_map>

#include "u32_hash.h"

namespace pse::detail {
namespace {

constexpr std::uint32_t kSurrogateLo = 0xD800;
constexpr std::uint32_t kSurrogateHi = 0xDFFF;

struct TooBig {};  // thrown inside a builder past its bound, caught at the entry point

const std::vector<CharRange>& all_scalars() {
  static const std::vector<CharRange> all = {{0, kSurrogateLo - 1}, {kSurrogateHi + 1, kMaxCodePoint}};
  return all;
}

}  // namespace

std::vector<CharRange> scalar_ranges(const std::vector<CharRange>& ranges, bool negated) {
  std::vector<CharRange> sorted = ranges;
  std::sort(sorted.begin(), sorted.end(), [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  std::vector<CharRange> merged;
  for (const CharRange& r : sorted) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  std::vector<CharRange> out;
  if (negated) {
    std::uint32_t next = 0;
    for (const CharRange& r : merged) {
      if (r.lo > next) out.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  } else {
    out = std::move(merged);
  }
  std::vector<CharRange> clean;
  for (const CharRange& r : out) {
    const std::uint32_t hi = std::min(r.hi, kMaxCodePoint);
    if (r.lo > hi) continue;
    if (hi < kSurrogateLo || r.lo > kSurrogateHi) {
      clean.push_back({r.lo, hi});
    } else {
      if (r.lo < kSurrogateLo) clean.push_back({r.lo, kSurrogateLo - 1});
      if (hi > kSurrogateHi) clean.push_back({kSurrogateHi + 1, hi});
    }
  }
  return clean;
}

std::optional<std::u32string> decode_utf8(const std::string& s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return std::nullopt;
    std::uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c >> 6) != 2) return std::nullopt;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr std::uint32_t kMinOf[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinOf[n] || cp > kMaxCodePoint || (cp >= kSurrogateLo && cp <= kSurrogateHi)) return std::nullopt;
    out.push_back(cp);
    i += n;
  }
  return out;
}

namespace {

// A Thompson NFA over code point ranges.
class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, std::size_t max_states) : g_(g), max_states_(max_states) {}

  struct Nfa {
    std::vector<std::vector<std::uint32_t>> eps;
    std::vector<std::vector<CodePointDfa::Edge>> moves;
    std::uint32_t start = 0, final = 0;
  };

  Nfa build(ExprId root) {
    nfa_.start = new_state();
    nfa_.final = emit(root, nfa_.start, 0);
    return std::move(nfa_);
  }

 private:
  std::uint32_t new_state() {
    if (nfa_.eps.size() >= max_states_) throw TooBig{};
    nfa_.eps.emplace_back();
    nfa_.moves.emplace_back();
    return static_cast<std::uint32_t>(nfa_.eps.size() - 1);
  }
  std::uint32_t fresh_from(std::uint32_t from) {
    const std::uint32_t s = new_state();
    nfa_.eps[from].push_back(s);
    return s;
  }

  std::uint32_t emit(ExprId id, std::uint32_t entry, int depth) {
    if (depth > 1000) throw TooBig{};
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty:
        return entry;
      case ExprKind::kBytes: {
        const auto text = decode_utf8(e.bytes);
        if (!text) throw TooBig{};
        std::uint32_t cur = entry;
        for (char32_t cp : *text) {
          const std::uint32_t next = new_state();
          nfa_.moves[cur].push_back({static_cast<std::uint32_t>(cp), static_cast<std::uint32_t>(cp), next});
          cur = next;
        }
        return cur;
      }
      case ExprKind::kCharClass: {
        const std::uint32_t exit = new_state();
        for (const CharRange& r : scalar_ranges(e.ranges, e.negated)) nfa_.moves[entry].push_back({r.lo, r.hi, exit});
        return exit;
      }
      case ExprKind::kSequence: {
        std::uint32_t cur = entry;
        for (ExprId c : e.children) cur = emit(c, cur, depth + 1);
        return cur;
      }
      case ExprKind::kChoice: {
        const std::uint32_t exit = new_state();
        for (ExprId c : e.children) nfa_.eps[emit(c, fresh_from(entry), depth + 1)].push_back(exit);
        return exit;
      }
      case ExprKind::kRepeat: {
        const ExprId c = e.children.at(0);
        std::uint32_t cur = entry;
        for (std::uint32_t i = 0; i < e.min; ++i) cur = emit(c, fresh_from(cur), depth + 1);
        if (e.max == kUnbounded) {
          const std::uint32_t loop = fresh_from(cur);
          nfa_.eps[emit(c, fresh_from(loop), depth + 1)].push_back(loop);
          return loop;
        }
        const std::uint32_t exit = new_state();
        for (std::uint32_t i = e.min; i < e.max; ++i) {
          nfa_.eps[cur].push_back(exit);
          cur = emit(c, fresh_from(cur), depth + 1);
        }
        nfa_.eps[cur].push_back(exit);
        return exit;
      }
      case ExprKind::kRuleRef:
      case ExprKind::kGraph:
      case ExprKind::kToken:
        throw TooBig{};
    }
    return entry;
  }

  const Grammar& g_;
  std::size_t max_states_;
  Nfa nfa_;
};

// Adds `edge` after the last edge of `edges`, merging it into that one when contiguous with the same target.
void append_edge(std::vector<CodePointDfa::Edge>& edges, const CodePointDfa::Edge& edge) {
  if (!edges.empty() && edges.back().target == edge.target && edges.back().hi + 1 == edge.lo) {
    edges.back().hi = edge.hi;
  } else {
    edges.push_back(edge);
  }
}

}  // namespace

bool CodePointDfa::accepts(const std::u32string& text) const {
  if (empty()) return false;
  std::uint32_t s = 0;
  for (char32_t cp : text) {
    const auto& out = edges[s];
    auto it = std::upper_bound(out.begin(), out.end(), static_cast<std::uint32_t>(cp),
                               [](std::uint32_t v, const Edge& e) { return v < e.lo; });
    if (it == out.begin() || std::prev(it)->hi < cp) return false;
    s = std::prev(it)->target;
  }
  return accepting[s] != 0;
}

std::optional<CodePointDfa> dfa_from_expr(const Grammar& g, ExprId root, std::size_t max_states) {
  NfaBuilder::Nfa nfa;
  try {
    nfa = NfaBuilder(g, max_states * 8).build(root);
  } catch (const TooBig&) {
    return std::nullopt;
  }
  const std::size_t n = nfa.eps.size();
  // Subset construction; each DFA state is the epsilon closure of a set of NFA states, kept as the
  // members that matter: those with moves, and the final state (the rest of a closure changes neither
  // where the set goes nor whether it accepts). Sets equal on those are one DFA state.
  std::vector<std::uint8_t> in_set(n, 0);
  std::vector<std::uint32_t> stack, reached;
  auto closure = [&](const std::vector<std::uint32_t>& from) {
    reached.assign(from.begin(), from.end());
    stack.assign(from.begin(), from.end());
    for (std::uint32_t s : from) in_set[s] = 1;
    while (!stack.empty()) {
      const std::uint32_t s = stack.back();
      stack.pop_back();
      for (std::uint32_t t : nfa.eps[s]) {
        if (!in_set[t]) {
          in_set[t] = 1;
          reached.push_back(t);
          stack.push_back(t);
        }
      }
    }
    std::vector<std::uint32_t> set;
    for (std::uint32_t s : reached) {
      in_set[s] = 0;
      if (!nfa.moves[s].empty() || s == nfa.final) set.push_back(s);
    }
    std::sort(set.begin(), set.end());
    return set;
  };
  CodePointDfa dfa;
  std::unordered_map<std::vector<std::uint32_t>, std::uint32_t, U32VectorHash> ids;
  std::vector<std::vector<std::uint32_t>> sets;
  auto id_of = [&](std::vector<std::uint32_t> set) -> std::optional<std::uint32_t> {
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    if (sets.size() >= max_states) return std::nullopt;
    const auto id = static_cast<std::uint32_t>(sets.size());
    ids.emplace(set, id);
    sets.push_back(std::move(set));
    return id;
  };
  (void)id_of(closure({nfa.start}));
  std::unordered_map<std::vector<std::uint32_t>, std::uint32_t, U32VectorHash> moved;  // raw target set -> DFA state
  // Sweep the members' ranges: each stretch of code points with the same set of NFA targets. Targets
  // are counted (count[t] > 0: active); the active ones are listed once each, the list compacted when
  // read.
  struct Event {
    std::uint32_t at;
    int delta;
    std::uint32_t target;
  };
  std::vector<Event> events;
  std::vector<int> count(n, 0);
  std::vector<std::uint32_t> listed, targets;
  std::vector<std::uint8_t> is_listed(n, 0);
  for (std::size_t d = 0; d < sets.size(); ++d) {
    events.clear();
    for (std::uint32_t s : sets[d]) {
      for (const auto& m : nfa.moves[s]) {
        events.push_back({m.lo, +1, m.target});
        events.push_back({m.hi + 1, -1, m.target});
      }
    }
    std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.at < b.at; });
    std::vector<CodePointDfa::Edge> out;
    std::size_t n_active = 0;
    for (std::size_t i = 0; i < events.size();) {
      const std::uint32_t at = events[i].at;
      for (; i < events.size() && events[i].at == at; ++i) {
        const std::uint32_t t = events[i].target;
        const int before = count[t];
        count[t] += events[i].delta;
        if (before == 0 && count[t] > 0) {
          ++n_active;
          if (!is_listed[t]) {
            is_listed[t] = 1;
            listed.push_back(t);
          }
        } else if (before > 0 && count[t] == 0) {
          --n_active;
        }
      }
      if (n_active == 0 || i == events.size()) continue;
      targets.clear();
      std::size_t kept = 0;
      for (std::uint32_t t : listed) {
        if (count[t] > 0) {
          listed[kept++] = t;
          targets.push_back(t);
        } else {
          is_listed[t] = 0;
        }
      }
      listed.resize(kept);
      std::sort(targets.begin(), targets.end());
      std::uint32_t target = 0;
      if (auto it = moved.find(targets); it != moved.end()) {
        target = it->second;
      } else {
        const auto id = id_of(closure(targets));
        if (!id) return std::nullopt;
        moved.emplace(targets, *id);
        target = *id;
      }
      append_edge(out, {at, events[i].at - 1, target});
    }
    for (std::uint32_t t : listed) is_listed[t] = 0;  // every count is back to 0 at the last event
    listed.clear();
    dfa.edges.push_back(std::move(out));
  }
  for (const auto& set : sets) dfa.accepting.push_back(std::binary_search(set.begin(), set.end(), nfa.final) ? 1 : 0);
  return intersect({std::move(dfa)}, max_states);  // trimmed
}

std::optional<CodePointDfa> dfa_of_length(std::uint32_t min, std::uint32_t max, std::size_t max_states) {
  const std::uint64_t top = max == kUnbounded ? min : max;  // the last state
  if (min > max || top + 1 > max_states) return std::nullopt;
  CodePointDfa dfa;
  for (std::uint64_t i = 0; i <= top; ++i) {
    std::vector<CodePointDfa::Edge> out;
    if (i < top || max == kUnbounded) {
      const auto next = static_cast<std::uint32_t>(i < top ? i + 1 : i);
      for (const CharRange& r : all_scalars()) out.push_back({r.lo, r.hi, next});
    }
    dfa.edges.push_back(std::move(out));
    dfa.accepting.push_back(i >= min ? 1 : 0);
  }
  return dfa;
}

std::optional<CodePointDfa> dfa_excluding(const std::vector<std::string>& excluded, std::size_t max_states) {
  // A trie of the excluded strings; every code point off the trie leads to `free` (accepts anything).
  std::vector<std::map<std::uint32_t, std::uint32_t>> children(1);
  std::vector<std::uint8_t> ends(1, 0);
  for (const std::string& text : excluded) {
    const auto cps = decode_utf8(text);
    if (!cps) return std::nullopt;
    std::uint32_t node = 0;
    for (char32_t cp : *cps) {
      auto it = children[node].find(cp);
      if (it == children[node].end()) {
        if (children.size() + 1 >= max_states) return std::nullopt;
        it = children[node].emplace(cp, static_cast<std::uint32_t>(children.size())).first;
        children.emplace_back();
        ends.push_back(0);
      }
      node = it->second;
    }
    ends[node] = 1;
  }
  const auto free = static_cast<std::uint32_t>(children.size());
  CodePointDfa dfa;
  for (std::uint32_t node = 0; node <= free; ++node) {
    std::vector<CodePointDfa::Edge> out;
    std::uint32_t next = 0;  // the first code point not yet given an edge
    auto gap_to = [&](std::uint32_t end) {  // [next, end) to `free`, scalar values only
      for (const CharRange& r : all_scalars()) {
        const std::uint32_t lo = std::max(r.lo, next);
        const std::uint32_t hi = end == 0 ? 0 : std::min(r.hi, end - 1);
        if (end > 0 && lo <= hi) append_edge(out, {lo, hi, free});
      }
    };
    if (node < free) {
      for (const auto& [cp, child] : children[node]) {
        gap_to(cp);
        append_edge(out, {cp, cp, child});
        next = cp + 1;
      }
    }
    gap_to(kMaxCodePoint + 1);
    dfa.edges.push_back(std::move(out));
    dfa.accepting.push_back(node < free && ends[node] ? 0 : 1);
  }
  return dfa;
}

namespace {

// The states of `dfa` reachable from its start, numbered in the order the product construction meets
// them (breadth first, edges in order), so that one DFA and a product of one number alike. nullopt past
// max_states.
std::optional<CodePointDfa> reachable_part(const CodePointDfa& dfa, std::size_t max_states) {
  constexpr std::uint32_t kNew = ~0u;
  std::vector<std::uint32_t> number(dfa.n_states(), kNew), order{0};
  number[0] = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    for (const auto& e : dfa.edges[order[i]]) {
      if (number[e.target] != kNew) continue;
      if (order.size() >= max_states) return std::nullopt;
      number[e.target] = static_cast<std::uint32_t>(order.size());
      order.push_back(e.target);
    }
  }
  CodePointDfa out;
  out.edges.resize(order.size());
  out.accepting.resize(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& edges = dfa.edges[order[i]];
    out.edges[i].reserve(edges.size());
    for (const auto& e : edges) append_edge(out.edges[i], {e.lo, e.hi, number[e.target]});
    out.accepting[i] = dfa.accepting[order[i]];
  }
  return out;
}

// The product of the DFAs, from the tuple of their starts: every state reachable, not trimmed. nullopt
// past max_states. Tuples, their index and the ranges being merged live in flat arrays (a vector per
// tuple and per range was most of the cost of intersecting key patterns).
std::optional<CodePointDfa> product_of(const std::vector<CodePointDfa>& dfas, std::size_t max_states) {
  const std::size_t k = dfas.size();
  CodePointDfa out;
  std::vector<std::uint32_t> tuples;      // state s's tuple: tuples[s * k .. s * k + k)
  std::vector<std::uint32_t> slots(64, 0);  // open addressing over the tuples: state + 1, 0 = empty
  auto tuple_hash = [&](const std::uint32_t* t) { return hash_u32s(std::span<const std::uint32_t>(t, k)); };
  // The id of tuple t (not a pointer into `tuples`, which grows here), added when new.
  auto id_of = [&](const std::uint32_t* t) -> std::optional<std::uint32_t> {
    std::size_t mask = slots.size() - 1;
    std::size_t slot = tuple_hash(t) & mask;
    for (; slots[slot] != 0; slot = (slot + 1) & mask) {
      const auto at = tuples.begin() + static_cast<std::ptrdiff_t>((slots[slot] - 1) * k);
      if (std::equal(t, t + k, at)) return slots[slot] - 1;
    }
    const std::size_t n = tuples.size() / k;
    if (n >= max_states) return std::nullopt;
    tuples.insert(tuples.end(), t, t + k);
    slots[slot] = static_cast<std::uint32_t>(n + 1);
    if (2 * (n + 1) > slots.size()) {  // at most half full
      slots.assign(slots.size() * 2, 0);
      mask = slots.size() - 1;
      for (std::size_t i = 0; i <= n; ++i) {
        std::size_t j = tuple_hash(tuples.data() + i * k) & mask;
        while (slots[j] != 0) j = (j + 1) & mask;
        slots[j] = static_cast<std::uint32_t>(i + 1);
      }
    }
    return static_cast<std::uint32_t>(n);
  };
  const std::vector<std::uint32_t> start(k, 0);
  (void)id_of(start.data());
  // The ranges where every component so far moves, with their targets (width k, filled up to the
  // component merged); two-pointer merges from one buffer into the other.
  struct Range {
    std::uint32_t lo, hi;
  };
  std::vector<Range> ranges, next;
  std::vector<std::uint32_t> targets, next_targets, here(k);
  for (std::size_t s = 0; s < tuples.size() / k; ++s) {
    std::copy_n(tuples.begin() + static_cast<std::ptrdiff_t>(s * k), k, here.begin());
    bool accepting = true;
    for (std::size_t c = 0; c < k; ++c) accepting = accepting && dfas[c].accepting[here[c]] != 0;
    ranges.clear();
    targets.clear();
    for (const auto& e : dfas[0].edges[here[0]]) {
      ranges.push_back({e.lo, e.hi});
      targets.push_back(e.target);
      targets.resize(targets.size() + k - 1);
    }
    for (std::size_t c = 1; c < k && !ranges.empty(); ++c) {
      const auto& edges = dfas[c].edges[here[c]];
      next.clear();
      next_targets.clear();
      std::size_t i = 0, j = 0;
      while (i < ranges.size() && j < edges.size()) {
        const std::uint32_t lo = std::max(ranges[i].lo, edges[j].lo);
        const std::uint32_t hi = std::min(ranges[i].hi, edges[j].hi);
        if (lo <= hi) {
          next.push_back({lo, hi});
          next_targets.insert(next_targets.end(), targets.begin() + static_cast<std::ptrdiff_t>(i * k),
                              targets.begin() + static_cast<std::ptrdiff_t>(i * k + k));
          next_targets[(next.size() - 1) * k + c] = edges[j].target;
        }
        if (ranges[i].hi < edges[j].hi) {
          ++i;
        } else {
          ++j;
        }
      }
      ranges.swap(next);
      targets.swap(next_targets);
    }
    std::vector<CodePointDfa::Edge> edges;
    edges.reserve(ranges.size());
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const auto id = id_of(targets.data() + i * k);
      if (!id) return std::nullopt;
      append_edge(edges, {ranges[i].lo, ranges[i].hi, *id});
    }
    out.edges.push_back(std::move(edges));
    out.accepting.push_back(accepting ? 1 : 0);
  }
  return out;
}

// The states from which acceptance is reachable (all are reachable from the start).
CodePointDfa trim(const CodePointDfa& out) {
  // The predecessors in one flat array (a vector per state was an allocation per state).
  const std::size_t n = out.n_states();
  std::vector<std::uint32_t> pred_begin(n + 1, 0), preds;
  for (std::uint32_t s = 0; s < n; ++s)
    for (const auto& e : out.edges[s]) ++pred_begin[e.target + 1];
  for (std::size_t s = 0; s < n; ++s) pred_begin[s + 1] += pred_begin[s];
  preds.resize(pred_begin[n]);
  {
    std::vector<std::uint32_t> fill(pred_begin.begin(), pred_begin.end() - 1);
    for (std::uint32_t s = 0; s < n; ++s)
      for (const auto& e : out.edges[s]) preds[fill[e.target]++] = s;
  }
  std::vector<std::uint8_t> live(n, 0);
  std::vector<std::uint32_t> stack;
  for (std::uint32_t s = 0; s < n; ++s)
    if (out.accepting[s]) live[s] = 1, stack.push_back(s);
  while (!stack.empty()) {
    const std::uint32_t s = stack.back();
    stack.pop_back();
    for (std::uint32_t i = pred_begin[s]; i < pred_begin[s + 1]; ++i)
      if (const std::uint32_t p = preds[i]; !live[p]) live[p] = 1, stack.push_back(p);
  }
  if (!live[0]) return CodePointDfa{};
  std::vector<std::uint32_t> renumber(n, 0);
  std::uint32_t kept = 0;
  for (std::uint32_t s = 0; s < n; ++s)
    if (live[s]) renumber[s] = kept++;
  CodePointDfa trimmed;
  for (std::uint32_t s = 0; s < n; ++s) {
    if (!live[s]) continue;
    std::vector<CodePointDfa::Edge> edges;
    for (const auto& e : out.edges[s])
      if (live[e.target]) append_edge(edges, {e.lo, e.hi, renumber[e.target]});
    trimmed.edges.push_back(std::move(edges));
    trimmed.accepting.push_back(out.accepting[s]);
  }
  return trimmed;
}

}  // namespace

std::optional<CodePointDfa> intersect(const std::vector<CodePointDfa>& dfas, std::size_t max_states) {
  for (const auto& d : dfas)
    if (d.empty()) return CodePointDfa{};
  // One DFA is only trimmed: the product's tuples of one component cost an allocation per edge (a fifth
  // of building a date-time format's DFA).
  auto reached = dfas.size() == 1 ? reachable_part(dfas[0], max_states) : product_of(dfas, max_states);
  if (!reached) return std::nullopt;
  return trim(*reached);
}

std::optional<CodePointDfa> complement(const CodePointDfa& dfa, std::size_t max_states) {
  // Complete the DFA with a rejecting sink (every missing code point leads there), then flip acceptance.
  const auto sink = static_cast<std::uint32_t>(dfa.n_states());
  if (sink + 1 > max_states) return std::nullopt;
  CodePointDfa full;
  for (std::uint32_t s = 0; s <= sink; ++s) {
    std::vector<CodePointDfa::Edge> out;
    std::uint32_t next = 0;  // the first code point not yet given an edge
    auto gap_to = [&](std::uint64_t end) {
      for (const CharRange& r : all_scalars()) {
        const std::uint32_t lo = std::max(r.lo, next);
        const std::uint64_t hi = std::min<std::uint64_t>(r.hi, end - 1);
        if (end > 0 && lo <= hi) append_edge(out, {lo, static_cast<std::uint32_t>(hi), sink});
      }
    };
    if (s < sink) {
      for (const auto& e : dfa.edges[s]) {
        gap_to(e.lo);
        append_edge(out, e);
        next = e.hi + 1;
      }
    }
    gap_to(std::uint64_t{kMaxCodePoint} + 1);
    full.edges.push_back(std::move(out));
    full.accepting.push_back(s < sink && dfa.accepting[s] ? 0 : 1);
  }
  return intersect({std::move(full)}, max_states);
}

CodePointDfa minimize(const CodePointDfa& dfa) {
  const std::size_t n = dfa.n_states();
  if (n == 0) return dfa;
  constexpr std::uint32_t kDead = ~0u;
  // Moore: split classes by (class, the class each code point leads to) until no class splits. A
  // state's signature is its class, then its edges as (lo, hi, target's class) with neighbours of one
  // class merged: the same for two states exactly when their moves agree class-wise on every code
  // point, and as long as the state's edges (not the DFA's count of distinct intervals). States are
  // grouped by the signature's hash, and a state joins the class of the first state of its group with
  // an equal signature.
  std::vector<std::uint32_t> cls(n);
  for (std::uint32_t s = 0; s < n; ++s) cls[s] = dfa.accepting[s] ? 1 : 0;
  std::vector<std::uint32_t> sig, sig_begin(n + 1);
  auto sig_of = [&](std::uint32_t s) {
    return std::span<const std::uint32_t>(sig.data() + sig_begin[s], sig_begin[s + 1] - sig_begin[s]);
  };
  std::size_t n_classes = 0;
  std::vector<std::uint32_t> next(n), later(n);  // later: the next state of the same hash group
  std::unordered_map<std::uint64_t, std::uint32_t> group;  // signature hash -> its group's first state
  group.reserve(n);
  for (;;) {
    sig.clear();
    for (std::uint32_t s = 0; s < n; ++s) {
      sig_begin[s] = static_cast<std::uint32_t>(sig.size());
      sig.push_back(cls[s]);
      for (const auto& e : dfa.edges[s]) {
        const std::uint32_t c = cls[e.target];
        const std::size_t m = sig.size();
        if (m - sig_begin[s] > 1 && sig[m - 1] == c && sig[m - 2] + 1 == e.lo) {
          sig[m - 2] = e.hi;
        } else {
          sig.insert(sig.end(), {e.lo, e.hi, c});
        }
      }
    }
    sig_begin[n] = static_cast<std::uint32_t>(sig.size());
    group.clear();
    std::uint32_t ids = 0;
    for (std::uint32_t s = 0; s < n; ++s) {
      const auto mine = sig_of(s);
      std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ mine.size();
      for (const std::uint32_t v : mine) h = (h ^ v) * 0xff51afd7ed558ccdULL;
      later[s] = kDead;
      auto [it, fresh] = group.try_emplace(h ^ (h >> 31), s);
      std::uint32_t q = it->second, last = q;
      for (; !fresh && q != kDead; last = q, q = later[q]) {
        const auto theirs = sig_of(q);
        if (std::equal(mine.begin(), mine.end(), theirs.begin(), theirs.end())) break;
      }
      if (!fresh && q != kDead) {
        next[s] = next[q];
      } else {
        next[s] = ids++;
        if (!fresh) later[last] = s;
      }
    }
    cls.swap(next);
    if (ids == n_classes) break;
    n_classes = ids;
  }
  // Number the classes in order of first appearance from state 0, so the start stays state 0.
  std::vector<std::uint32_t> number(n_classes, kDead);
  std::vector<std::uint32_t> representative;
  for (std::uint32_t s = 0; s < n; ++s) {
    if (number[cls[s]] == kDead) {
      number[cls[s]] = static_cast<std::uint32_t>(representative.size());
      representative.push_back(s);
    }
  }
  CodePointDfa out;
  for (std::uint32_t rep : representative) {
    std::vector<CodePointDfa::Edge> edges;
    for (const auto& e : dfa.edges[rep]) append_edge(edges, {e.lo, e.hi, number[cls[e.target]]});
    out.edges.push_back(std::move(edges));
    out.accepting.push_back(dfa.accepting[rep]);
  }
  return out;
}

std::optional<std::pair<std::uint32_t, std::uint32_t>> length_range(const CodePointDfa& dfa) {
  const std::size_t n = dfa.n_states();
  if (n == 0) return std::nullopt;
  // Shortest: breadth-first from the start.
  std::vector<std::uint32_t> dist(n, kUnbounded);
  std::vector<std::uint32_t> queue{0};
  dist[0] = 0;
  std::uint32_t shortest = kUnbounded;
  for (std::size_t i = 0; i < queue.size(); ++i) {
    const std::uint32_t s = queue[i];
    if (dfa.accepting[s]) shortest = std::min(shortest, dist[s]);
    for (const auto& e : dfa.edges[s]) {
      if (dist[e.target] == kUnbounded) {
        dist[e.target] = dist[s] + 1;
        queue.push_back(e.target);
      }
    }
  }
  // Longest: unbounded with any cycle (every state is reachable and live), else a longest path.
  std::vector<std::uint8_t> mark(n, 0);
  std::vector<std::uint32_t> longest(n, 0);
  std::vector<std::pair<std::uint32_t, std::size_t>> stack{{0, 0}};
  mark[0] = 1;
  while (!stack.empty()) {
    auto& [s, next] = stack.back();
    if (next < dfa.edges[s].size()) {
      const std::uint32_t t = dfa.edges[s][next++].target;
      if (mark[t] == 1) return std::make_pair(shortest, kUnbounded);
      if (mark[t] == 0) {
        mark[t] = 1;
        stack.push_back({t, 0});
      }
      continue;
    }
    std::uint32_t best = 0;
    for (const auto& e : dfa.edges[s]) best = std::max(best, longest[e.target] + 1);
    longest[s] = best;
    mark[s] = 2;
    stack.pop_back();
  }
  return std::make_pair(shortest, longest[0]);
}

ExprId dfa_to_expr(const CodePointDfa& dfa, Grammar& g,
                   const std::function<ExprId(const std::vector<CharRange>&)>& chars, bool minimal) {
  std::map<std::vector<std::pair<std::uint32_t, std::uint32_t>>, std::uint32_t> label_of;
  std::vector<ExprId> labels;
  std::vector<GraphEdge> edges;
  std::vector<std::uint32_t> accepting;
  std::vector<std::array<std::uint32_t, 3>> by_target;  // (target, lo, hi) of one state's edges, sorted
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;
  for (std::uint32_t s = 0; s < dfa.n_states(); ++s) {
    if (dfa.accepting[s]) accepting.push_back(s);
    by_target.clear();
    for (const auto& e : dfa.edges[s]) by_target.push_back({e.target, e.lo, e.hi});
    std::sort(by_target.begin(), by_target.end());
    for (std::size_t i = 0; i < by_target.size();) {
      const std::uint32_t target = by_target[i][0];
      ranges.clear();
      for (; i < by_target.size() && by_target[i][0] == target; ++i) ranges.push_back({by_target[i][1], by_target[i][2]});
      auto it = label_of.find(ranges);
      if (it == label_of.end()) {
        std::vector<CharRange> cr;
        for (const auto& [lo, hi] : ranges) cr.push_back({lo, hi});
        labels.push_back(chars(cr));
        it = label_of.emplace(ranges, static_cast<std::uint32_t>(labels.size() - 1)).first;
      }
      edges.push_back({s, target, it->second});
    }
  }
  return g.add_graph(static_cast<std::uint32_t>(dfa.n_states()), std::move(edges), std::move(accepting),
                     std::move(labels), minimal);
}

}  // namespace pse::detail
