#include "state_classes.h"

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "pse/error.h"
#include "u32_hash.h"

namespace pse::detail {

namespace {

// What every state does before reading its next byte: the byte and call edges of the states it reaches
// without input (epsilon moves, and calls of rules that may match nothing), and whether its rule's end is
// among them. Flat arrays (an edge list per state, one allocation in all): per-state vectors made the
// refinement spend most of its time in malloc and free.
struct Closures {
  static constexpr std::uint32_t kCall = 1u << 31;  // marks a call edge's label (a rule id) in `edges`
  std::vector<std::uint32_t> begin;                 // per state, into edges; n + 1 entries
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;  // (label, target): bytes lo << 8 | hi, or kCall | rule
  std::vector<std::uint8_t> alone;                  // over the size bound: never merged
  std::vector<std::uint8_t> final;
};

Closures closures_of(const Automaton& a, std::size_t max_closure, const std::function<void()>& check_deadline) {
  const std::size_t n = a.n_states();
  Closures c;
  c.begin.reserve(n + 1);
  c.alone.assign(n, 0);
  c.final.assign(n, 0);
  std::vector<std::uint32_t> seen(n, ~0u);
  std::vector<std::uint32_t> work;
  for (std::uint32_t s = 0; s < n; ++s) {
    check_deadline();
    c.begin.push_back(static_cast<std::uint32_t>(c.edges.size()));
    work.assign(1, s);
    seen[s] = s;
    std::size_t visited = 0;
    bool final = false;
    while (!work.empty()) {
      const std::uint32_t t = work.back();
      work.pop_back();
      if (++visited > max_closure) {
        c.alone[s] = 1;
        break;
      }
      final = final || a.is_final(t);
      for (std::uint32_t i = a.byte_begin[t]; i < a.byte_begin[t + 1]; ++i) {
        const ByteEdge& e = a.byte_edges[i];
        c.edges.emplace_back(std::uint32_t{e.lo} << 8 | e.hi, e.target);
      }
      auto visit = [&](std::uint32_t u) {
        if (seen[u] != s) {
          seen[u] = s;
          work.push_back(u);
        }
      };
      for (std::uint32_t i = a.eps_begin[t]; i < a.eps_begin[t + 1]; ++i) visit(a.eps_edges[i]);
      for (std::uint32_t i = a.call_begin[t]; i < a.call_begin[t + 1]; ++i) {
        const CallEdge& e = a.call_edges[i];
        c.edges.emplace_back(Closures::kCall | e.rule, e.target);
        if (a.rule_nullable[e.rule]) visit(e.target);
      }
    }
    if (c.alone[s]) c.edges.resize(c.begin.back());  // a lone state's signature is empty
    c.final[s] = final ? 1 : 0;
  }
  c.begin.push_back(static_cast<std::uint32_t>(c.edges.size()));
  return c;
}

}  // namespace

std::vector<std::uint32_t> future_classes(const Automaton& a, std::size_t horizon, std::size_t max_closure,
                                          const std::chrono::steady_clock::time_point* deadline) {
  std::size_t work = 0;
  const std::function<void()> check_deadline = [&] {
    if (deadline != nullptr && (++work & 0xFFF) == 0 && std::chrono::steady_clock::now() > *deadline) {
      throw LimitError("[compile] compile time limit exceeded finding the states with the same future");
    }
  };
  const std::size_t n = a.n_states();
  const Closures closures = closures_of(a, max_closure, check_deadline);

  // Round 0: the rule and whether its end is reached without input (lone states keep their own class).
  std::vector<std::uint32_t> cls(n);
  {
    std::unordered_map<std::vector<std::uint32_t>, std::uint32_t, U32VectorHash> ids;
    std::vector<std::uint32_t> key(2);
    for (std::uint32_t s = 0; s < n; ++s) {
      key[0] = closures.alone[s] ? 2u : closures.final[s];
      key[1] = closures.alone[s] ? s : a.state_rule[s];
      cls[s] = ids.emplace(key, static_cast<std::uint32_t>(ids.size())).first->second;
    }
  }
  std::uint32_t n_classes = 0;
  for (std::uint32_t c : cls) n_classes = std::max(n_classes, c + 1);
  std::vector<std::vector<std::uint32_t>> members(n_classes);
  for (std::uint32_t s = 0; s < n; ++s) members[cls[s]].push_back(s);
  // Who reads whose class: a state's signature names the classes of its edges' targets (flat, per target).
  std::vector<std::uint32_t> reader_begin(n + 1, 0), readers(closures.edges.size());
  for (const auto& [label, target] : closures.edges) ++reader_begin[target + 1];
  for (std::size_t t = 0; t < n; ++t) reader_begin[t + 1] += reader_begin[t];
  {
    std::vector<std::uint32_t> fill(reader_begin.begin(), reader_begin.end() - 1);
    for (std::uint32_t s = 0; s < n; ++s)
      for (std::uint32_t i = closures.begin[s]; i < closures.begin[s + 1]; ++i) readers[fill[closures.edges[i].second]++] = s;
  }
  // A state's signature: its edges' labels with their targets' classes, sorted, without repeats; written
  // into a shared buffer and compared there.
  using Edge = std::pair<std::uint32_t, std::uint32_t>;
  std::vector<Edge> sig_buffer;
  auto write_signature = [&](std::uint32_t s) -> std::pair<std::size_t, std::size_t> {  // (begin, size)
    check_deadline();
    const std::size_t b = sig_buffer.size();
    for (std::uint32_t i = closures.begin[s]; i < closures.begin[s + 1]; ++i)
      sig_buffer.emplace_back(closures.edges[i].first, cls[closures.edges[i].second]);
    std::sort(sig_buffer.begin() + static_cast<std::ptrdiff_t>(b), sig_buffer.end());
    sig_buffer.erase(std::unique(sig_buffer.begin() + static_cast<std::ptrdiff_t>(b), sig_buffer.end()), sig_buffer.end());
    return {b, sig_buffer.size() - b};
  };
  auto hash_of = [&](std::size_t b, std::size_t size) {
    std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ size;
    for (std::size_t i = b; i < b + size; ++i)
      h = (((h ^ sig_buffer[i].first) * 0xff51afd7ed558ccdULL) ^ sig_buffer[i].second) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 31);
  };
  // Moore's refinement, Hopcroft-style: round k splits classes by the signatures of round k-1's partition,
  // but only the states that read a state which changed class in round k-1 are looked at again (the
  // others' signatures are unchanged: they keep their class, whose signature is remembered). New class
  // ids are assigned after the round, so every signature of a round reads the same partition. Stops when
  // nothing moves (the bisimulation) or after `horizon` rounds (equal futures up to `horizon` bytes).
  std::vector<std::uint32_t> pos(n);  // index of each state in members[cls[s]]
  for (auto& m : members)
    for (std::size_t i = 0; i < m.size(); ++i) pos[m[i]] = static_cast<std::uint32_t>(i);
  std::vector<std::vector<Edge>> class_sig(members.size());
  std::vector<std::pair<std::uint32_t, std::uint32_t>> assign;  // (state, new class) of this round
  auto take_out = [&](std::uint32_t s, std::uint32_t c) {
    auto& m = members[c];
    const std::uint32_t last = m.back();
    m[pos[s]] = last;
    pos[last] = pos[s];
    m.pop_back();
  };
  auto new_class = [&](std::vector<std::uint32_t> part, std::vector<Edge> sig, std::uint32_t from) {
    const auto id = static_cast<std::uint32_t>(members.size());
    for (std::uint32_t s : part) {
      take_out(s, from);
      assign.emplace_back(s, id);
    }
    for (std::size_t i = 0; i < part.size(); ++i) pos[part[i]] = static_cast<std::uint32_t>(i);
    members.push_back(std::move(part));
    class_sig.push_back(std::move(sig));
  };
  // One part per distinct signature among the states refined, in order of first appearance.
  struct Part {
    std::size_t begin, size;  // the signature, in sig_buffer
    std::vector<std::uint32_t> states;
  };
  std::vector<Part> parts;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> parts_by_hash;
  auto same = [&](std::size_t b1, std::size_t n1, std::size_t b2, std::size_t n2) {
    return n1 == n2 && std::equal(sig_buffer.begin() + static_cast<std::ptrdiff_t>(b1),
                                  sig_buffer.begin() + static_cast<std::ptrdiff_t>(b1 + n1),
                                  sig_buffer.begin() + static_cast<std::ptrdiff_t>(b2));
  };
  // Splits class c by the signatures of `list`, its members looked at again: when that is all of them, the
  // largest part keeps the class; otherwise the members not looked at keep it (and its signature), with
  // those of `list` whose signature is still the class's.
  auto refine = [&](std::uint32_t c, const std::vector<std::uint32_t>& list) {
    if (members[c].size() < 2) return;
    sig_buffer.clear();
    parts.clear();
    parts_by_hash.clear();
    for (std::uint32_t s : list) {
      const auto [b, size] = write_signature(s);
      const std::uint64_t h = hash_of(b, size);
      auto& candidates = parts_by_hash[h];
      bool placed = false;
      for (std::uint32_t p : candidates) {
        if (same(parts[p].begin, parts[p].size, b, size)) {
          parts[p].states.push_back(s);
          sig_buffer.resize(b);  // a known signature: drop the copy
          placed = true;
          break;
        }
      }
      if (!placed) {
        candidates.push_back(static_cast<std::uint32_t>(parts.size()));
        parts.push_back({b, size, {s}});
      }
    }
    auto sig_of = [&](const Part& p) {
      return std::vector<Edge>(sig_buffer.begin() + static_cast<std::ptrdiff_t>(p.begin),
                               sig_buffer.begin() + static_cast<std::ptrdiff_t>(p.begin + p.size));
    };
    std::size_t keep = parts.size();
    if (list.size() == members[c].size()) {
      keep = 0;
      for (std::size_t p = 1; p < parts.size(); ++p)
        if (parts[p].states.size() > parts[keep].states.size()) keep = p;
      class_sig[c] = sig_of(parts[keep]);
    }
    for (std::size_t p = 0; p < parts.size(); ++p) {
      if (p == keep) continue;
      const auto& cs = class_sig[c];
      const bool is_class_sig = parts[p].size == cs.size() &&
                                std::equal(cs.begin(), cs.end(), sig_buffer.begin() + static_cast<std::ptrdiff_t>(parts[p].begin));
      if (!is_class_sig) new_class(std::move(parts[p].states), sig_of(parts[p]), c);
    }
  };
  // Round 1: every class, every member.
  if (horizon > 0) {
    const std::size_t n_initial = members.size();
    for (std::uint32_t c = 0; c < n_initial; ++c) refine(c, std::vector<std::uint32_t>(members[c]));
  }
  std::vector<std::uint32_t> stamp(n, ~0u);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> touched;  // (class, reader) of this round
  std::vector<std::uint32_t> list;
  for (std::size_t round = 1;; ++round) {
    touched.clear();
    for (const auto& [s, id] : assign) cls[s] = id;
    if (assign.empty() || round >= horizon) break;
    // The readers of moved states, by class (classes in increasing order, each class's readers sorted).
    for (const auto& [s, id] : assign) {
      for (std::uint32_t i = reader_begin[s]; i < reader_begin[s + 1]; ++i) {
        const std::uint32_t r = readers[i];
        if (stamp[r] == round) continue;
        stamp[r] = static_cast<std::uint32_t>(round);
        touched.emplace_back(cls[r], r);
      }
    }
    assign.clear();
    std::sort(touched.begin(), touched.end());
    for (std::size_t i = 0; i < touched.size();) {
      const std::uint32_t c = touched[i].first;
      list.clear();
      for (; i < touched.size() && touched[i].first == c; ++i) list.push_back(touched[i].second);
      refine(c, list);
    }
  }
  return cls;
}

}  // namespace pse::detail
