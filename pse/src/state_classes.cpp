#include "state_classes.h"

#include <algorithm>
#include <unordered_map>

namespace pse::detail {

namespace {

struct VectorHash {
  std::size_t operator()(const std::vector<std::uint32_t>& v) const {
    std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ v.size();
    for (std::uint32_t x : v) h = (h ^ x) * 0xff51afd7ed558ccdULL;
    return static_cast<std::size_t>(h ^ (h >> 31));
  }
};

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

std::vector<std::uint32_t> future_classes(const Automaton& a, std::size_t horizon, std::size_t max_closure) {
  const std::size_t n = a.n_states();
  std::vector<Closure> closures(n);
  std::vector<std::uint32_t> seen(n, ~0u);
  for (std::uint32_t s = 0; s < n; ++s) closures[s] = closure_of(a, s, max_closure, seen, s);

  // Round 0: the rule and whether its end is reached without input (lone states keep their own id).
  std::vector<std::uint32_t> cls(n), next(n);
  std::unordered_map<std::vector<std::uint32_t>, std::uint32_t, VectorHash> ids;
  auto intern = [&](std::vector<std::uint32_t>&& key) {
    return ids.emplace(std::move(key), static_cast<std::uint32_t>(ids.size())).first->second;
  };
  for (std::uint32_t s = 0; s < n; ++s) {
    cls[s] = closures[s].alone ? intern({2, s}) : intern({static_cast<std::uint32_t>(closures[s].final), a.state_rule[s]});
  }
  std::size_t n_classes = ids.size();
  // Round k: the class of round k-1 with the labelled classes of the targets.
  std::vector<std::uint32_t> key;
  for (std::size_t round = 0; round < horizon; ++round) {
    ids.clear();
    for (std::uint32_t s = 0; s < n; ++s) {
      const Closure& c = closures[s];
      key.assign(1, cls[s]);
      if (!c.alone) {
        const std::size_t begin = key.size();
        for (const ByteEdge& e : c.bytes) {
          key.push_back(0u << 16 | std::uint32_t{e.lo} << 8 | e.hi);
          key.push_back(cls[e.target]);
        }
        for (const CallEdge& e : c.calls) {
          key.push_back(1u << 31 | e.rule);
          key.push_back(cls[e.target]);
        }
        // Edges as a set: sort the (label, class) pairs.
        std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
        edges.reserve((key.size() - begin) / 2);
        for (std::size_t i = begin; i < key.size(); i += 2) edges.emplace_back(key[i], key[i + 1]);
        std::sort(edges.begin(), edges.end());
        edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
        key.resize(begin);
        for (const auto& [label, target] : edges) {
          key.push_back(label);
          key.push_back(target);
        }
      }
      next[s] = intern(std::vector<std::uint32_t>(key));
    }
    cls.swap(next);
    if (ids.size() == n_classes) break;  // stable: the partition is the bisimulation itself
    n_classes = ids.size();
  }
  return cls;
}

}  // namespace pse::detail
