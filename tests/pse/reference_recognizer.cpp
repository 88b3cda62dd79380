// Earley recognizer over bytes for the pse Grammar IR (tests only). The IR is first flattened into plain
// productions: every expression is a nonterminal (named by its ExprId), a repeat becomes min copies of its
// child followed by a chain of optional copies (or a left-recursive tail when unbounded), and a rule
// reference derives its rule's body. Terminals are single bytes and character classes; a class consumes
// one whole UTF-8 encoded scalar value. Productions that contain an unproductive symbol (one that derives
// no string at all, e.g. an empty class) are dropped first, so every item left in a chart set can be
// completed: a prefix is viable exactly when the last set is non-empty. Nullable symbols are handled the
// Aycock-Horspool way (predicting a nullable symbol also steps over it).
#include "reference_recognizer.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace pse::testing {
namespace {

struct Terminal {
  bool is_class = false;
  std::uint8_t byte = 0;
  const Expr* cls = nullptr;
};

struct Production {
  int lhs = 0;
  std::vector<int> rhs;  // >= 0: nonterminal; < 0: terminal -(t + 1)
};

bool is_terminal(int s) { return s < 0; }
int terminal_index(int s) { return -s - 1; }

// Does the class contain some scalar value in [lo, hi]?
bool class_intersects(const Expr& cls, std::uint32_t lo, std::uint32_t hi) {
  // Split [lo, hi] into pieces without surrogates.
  std::vector<CharRange> pieces;
  auto add_piece = [&](std::uint32_t a, std::uint32_t b) {
    a = std::max(a, lo);
    b = std::min(b, hi);
    if (a <= b) pieces.push_back({a, b});
  };
  add_piece(0, 0xD7FF);
  add_piece(0xE000, kMaxCodePoint);
  std::vector<CharRange> ranges = cls.ranges;
  std::sort(ranges.begin(), ranges.end(), [](const CharRange& x, const CharRange& y) { return x.lo < y.lo; });
  for (const CharRange& p : pieces) {
    if (!cls.negated) {
      for (const CharRange& r : ranges) {
        if (r.lo <= p.hi && r.hi >= p.lo) return true;
      }
    } else {
      // Is p fully covered by the ranges? Walk them in order.
      std::uint64_t next = p.lo;  // first value of p not yet known to be covered
      for (const CharRange& r : ranges) {
        if (r.lo > next) break;
        if (r.hi >= next) next = static_cast<std::uint64_t>(r.hi) + 1;
        if (next > p.hi) break;
      }
      if (next <= p.hi) return true;
    }
  }
  return false;
}

bool class_contains(const Expr& cls, std::uint32_t cp) { return class_intersects(cls, cp, cp); }

enum class Decode { kComplete, kPartial, kInvalid };

// Strict UTF-8 decoding at s[i]. kComplete: cp and len set. kPartial: the text ends inside a character
// whose possible values are [lo, hi]. kInvalid: no scalar value's encoding starts with these bytes.
Decode decode_utf8(std::string_view s, std::size_t i, std::uint32_t& cp, std::size_t& len,
                   std::uint32_t& lo, std::uint32_t& hi) {
  auto b0 = static_cast<std::uint8_t>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    len = 1;
    return Decode::kComplete;
  }
  std::uint8_t lo2 = 0x80;
  std::uint8_t hi2 = 0xBF;
  std::uint32_t lead_bits = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    lead_bits = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    lead_bits = b0 & 0x0F;
    if (b0 == 0xE0) lo2 = 0xA0;
    if (b0 == 0xED) hi2 = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    lead_bits = b0 & 0x07;
    if (b0 == 0xF0) lo2 = 0x90;
    if (b0 == 0xF4) hi2 = 0x8F;
  } else {
    return Decode::kInvalid;
  }
  std::size_t have = std::min(len, s.size() - i);
  for (std::size_t k = 1; k < have; ++k) {
    auto b = static_cast<std::uint8_t>(s[i + k]);
    std::uint8_t mn = k == 1 ? lo2 : 0x80;
    std::uint8_t mx = k == 1 ? hi2 : 0xBF;
    if (b < mn || b > mx) return Decode::kInvalid;
  }
  auto assemble = [&](bool high) {
    std::uint32_t v = lead_bits;
    for (std::size_t k = 1; k < len; ++k) {
      std::uint8_t b;
      if (k < have) {
        b = static_cast<std::uint8_t>(s[i + k]);
      } else if (k == 1) {
        b = high ? hi2 : lo2;
      } else {
        b = high ? 0xBF : 0x80;
      }
      v = (v << 6) | (b & 0x3F);
    }
    return v;
  };
  if (have == len) {
    cp = assemble(false);
    return Decode::kComplete;
  }
  lo = assemble(false);
  hi = assemble(true);
  return Decode::kPartial;
}

