#include "state_classes.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "pse/error.h"
#include "u32_hash.h"

namespace pse::detail {

namespace {

// What a state does before reading its next byte: the byte and call edges of the states it reaches
// without input (epsilon moves, and calls of rules that may match nothing), and whether its rule's end
// is among them.
struct Closure {
  bool alone = false;  // over the size bound: never merged
  bool final = false;
  std::vector<ByteEdge> bytes;
  std::vector<CallEdge> calls;
};

Closure closure_of(const Automaton& a, std::uint32_t s, std::size_t max_closure, std::vector<std::uint32_t>& seen,
                   std::uint32_t stamp) {
  Closure c;
  std::vector<std::uint32_t> work{s};
  seen[s] = stamp;
  std::size_t n = 0;
  while (!work.empty()) {
    const std::uint32_t t = work.back();
    work.pop_back();
    if (++n > max_closure) {
      c.alone = true;
      return c;
    }
    c.final = c.final || a.is_final(t);
    for (std::uint32_t i = a.byte_begin[t]; i < a.byte_begin[t + 1]; ++i) c.bytes.push_back(a.byte_edges[i]);
    auto visit = [&](std::uint32_t u) {
      if (seen[u] != stamp) {
        seen[u] = stamp;
        work.push_back(u);
      }
    };
    for (std::uint32_t i = a.eps_begin[t]; i < a.eps_begin[t + 1]; ++i) visit(a.eps_edges[i]);
    for (std::uint32_t i = a.call_begin[t]; i < a.call_begin[t + 1]; ++i) {
      const CallEdge& e = a.call_edges[i];
      c.calls.push_back(e);
      if (a.rule_nullable[e.rule]) visit(e.target);
    }
  }
  return c;
}

}  // namespace

std::vector<std::uint32_t> future_classes(const Automaton& a, std::size_t horizon, std::size_t max_closure,
                                          const std::chrono::steady_clock::time_point* deadline) {
  std::size_t work = 0;
  auto check_deadline = [&] {
    if (deadline != nullptr && (++work & 0xFFF) == 0 && std::chrono::steady_clock::now() > *deadline) {
      throw LimitError("[compile] compile time limit exceeded finding the states with the same future");
    }
  };
  const std::size_t n = a.n_states();
  std::vector<Closure> closures(n);
  std::vector<std::uint32_t> seen(n, ~0u);
  for (std::uint32_t s = 0; s < n; ++s) {
    check_deadline();
    closures[s] = closure_of(a, s, max_closure, seen, s);
  }

  // Round 0: the rule and whether its end is reached without input (lone states keep their own class).
  std::vector<std::uint32_t> cls(n);
  {
    std::unordered_map<std::vector<std::uint32_t>, std::uint32_t, U32VectorHash> ids;
    for (std::uint32_t s = 0; s < n; ++s) {
      std::vector<std::uint32_t> key = closures[s].alone ? std::vector<std::uint32_t>{2, s}
                                                         : std::vector<std::uint32_t>{closures[s].final ? 1u : 0u, a.state_rule[s]};
      cls[s] = ids.emplace(std::move(key), static_cast<std::uint32_t>(ids.size())).first->second;
    }
  }
  std::uint32_t n_classes = 0;
  for (std::uint32_t c : cls) n_classes = std::max(n_classes, c + 1);
  std::vector<std::vector<std::uint32_t>> members(n_classes);
  for (std::uint32_t s = 0; s < n; ++s) members[cls[s]].push_back(s);
  // Who reads whose class: a state's signature names the classes of its edges' targets.
  std::vector<std::vector<std::uint32_t>> readers(n);
  for (std::uint32_t s = 0; s < n; ++s) {
    if (closures[s].alone) continue;
    for (const ByteEdge& e : closures[s].bytes) readers[e.target].push_back(s);
    for (const CallEdge& e : closures[s].calls) readers[e.target].push_back(s);
  }
  using Signature = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
  auto signature = [&](std::uint32_t s) {
    check_deadline();
    const Closure& c = closures[s];
    Signature edges;
    if (!c.alone) {
      edges.reserve(c.bytes.size() + c.calls.size());
      for (const ByteEdge& e : c.bytes) edges.emplace_back(std::uint32_t{e.lo} << 8 | e.hi, cls[e.target]);
      for (const CallEdge& e : c.calls) edges.emplace_back(1u << 31 | e.rule, cls[e.target]);
      std::sort(edges.begin(), edges.end());
      edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
    }
    return edges;
  };
  // Moore's refinement, Hopcroft-style: round k splits classes by the signatures of round k-1's partition,
  // but only the states that read a state which changed class in round k-1 are looked at again (the
  // others' signatures are unchanged: they keep their class, whose signature is remembered). New class
  // ids are assigned after the round, so every signature of a round reads the same partition. Stops when
  // nothing moves (the bisimulation) or after `horizon` rounds (equal futures up to `horizon` bytes).
  std::vector<std::uint32_t> pos(n);  // index of each state in members[cls[s]]
  for (auto& m : members)
    for (std::size_t i = 0; i < m.size(); ++i) pos[m[i]] = static_cast<std::uint32_t>(i);
  std::vector<Signature> class_sig(members.size());
  std::vector<std::pair<std::uint32_t, std::uint32_t>> assign;  // (state, new class) of this round
  auto take_out = [&](std::uint32_t s, std::uint32_t c) {
    auto& m = members[c];
    const std::uint32_t last = m.back();
    m[pos[s]] = last;
    pos[last] = pos[s];
    m.pop_back();
  };
  auto new_class = [&](std::vector<std::uint32_t> part, Signature sig, std::uint32_t from) {
    const auto id = static_cast<std::uint32_t>(members.size());
    for (std::uint32_t s : part) {
      take_out(s, from);
      assign.emplace_back(s, id);
    }
    for (std::size_t i = 0; i < part.size(); ++i) pos[part[i]] = static_cast<std::uint32_t>(i);
    members.push_back(std::move(part));
    class_sig.push_back(std::move(sig));
  };
  // Splits class c by the signatures of `list`, its members looked at again: when that is all of them, the
  // largest part keeps the class; otherwise the members not looked at keep it (and its signature), with
  // those of `list` whose signature is still the class's.
  auto refine = [&](std::uint32_t c, const std::vector<std::uint32_t>& list) {
    if (members[c].size() < 2) return;
    std::map<Signature, std::vector<std::uint32_t>> parts;
    for (std::uint32_t s : list) parts[signature(s)].push_back(s);
    auto keep = parts.end();
    if (list.size() == members[c].size()) {
      keep = parts.begin();
      for (auto it = parts.begin(); it != parts.end(); ++it)
        if (it->second.size() > keep->second.size()) keep = it;
      class_sig[c] = keep->first;
    }
    for (auto it = parts.begin(); it != parts.end(); ++it)
      if (it != keep && it->first != class_sig[c]) new_class(std::move(it->second), it->first, c);
  };
  std::vector<std::uint32_t> moved;
  // Round 1: every class, every member.
  if (horizon > 0) {
    const std::size_t n_initial = members.size();
    for (std::uint32_t c = 0; c < n_initial; ++c) refine(c, std::vector<std::uint32_t>(members[c]));
  }
  std::vector<std::uint32_t> stamp(n, ~0u);
  for (std::size_t round = 1;; ++round) {
    moved.clear();
    for (const auto& [s, id] : assign) {
      cls[s] = id;
      moved.push_back(s);
    }
    assign.clear();
    if (moved.empty() || round >= horizon) break;
    // The readers of moved states, by class.
    std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> touched;
    for (std::uint32_t s : moved) {
      for (std::uint32_t r : readers[s]) {
        if (stamp[r] == round) continue;
        stamp[r] = static_cast<std::uint32_t>(round);
        touched[cls[r]].push_back(r);
      }
    }
    std::vector<std::uint32_t> order;  // deterministic class order
    for (const auto& [c, list] : touched) order.push_back(c);
    std::sort(order.begin(), order.end());
    for (std::uint32_t c : order) {
      std::vector<std::uint32_t>& list = touched[c];
      std::sort(list.begin(), list.end());
      refine(c, list);
    }
  }
  return cls;
}

}  // namespace pse::detail
