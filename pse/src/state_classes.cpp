#include "state_classes.h"

#include <algorithm>
#include <array>
#include <bit>
#include <span>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "pse/error.h"

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
  std::vector<std::uint8_t> alone;                  // over the size bound, or distinct: never merged
  std::vector<std::uint8_t> final;
};

// Of the states [lo, lo + n) (whole rules: every edge stays inside), numbered from 0.
template <class CheckDeadline>
Closures closures_of(const Automaton& a, std::uint32_t lo, std::size_t n, std::size_t max_closure,
                     const CheckDeadline& check_deadline) {
  Closures c;
  c.begin.reserve(n + 1);
  c.edges.reserve(2 * (a.byte_begin[lo + n] - a.byte_begin[lo] + a.call_begin[lo + n] - a.call_begin[lo]));
  c.alone.assign(n, 0);
  c.final.assign(n, 0);
  std::vector<std::uint32_t> seen(n, ~0u);
  std::vector<std::uint32_t> work;
  for (std::uint32_t s = 0; s < n; ++s) {
    check_deadline();
    c.begin.push_back(static_cast<std::uint32_t>(c.edges.size()));
    if (!a.distinct.empty() && a.distinct[lo + s]) {  // its own class, not compared (Automaton::distinct)
      c.alone[s] = 1;
      continue;
    }
    work.assign(1, lo + s);
    seen[s] = s;
    std::size_t visited = 0;
    bool final = false;
    while (!work.empty()) {
      const std::uint32_t t = work.back();
      work.pop_back();
      // (A state that reads whole tokens is left alone too: rare, and never worth comparing.)
      if (++visited > max_closure || a.has_tokens(t)) {
        c.alone[s] = 1;
        break;
      }
      final = final || a.is_final(t);
      for (std::uint32_t i = a.byte_begin[t]; i < a.byte_begin[t + 1]; ++i) {
        const ByteEdge& e = a.byte_edges[i];
        c.edges.emplace_back(std::uint32_t{e.lo} << 8 | e.hi, e.target - lo);
      }
      auto visit = [&](std::uint32_t u) {
        if (seen[u - lo] != s) {
          seen[u - lo] = s;
          work.push_back(u);
        }
      };
      for (std::uint32_t i = a.eps_begin[t]; i < a.eps_begin[t + 1]; ++i) visit(a.eps_edges[i]);
      for (std::uint32_t i = a.call_begin[t]; i < a.call_begin[t + 1]; ++i) {
        const CallEdge& e = a.call_edges[i];
        c.edges.emplace_back(Closures::kCall | e.rule, e.target - lo);
        if (a.rule_nullable[e.rule]) visit(e.target);
      }
    }
    if (c.alone[s]) c.edges.resize(c.begin.back());  // a lone state's signature is empty
    // Sorted by label, then target: a signature (labels with their targets' classes) is then sorted
    // but for targets of one label, and an insertion sort puts it in order in about one pass.
    std::sort(c.edges.begin() + c.begin.back(), c.edges.end());
    c.final[s] = final ? 1 : 0;
  }
  c.begin.push_back(static_cast<std::uint32_t>(c.edges.size()));
  return c;
}

}  // namespace

std::vector<std::uint32_t> future_classes(const Automaton& a, std::size_t horizon, std::size_t max_closure,
                                          const Deadline* deadline,
                                          std::size_t coarse_horizon, std::vector<std::uint32_t>* coarse) {
  return future_classes(a, 0, static_cast<std::uint32_t>(a.n_states()), horizon, max_closure, deadline,
                        coarse_horizon, coarse);
}