struct Flat {
  std::vector<Terminal> terminals;
  std::vector<Production> prods;
  std::vector<std::vector<std::uint32_t>> by_lhs;  // nonterminal -> production ids (productive only)
  std::vector<bool> nullable;
  int start = 0;  // nonterminal of the augmented start rule S' -> root
  std::uint32_t start_prod = 0;
};

class Flattener {
 public:
  explicit Flattener(const Grammar& g) : g_(g) {}

  Flat run() {
    g_.validate();
    const auto n_exprs = static_cast<int>(g_.exprs().size());
    n_nonterminals_ = n_exprs;
    for (int e = 0; e < n_exprs; ++e) flatten(static_cast<ExprId>(e));
    flat_.start = n_nonterminals_++;
    flat_.start_prod = static_cast<std::uint32_t>(flat_.prods.size());
    flat_.prods.push_back({flat_.start, {static_cast<int>(g_.rule(g_.root()).body)}});
    finish();
    return std::move(flat_);
  }

 private:
  int byte_terminal(std::uint8_t b) {
    if (byte_terms_[b] == 0) {
      flat_.terminals.push_back({false, b, nullptr});
      byte_terms_[b] = static_cast<int>(flat_.terminals.size());
    }
    return -byte_terms_[b];
  }

  void add(int lhs, std::vector<int> rhs) { flat_.prods.push_back({lhs, std::move(rhs)}); }

  void flatten(ExprId id) {
    const Expr& e = g_.expr(id);
    const int lhs = static_cast<int>(id);
    switch (e.kind) {
      case ExprKind::kEmpty:
        add(lhs, {});
        break;
      case ExprKind::kBytes: {
        std::vector<int> rhs;
        for (char c : e.bytes) rhs.push_back(byte_terminal(static_cast<std::uint8_t>(c)));
        add(lhs, std::move(rhs));
        break;
      }
      case ExprKind::kCharClass:
        flat_.terminals.push_back({true, 0, &e});
        add(lhs, {-static_cast<int>(flat_.terminals.size())});
        break;
      case ExprKind::kSequence: {
        std::vector<int> rhs;
        for (ExprId c : e.children) rhs.push_back(static_cast<int>(c));
        add(lhs, std::move(rhs));
        break;
      }
      case ExprKind::kChoice:
        for (ExprId c : e.children) add(lhs, {static_cast<int>(c)});
        break;
      case ExprKind::kRepeat: {
        const int child = static_cast<int>(e.children.at(0));
        std::vector<int> rhs(e.min, child);
        if (e.max == kUnbounded) {
          const int tail = n_nonterminals_++;
          add(tail, {});
          add(tail, {tail, child});  // left recursion: linear in Earley, right recursion is quadratic
          rhs.push_back(tail);
        } else if (e.max > e.min) {
          int prev = n_nonterminals_++;  // T_0 -> empty
          add(prev, {});
          for (std::uint32_t k = 1; k <= e.max - e.min; ++k) {
            const int t = n_nonterminals_++;
            add(t, {});
            add(t, {child, prev});
            prev = t;
          }
          rhs.push_back(prev);
        }
        add(lhs, std::move(rhs));
        break;
      }
      case ExprKind::kRuleRef:
        add(lhs, {static_cast<int>(g_.rule(e.rule).body)});
        break;
      case ExprKind::kGraph: {
        // One nonterminal per graph state: N_s -> label N_t per edge, N_s -> empty when accepting.
        const int base = n_nonterminals_;
        n_nonterminals_ += static_cast<int>(e.graph_states);
        for (const GraphEdge& edge : e.edges) {
          add(base + static_cast<int>(edge.from), {static_cast<int>(e.children.at(edge.label)), base + static_cast<int>(edge.to)});
        }
        for (std::uint32_t a : e.accepting) add(base + static_cast<int>(a), {});
        add(lhs, {base});
        break;
      }
      case ExprKind::kToken:  // a recognizer of text has no tokens to match
        throw std::invalid_argument("reference recognizer: token terminals are not supported");
    }
  }

  void finish() {
    const auto n = static_cast<std::size_t>(n_nonterminals_);
    // Productive symbols, by fixpoint.
    std::vector<bool> term_ok(flat_.terminals.size());
    for (std::size_t t = 0; t < flat_.terminals.size(); ++t) {
      const Terminal& term = flat_.terminals[t];
      term_ok[t] = !term.is_class || class_intersects(*term.cls, 0, kMaxCodePoint);
    }
    std::vector<bool> productive(n, false);
    flat_.nullable.assign(n, false);
    auto sym_ok = [&](int s) {
      return is_terminal(s) ? static_cast<bool>(term_ok[terminal_index(s)]) : static_cast<bool>(productive[s]);
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (const Production& p : flat_.prods) {
        if (!productive[p.lhs] && std::all_of(p.rhs.begin(), p.rhs.end(), sym_ok)) {
          productive[p.lhs] = true;
          changed = true;
        }
        if (!flat_.nullable[p.lhs] &&
            std::all_of(p.rhs.begin(), p.rhs.end(), [&](int s) { return !is_terminal(s) && flat_.nullable[s]; })) {
          flat_.nullable[p.lhs] = true;
          changed = true;
        }
      }
    }
    flat_.by_lhs.assign(n, {});
    for (std::uint32_t i = 0; i < flat_.prods.size(); ++i) {
      const Production& p = flat_.prods[i];
      if (std::all_of(p.rhs.begin(), p.rhs.end(), sym_ok)) flat_.by_lhs[p.lhs].push_back(i);
    }
  }

  const Grammar& g_;
  Flat flat_;
  int n_nonterminals_ = 0;
  int byte_terms_[256] = {};
};

struct Item {
  std::uint32_t prod;
  std::uint32_t dot;
  std::uint32_t origin;
  friend bool operator==(const Item&, const Item&) = default;
};

struct ItemHash {
  std::size_t operator()(const Item& it) const {
    std::uint64_t h = it.prod;
    h = h * 0x9E3779B97F4A7C15ULL + it.dot;
    h = h * 0x9E3779B97F4A7C15ULL + it.origin;
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

struct ChartSet {
  std::vector<Item> items;
  std::unordered_set<Item, ItemHash> seen;
  std::unordered_map<int, std::vector<std::uint32_t>> waiting;  // nonterminal -> indices of items before it
};

// Runs the recognizer. Returns {accepted, viable}.
std::pair<bool, bool> recognize(const Grammar& grammar, std::string_view input) {
  const Flat f = Flattener(grammar).run();
  const std::size_t n = input.size();
  std::vector<ChartSet> sets(n + 1);
  bool partial_viable = false;
  if (std::find(f.by_lhs[f.start].begin(), f.by_lhs[f.start].end(), f.start_prod) == f.by_lhs[f.start].end()) {
    return {false, false};  // empty language
  }
  auto add = [&](ChartSet& set, const Item& it) {
    if (!set.seen.insert(it).second) return;
    const Production& p = f.prods[it.prod];
    if (it.dot < p.rhs.size() && !is_terminal(p.rhs[it.dot])) {
      set.waiting[p.rhs[it.dot]].push_back(static_cast<std::uint32_t>(set.items.size()));
    }
    set.items.push_back(it);
  };
  add(sets[0], {f.start_prod, 0, 0});
  for (std::size_t i = 0; i <= n; ++i) {
    ChartSet& set = sets[i];
    for (std::size_t k = 0; k < set.items.size(); ++k) {
      const Item it = set.items[k];
      const Production& p = f.prods[it.prod];
      if (it.dot == p.rhs.size()) {
        // Complete: advance every item of the origin set that waits on p.lhs.
        // (When the origin is this set, items added after this point are covered by the nullable step.)
        ChartSet& from = sets[it.origin];
        auto found = from.waiting.find(p.lhs);
        if (found == from.waiting.end()) continue;
        const std::vector<std::uint32_t> waiters = found->second;  // copy: `from` may grow
        for (std::uint32_t j : waiters) {
          const Item w = from.items[j];
          add(set, {w.prod, w.dot + 1, w.origin});
        }
        continue;
      }
      const int s = p.rhs[it.dot];
      if (!is_terminal(s)) {
        for (std::uint32_t q : f.by_lhs[s]) add(set, {q, 0, static_cast<std::uint32_t>(i)});
        if (f.nullable[s]) add(set, {it.prod, it.dot + 1, it.origin});
        continue;
      }
      if (i == n) continue;
      const Terminal& t = f.terminals[terminal_index(s)];
      if (!t.is_class) {
        if (static_cast<std::uint8_t>(input[i]) == t.byte) add(sets[i + 1], {it.prod, it.dot + 1, it.origin});
        continue;
      }
      std::uint32_t cp = 0;
      std::uint32_t lo = 0;
      std::uint32_t hi = 0;
      std::size_t len = 0;
      switch (decode_utf8(input, i, cp, len, lo, hi)) {
        case Decode::kComplete:
          if (class_contains(*t.cls, cp)) add(sets[i + len], {it.prod, it.dot + 1, it.origin});
          break;
        case Decode::kPartial:
          if (class_intersects(*t.cls, lo, hi)) partial_viable = true;
          break;
        case Decode::kInvalid:
          break;
      }
    }
  }
  const bool accepted = sets[n].seen.count({f.start_prod, 1, 0}) > 0;
  return {accepted, partial_viable || !sets[n].items.empty()};
}

}  // namespace

bool accepts(const Grammar& grammar, std::string_view bytes) { return recognize(grammar, bytes).first; }

bool is_viable_prefix(const Grammar& grammar, std::string_view bytes) {
  return recognize(grammar, bytes).second;
}

}  // namespace pse::testing