std::vector<std::uint32_t> future_classes(const Automaton& a, std::uint32_t lo, std::uint32_t hi, std::size_t horizon,
                                          std::size_t max_closure,
                                          const Deadline* deadline,
                                          std::size_t coarse_horizon, std::vector<std::uint32_t>* coarse) {
  if (coarse != nullptr) coarse->clear();
  if (lo >= hi) return {};
  const bool whole = lo == 0 && hi == a.n_states();
  if (!whole && (hi > a.n_states() || a.rule_start[a.state_rule[lo]] != lo ||
                 a.rule_final[a.state_rule[hi - 1]] != hi - 1))
    throw std::logic_error(fmt::format("future_classes: states [{}, {}) are not whole rules", lo, hi));
  const std::size_t n = hi - lo;
  std::size_t work = 0;
  const auto check_deadline = [&] {
    if (deadline != nullptr && (++work & 0xFFF) == 0 && deadline->passed()) {
      throw LimitError("[compile] compile time limit exceeded finding the states with the same future");
    }
  };
  const Closures closures = closures_of(a, lo, n, max_closure, check_deadline);

  // Round 0: the rule and whether its end is reached without input (lone states keep their own class).
  std::vector<std::uint32_t> cls(n);
  if (a.state_rule[lo] == a.state_rule[hi - 1] && a.rule_start[a.state_rule[lo]] == lo) {
    // One rule (classes found rule by rule): its two kinds of states that are compared, then the lone ones.
    std::array<std::uint32_t, 2> kind_id{~0u, ~0u};
    std::uint32_t next = 0;
    for (std::uint32_t s = 0; s < n; ++s) {
      if (closures.alone[s]) {
        cls[s] = next++;
      } else {
        std::uint32_t& id = kind_id[closures.final[s]];
        if (id == ~0u) id = next++;
        cls[s] = id;
      }
    }
  } else {
    std::unordered_map<std::uint64_t, std::uint32_t> ids;
    for (std::uint32_t s = 0; s < n; ++s) {
      const std::uint64_t kind = closures.alone[s] ? 2u : closures.final[s];
      const std::uint64_t key = kind << 32 | (closures.alone[s] ? s : a.state_rule[lo + s]);
      cls[s] = ids.try_emplace(key, static_cast<std::uint32_t>(ids.size())).first->second;
    }
  }
  std::uint32_t n_classes = 0;
  for (std::uint32_t c : cls) n_classes = std::max(n_classes, c + 1);
  // Only the classes' sizes are kept, not their member lists: a class is split by the signatures of the
  // states looked at again, and the others keep it (one allocation-free array instead of a vector per
  // class: most classes end with one state).
  std::vector<std::uint32_t> class_size(n_classes, 0);
  for (std::uint32_t s = 0; s < n; ++s) ++class_size[cls[s]];
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
    for (std::uint32_t i = closures.begin[s]; i < closures.begin[s + 1]; ++i) {
      Edge e{closures.edges[i].first, cls[closures.edges[i].second]};
      std::size_t j = sig_buffer.size();
      sig_buffer.push_back(e);
      for (; j > b && e < sig_buffer[j - 1]; --j) sig_buffer[j] = sig_buffer[j - 1];
      sig_buffer[j] = e;
    }
    sig_buffer.erase(std::unique(sig_buffer.begin() + static_cast<std::ptrdiff_t>(b), sig_buffer.end()), sig_buffer.end());
    return {b, sig_buffer.size() - b};
  };
  // Each edge is mixed on its own and folded in with a rotate: the multiplications do not wait on one
  // another (a chain of two multiplications per edge was a sixth of the refinement).
  auto hash_of = [&](std::size_t b, std::size_t size) {
    std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ size;
    for (std::size_t i = b; i < b + size; ++i) {
      const std::uint64_t v = (std::uint64_t{sig_buffer[i].first} << 32 | sig_buffer[i].second) * 0xff51afd7ed558ccdULL;
      h = std::rotl(h, 23) ^ (v ^ (v >> 29));
    }
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 31);
  };
  // Each class's signature (of the partition it was computed on), in one arena: a class that gets a new
  // one appends it.
  std::vector<Edge> sig_arena;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> class_sig(n_classes, {0, 0});  // (begin, size) in sig_arena
  auto keep_sig = [&](std::size_t b, std::size_t size) {
    const auto at = static_cast<std::uint32_t>(sig_arena.size());
    sig_arena.insert(sig_arena.end(), sig_buffer.begin() + static_cast<std::ptrdiff_t>(b),
                     sig_buffer.begin() + static_cast<std::ptrdiff_t>(b + size));
    return std::pair<std::uint32_t, std::uint32_t>{at, static_cast<std::uint32_t>(size)};
  };
  // Moore's refinement, Hopcroft-style: round k splits classes by the signatures of round k-1's partition,
  // but only the states that read a state which changed class in round k-1 are looked at again (the
  // others' signatures are unchanged: they keep their class, whose signature is remembered). New class
  // ids are assigned after the round, so every signature of a round reads the same partition. Stops when
  // nothing moves (the bisimulation) or after `horizon` rounds (equal futures up to `horizon` bytes).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> assign;  // (state, new class) of this round
  // One part per distinct signature among the states refined, in order of first appearance; its states
  // linked through next_in_part (by index in the list). Parts are found by hash in an open-addressing
  // table sized to the list and cleared slot by slot (a small class costs only its own states).
  struct Part {
    std::size_t begin, size;  // the signature, in sig_buffer
    std::uint64_t hash;
    std::uint32_t first, last, count;
    std::size_t slot;
  };
  std::vector<Part> parts;
  std::vector<std::uint32_t> next_in_part;
  std::vector<std::uint32_t> slots;  // part index + 1, 0 = empty
  auto same = [&](const Part& p, std::size_t b, std::size_t size) {
    return p.size == size && std::equal(sig_buffer.begin() + static_cast<std::ptrdiff_t>(p.begin),
                                        sig_buffer.begin() + static_cast<std::ptrdiff_t>(p.begin + p.size),
                                        sig_buffer.begin() + static_cast<std::ptrdiff_t>(b));
  };
  // Splits class c by the signatures of `list`, its members looked at again: when that is all of them, the
  // largest part keeps the class; otherwise the members not looked at keep it (and its signature), with
  // those of `list` whose signature is still the class's.
  auto refine = [&](std::uint32_t c, std::span<const std::uint32_t> list) {
    if (class_size[c] < 2) return;
    sig_buffer.clear();
    parts.clear();
    next_in_part.assign(list.size(), ~0u);
    std::size_t n_slots = 4;
    while (n_slots < 2 * list.size()) n_slots *= 2;
    if (slots.size() < n_slots) slots.resize(n_slots, 0);
    for (std::uint32_t i = 0; i < list.size(); ++i) {
      const auto [b, size] = write_signature(list[i]);
      const std::uint64_t h = hash_of(b, size);
      std::size_t slot = h & (n_slots - 1);
      for (; slots[slot] != 0; slot = (slot + 1) & (n_slots - 1)) {
        Part& p = parts[slots[slot] - 1];
        if (p.hash == h && same(p, b, size)) break;
      }
      if (slots[slot] != 0) {
        Part& p = parts[slots[slot] - 1];
        next_in_part[p.last] = i;
        p.last = i;
        ++p.count;
        sig_buffer.resize(b);  // a known signature: drop the copy
      } else {
        slots[slot] = static_cast<std::uint32_t>(parts.size() + 1);
        parts.push_back({b, size, h, i, i, 1, slot});
      }
    }
    for (const Part& p : parts) slots[p.slot] = 0;  // each part holds one slot
    std::size_t keep = parts.size();
    if (list.size() == class_size[c]) {
      keep = 0;
      for (std::size_t p = 1; p < parts.size(); ++p)
        if (parts[p].count > parts[keep].count) keep = p;
      class_sig[c] = keep_sig(parts[keep].begin, parts[keep].size);
    }
    for (std::size_t p = 0; p < parts.size(); ++p) {
      if (p == keep) continue;
      const auto [cb, cn] = class_sig[c];
      const bool is_class_sig = parts[p].size == cn &&
                                std::equal(sig_arena.begin() + cb, sig_arena.begin() + cb + cn,
                                           sig_buffer.begin() + static_cast<std::ptrdiff_t>(parts[p].begin));
      if (is_class_sig) continue;
      const auto id = static_cast<std::uint32_t>(class_size.size());
      class_size.push_back(parts[p].count);
      class_size[c] -= parts[p].count;
      class_sig.push_back(keep_sig(parts[p].begin, parts[p].size));
      for (std::uint32_t i = parts[p].first; i != ~0u; i = next_in_part[i]) assign.emplace_back(list[i], id);
    }
  };
  // Round 1: every class, every member (the members of each class gathered by a counting sort).
  if (horizon > 0) {
    std::vector<std::uint32_t> member_begin(n_classes + 1, 0), members(n);
    for (std::uint32_t s = 0; s < n; ++s) ++member_begin[cls[s] + 1];
    for (std::uint32_t c = 0; c < n_classes; ++c) member_begin[c + 1] += member_begin[c];
    {
      std::vector<std::uint32_t> fill(member_begin.begin(), member_begin.end() - 1);
      for (std::uint32_t s = 0; s < n; ++s) members[fill[cls[s]]++] = s;
    }
    for (std::uint32_t c = 0; c < n_classes; ++c)
      refine(c, std::span<const std::uint32_t>(members).subspan(member_begin[c], member_begin[c + 1] - member_begin[c]));
  }
  std::vector<std::uint32_t> stamp(n, ~0u);
  // The readers of a round grouped by class with a counting sort (a comparison sort of the (class,
  // reader) pairs took a third of the refinement on 40,000-state automata): per class touched, its
  // count, then its slice of `grouped`.
  std::vector<std::uint32_t> touched;        // readers of this round, in the order found
  std::vector<std::uint32_t> round_classes;  // the classes of this round's readers, each once
  // Per class: the last round that touched it; its count of readers, then where its slice fills.
  std::vector<std::uint32_t> class_round, class_fill;
  std::vector<std::uint32_t> grouped;
  for (std::size_t round = 1;; ++round) {
    for (const auto& [s, id] : assign) cls[s] = id;
    if (coarse != nullptr && round == coarse_horizon) *coarse = cls;
    if (assign.empty() || round >= horizon) break;
    touched.clear();
    round_classes.clear();
    class_round.resize(class_size.size(), ~0u);
    class_fill.resize(class_size.size(), 0);
    for (const auto& [s, id] : assign) {
      for (std::uint32_t i = reader_begin[s]; i < reader_begin[s + 1]; ++i) {
        const std::uint32_t r = readers[i];
        if (stamp[r] == round) continue;
        stamp[r] = static_cast<std::uint32_t>(round);
        touched.push_back(r);
        const std::uint32_t c = cls[r];
        if (class_round[c] != round) {
          class_round[c] = static_cast<std::uint32_t>(round);
          class_fill[c] = 0;
          round_classes.push_back(c);
        }
        ++class_fill[c];
      }
    }
    assign.clear();
    // Classes in increasing order. Any order gives the same partition and the same representatives, yet
    // unsorted, later masks measured 15% slower (arithmetic.gbnf, and MaskBench's median); the cause was
    // not found (layout or allocation effects are suspected). The sort is cheap.
    std::sort(round_classes.begin(), round_classes.end());
    std::uint32_t at = 0;
    for (std::uint32_t c : round_classes) at += std::exchange(class_fill[c], at);
    grouped.resize(touched.size());
    for (std::uint32_t r : touched) grouped[class_fill[cls[r]]++] = r;
    std::size_t begin = 0;
    for (std::uint32_t c : round_classes) {
      const std::size_t end = class_fill[c];
      refine(c, std::span<const std::uint32_t>(grouped).subspan(begin, end - begin));
      begin = end;
    }
  }
  if (coarse != nullptr && coarse->empty()) *coarse = cls;  // stable before coarse_horizon rounds
  return cls;
}

}  // namespace pse::detail
