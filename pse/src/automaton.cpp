#include "automaton.h"

#include <algorithm>
#include <functional>
#include <memory_resource>
#include <optional>
#include <span>
#include <unordered_map>

#include <fmt/format.h>

namespace pse::detail {

namespace {

// One UTF-8 encoded range: byte i lies in [lo[i], hi[i]] for i < n.
struct Utf8Seq {
  int n = 0;
  std::uint8_t lo[4] = {};
  std::uint8_t hi[4] = {};
};

int encode_utf8(std::uint32_t cp, std::uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<std::uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<std::uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<std::uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<std::uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<std::uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<std::uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<std::uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<std::uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<std::uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<std::uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// Splits [lo, hi] into ranges whose encodings are products of byte ranges (the classic UTF-8 range
// split): first at the encoding-length boundaries, then where a continuation byte does not span its
// whole 0x80..0xBF range.
void utf8_split(std::uint32_t lo, std::uint32_t hi, std::vector<Utf8Seq>& out) {
  if (lo > hi) return;
  for (std::uint32_t m : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= m && m < hi) {
      utf8_split(lo, m, out);
      utf8_split(m + 1, hi, out);
      return;
    }
  }
  std::uint8_t a[4], b[4];
  int n = encode_utf8(lo, a);
  for (int i = 1; i < n; ++i) {
    std::uint32_t mask = (1u << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        utf8_split(lo, lo | mask, out);
        utf8_split((lo | mask) + 1, hi, out);
        return;
      }
      if ((hi & mask) != mask) {
        utf8_split(lo, (hi & ~mask) - 1, out);
        utf8_split(hi & ~mask, hi, out);
        return;
      }
    }
  }
  encode_utf8(hi, b);
  Utf8Seq s;
  s.n = n;
  for (int i = 0; i < n; ++i) {
    s.lo[i] = a[i];
    s.hi[i] = b[i];
  }
  out.push_back(s);
}

// A state while the automaton is built. Its edge lists live in the builder's arena (most states have one
// or two edges: a heap allocation each was a large share of building a big automaton), freed at once
// when the builder goes.
struct RawState {
  explicit RawState(std::pmr::memory_resource* arena) : bytes(arena), tokens(arena), calls(arena), eps(arena) {}
  std::uint32_t rule = 0;
  bool distinct = false;  // see Automaton::distinct
  std::pmr::vector<ByteEdge> bytes;
  std::pmr::vector<TokenEdge> tokens;
  std::pmr::vector<CallEdge> calls;
  std::pmr::vector<std::uint32_t> eps;
};

class Builder {
 public:
  Builder(const Grammar& g, const AutomatonLimits& limits) : g_(g), limits_(limits) {}

  std::pmr::monotonic_buffer_resource arena{std::size_t{1} << 16};  // the states' edge lists (before them: outlives them)
  std::vector<RawState> states;
  std::vector<std::uint32_t> rule_start, rule_final;
  std::vector<ExprId> token_sets;  // see Automaton::token_sets

  void build() {
    plan_inlined_rules();
    plan_shared_rules();
    const std::size_t n_plain = g_.rules().size() + shared_body_.size();
    const std::size_t n_rules = n_plain + chunk_body_.size();
    rule_start.resize(n_rules);
    rule_final.resize(n_rules);
    for (std::size_t r = 0; r < n_rules; ++r) {
      rule_ = static_cast<std::uint32_t>(r);
      rule_start[r] = new_state();
      std::uint32_t exit = rule_start[r];
      if (r < n_plain) {
        // A grammar rule whose body is shared (rules with equal bodies: a JSON Schema's equal strings
        // reached from different subschemas) calls the shared rule; the shared rule holds the body.
        const bool shared = r >= g_.rules().size();
        const ExprId body = shared ? shared_body_[r - g_.rules().size()] : g_.rule(rule_).body;
        exit = emit(body, rule_start[r], 0, /*inline_shared=*/shared);
      } else {
        for (std::uint32_t i = 0; i < kChunk; ++i) exit = emit(chunk_body_[r - n_plain], exit, 0);
      }
      rule_final[r] = new_state();
      states[exit].eps.push_back(rule_final[r]);
    }
  }

  // The grammar's rules, then one per shared sub-expression.
  std::size_t n_rules() const { return rule_start.size(); }
  std::string rule_name(std::uint32_t r) const {
    if (r < g_.rules().size()) return g_.rule(r).name;
    if (r < g_.rules().size() + shared_body_.size()) return fmt::format("<shared expression {}>", shared_body_[r - g_.rules().size()]);
    return fmt::format("<{} copies of expression {}>", kChunk, chunk_body_[r - g_.rules().size() - shared_body_.size()]);
  }

  // A counted repetition whose inlined copies would cost more than this many states, with at least
  // 2 * kChunk copies to make, is written with a rule of kChunk copies of its child, called in a chain:
  // E{min,max} = C^(min / K) E^(min % K) C{0,A-1} E{0,K+B} with C = E{K} and max - min = A*K + B
  // (each count up to max - min is a + b with a <= A - 1 whole chunks and b <= K + B copies). A JSON
  // string of maxLength 32767 is then some 25,000 states, not a million. Tokens that cross a chunk's
  // end are resolved at run time (chain tables, built on first use): long chunks keep that to the last
  // positions of each, which short texts never reach (with 64 copies, a MaskBench run's masks over
  // 1 ms tripled).
  static constexpr std::uint64_t kChunkMinStates = 16384;
  static constexpr std::uint32_t kChunk = 256;

  // Sub-expressions whose inlined copies would cost at least this many states, that would be inlined
  // at least twice and that match strings longer than kSharedMinLength bytes are emitted once as a
  // rule of their own and called. Short ones (a JSON string character with its escapes) stay inline:
  // tokens cross their ends all the time, and a token that runs past the end of a rule is checked at
  // run time, not in the state's table.
  static constexpr std::uint64_t kSharedMinStates = 48;
  static constexpr std::uint64_t kSharedMinLength = 16;

 private:
  // Rules of at most this many states (their own references to small rules inlined too) that are not
  // recursive are emitted inline at each reference, as a macro: a token that runs past the end of a
  // called rule is left to run-time checks, and small rules (whitespace, an identifier, a keyword with
  // its whitespace) are exactly the ones tokens run past all the time.
  static constexpr std::uint64_t kInlineMaxStates = 24;

  void plan_inlined_rules() {
    const std::size_t n_rules = g_.rules().size();
    inline_size_.assign(n_rules, kNotInlined);
    // Per rule: 0 unvisited, 1 on the path (a reference back to it is recursion), 2 done.
    std::vector<std::uint8_t> mark(n_rules, 0);
    std::vector<std::uint8_t> recursive(n_rules, 0);
    // States of an expression when emitted with the small rules it references inlined (an estimate of
    // the same kind as plan_shared_rules' sizes), capped past the bound.
    // Memoized per expression (front-ends share sub-expressions freely), the walk bounded in depth.
    const std::uint64_t cap = kInlineMaxStates + 1;
    constexpr std::uint64_t kUnknown = ~std::uint64_t{0};
    std::vector<std::uint64_t> memo(g_.exprs().size(), kUnknown);
    std::size_t depth = 0;
    std::function<std::uint64_t(std::uint32_t)> rule_size;
    std::function<std::uint64_t(ExprId)> expr_size_uncached;
    auto expr_size = [&](ExprId id) -> std::uint64_t {
      if (memo[id] != kUnknown) return memo[id];
      if (depth >= limits_.max_expr_depth) return cap;
      ++depth;
      const std::uint64_t v = expr_size_uncached(id);
      --depth;
      return memo[id] = v;
    };
    expr_size_uncached = [&](ExprId id) -> std::uint64_t {
      const Expr& e = g_.expr(id);
      std::uint64_t v = 0;
      switch (e.kind) {
        case ExprKind::kEmpty: return 0;
        case ExprKind::kToken: return 1;
        case ExprKind::kBytes: return std::min<std::uint64_t>(e.bytes.size(), cap);
        case ExprKind::kCharClass: return std::min<std::uint64_t>(1 + 2 * e.ranges.size(), cap);
        case ExprKind::kRuleRef: {
          const std::uint64_t r = rule_size(e.rule);
          return r == kNotInlined ? 1 : r;
        }
        case ExprKind::kSequence:
          for (std::size_t i = 0; i < e.children.size() && v < cap; ++i) v = std::min(v + expr_size(e.children[i]), cap);
          return v;
        case ExprKind::kChoice:
          v = std::min<std::uint64_t>(1 + e.children.size(), cap);
          for (std::size_t i = 0; i < e.children.size() && v < cap; ++i) v = std::min(v + expr_size(e.children[i]), cap);
          return v;
        case ExprKind::kRepeat: {
          const std::uint64_t child = expr_size(e.children.at(0));
          return std::min(std::min<std::uint64_t>(copies(e), cap) * (child + 1) + 2, cap);
        }
        case ExprKind::kGraph:
          v = std::min<std::uint64_t>(e.graph_states + 2, cap);
          for (std::size_t i = 0; i < e.edges.size() && v < cap; ++i)
            v = std::min(v + expr_size(e.children[e.edges[i].label]) + 1, cap);
          return v;
      }
      return cap;
    };
    rule_size = [&](std::uint32_t r) -> std::uint64_t {
      if (mark[r] == 1) {
        recursive[r] = 1;
        return kNotInlined;
      }
      if (mark[r] == 2) return inline_size_[r];
      mark[r] = 1;
      const std::uint64_t v = g_.rule(r).defined ? expr_size(g_.rule(r).body) : kInlineMaxStates + 1;
      mark[r] = 2;
      // A rule met again while its body was measured is recursive: never inlined (nor any rule on the
      // cycle, which is marked when the walk returns to it).
      if (!recursive[r] && v <= kInlineMaxStates && r != g_.root()) inline_size_[r] = v;
      return inline_size_[r];
    };
    for (std::uint32_t r = 0; r < n_rules; ++r) rule_size(r);
  }

  // Front-ends share sub-expressions freely (the JSON Schema converter reuses a member's key and
  // value in every position an object's members may take; a counted repetition repeats its child).
  // Inlining every use copies the states, and every copy gets its own token table. Here each large
  // expression met more than once becomes one rule: the states, and so the tables, exist once.
  // Expression ids grow from children to parents, so a walk from the highest id down visits every
  // parent before its children.
  void plan_shared_rules() {
    const auto& exprs = g_.exprs();
    const std::size_t n = exprs.size();
    chunk_of_.assign(n, kNotShared);
    std::unordered_map<ExprId, std::uint32_t> chunk_by_child;
    constexpr std::uint64_t kCap = std::uint64_t{1} << 40;
    auto sat = [&](std::uint64_t v) { return std::min(v, kCap); };
    std::vector<std::uint64_t> size(n, 0), longest(n, 0);  // states inlined; longest match in bytes
    for (std::size_t i = 0; i < n; ++i) {
      const Expr& e = exprs[i];
      std::uint64_t v = 0, len = 0;
      switch (e.kind) {
        case ExprKind::kEmpty: break;
        case ExprKind::kToken: v = len = 1; break;
        case ExprKind::kBytes: v = len = e.bytes.size(); break;
        case ExprKind::kCharClass: {
          const std::uint32_t top = e.negated || e.ranges.empty() ? kMaxCodePoint : e.ranges.back().hi;
          v = 1 + 2 * e.ranges.size();
          len = top < 0x80 ? 1 : top < 0x800 ? 2 : top < 0x10000 ? 3 : 4;
          break;
        }
        case ExprKind::kRuleRef:  // recursion may make it unbounded
          v = inline_size_[e.rule] != kNotInlined ? inline_size_[e.rule] : 1, len = kCap;
          break;
        case ExprKind::kSequence:
          for (ExprId c : e.children) v = sat(v + size[c]), len = sat(len + longest[c]);
          break;
        case ExprKind::kChoice:
          v = 1 + e.children.size();
          for (ExprId c : e.children) v = sat(v + size[c]), len = std::max(len, longest[c]);
          break;
        case ExprKind::kRepeat: {
          const ExprId c = e.children.at(0);
          v = sat(sat(copies(e)) * (size[c] + 1) + 2);
          len = longest[c] == 0 ? 0 : e.max == kUnbounded ? kCap : sat(std::uint64_t{e.max} * longest[c]);
          if (e.max != kUnbounded && v > kChunkMinStates && (e.min >= 2 * kChunk || e.max - e.min >= 2 * kChunk)) {
            // One chunk rule per repeated child: strings of different lengths share theirs.
            auto [at, fresh] = chunk_by_child.emplace(c, static_cast<std::uint32_t>(chunk_body_.size()));
            if (fresh) chunk_body_.push_back(c);
            chunk_of_[i] = at->second;
            v = sat(2 * (std::uint64_t{e.max} / kChunk) + 3 * kChunk * (size[c] + 1));  // the calls and the copies
          }
          break;
        }
        case ExprKind::kGraph:
          v = e.graph_states + 2;
          for (const GraphEdge& edge : e.edges) v = sat(v + size[e.children[edge.label]] + 1);
          len = graph_longest(e, longest);
          break;
      }
      size[i] = v;
      longest[i] = len;
    }
    std::vector<std::uint64_t> occurs(n, 0);
    for (const Rule& r : g_.rules())
      if (r.defined) occurs[r.body] = sat(occurs[r.body] + 1);
    promoted_.assign(n, kNotShared);
    for (std::size_t i = n; i-- > 0;) {
      if (occurs[i] == 0) continue;
      const Expr& e = exprs[i];
      std::uint64_t each = occurs[i];
      if (occurs[i] >= 2 && size[i] >= kSharedMinStates && longest[i] > kSharedMinLength) {
        promoted_[i] = static_cast<std::uint32_t>(g_.rules().size() + shared_body_.size());
        shared_body_.push_back(static_cast<ExprId>(i));
        each = 1;
      }
      if (e.kind == ExprKind::kRepeat) {
        ExprId c = e.children.at(0);
        const std::uint64_t made = chunk_of_[i] != kNotShared ? 3 * kChunk : copies(e);  // chunk + tail copies
        occurs[c] = sat(occurs[c] + sat(each * made));
      } else if (e.kind == ExprKind::kGraph) {
        for (const GraphEdge& edge : e.edges) occurs[e.children[edge.label]] = sat(occurs[e.children[edge.label]] + each);
      } else {
        for (ExprId c : e.children) occurs[c] = sat(occurs[c] + each);
      }
    }
  }

  // The longest match of a graph in bytes (capped), from its labels' longest matches: unbounded when a
  // cycle reads anything, else the longest path (states in topological order by depth-first search).
  static std::uint64_t graph_longest(const Expr& e, const std::vector<std::uint64_t>& longest) {
    constexpr std::uint64_t kCap = std::uint64_t{1} << 40;
    const std::uint32_t n = e.graph_states;
    std::vector<std::vector<std::pair<std::uint32_t, std::uint64_t>>> out(n);
    for (const GraphEdge& edge : e.edges) out[edge.from].push_back({edge.to, longest[e.children[edge.label]]});
    std::vector<std::uint8_t> mark(n, 0);  // 0 new, 1 on the stack, 2 done
    std::vector<std::uint64_t> best(n, 0);
    std::vector<std::pair<std::uint32_t, std::size_t>> stack{{0, 0}};
    mark[0] = 1;
    while (!stack.empty()) {
      auto& [s, next] = stack.back();
      if (next < out[s].size()) {
        const auto [t, len] = out[s][next++];
        if (mark[t] == 1) return kCap;  // a cycle (a cycle of empty labels is harmless but rare: capped too)
        if (mark[t] == 0) {
          mark[t] = 1;
          stack.push_back({t, 0});
        }
        continue;
      }
      for (const auto& [t, len] : out[s]) best[s] = std::max(best[s], std::min(kCap, len + best[t]));
      mark[s] = 2;
      stack.pop_back();
    }
    return best[0];
  }

  // How many copies of its child a repetition inlines.
  static std::uint64_t copies(const Expr& e) {
    return e.max == kUnbounded ? std::uint64_t{e.min} + 1 : std::max<std::uint64_t>(e.max, 1);
  }

  std::uint32_t new_state() {
    if (states.size() >= limits_.max_states) {
      throw LimitError(fmt::format(
          "[compile] rule '{}': the grammar needs more than {} automaton states (large counted "
          "repetitions multiply states; lower the counts or raise the limit)",
          rule_name(rule_), limits_.max_states));
    }
    if ((states.size() & 0xFFF) == 0 && limits_.deadline.passed()) {
      throw LimitError(fmt::format("[compile] rule '{}': compile time limit exceeded while building "
                                   "the automaton ({} states)",
                                   rule_name(rule_), states.size()));
    }
    states.emplace_back(&arena);
    states.back().rule = rule_;
    return static_cast<std::uint32_t>(states.size() - 1);
  }

  std::uint32_t fresh_from(std::uint32_t from) {
    std::uint32_t s = new_state();
    states[from].eps.push_back(s);
    return s;
  }

  // A character class's UTF-8 byte sequences, computed once per expression (a JSON string's character
  // classes are emitted at every position of a bounded string).
  const std::vector<Utf8Seq>& utf8_seqs_of(ExprId id) {
    if (utf8_seqs_.size() <= id) utf8_seqs_.resize(g_.exprs().size());
    auto& slot = utf8_seqs_[id];
    if (!slot.has_value()) slot = utf8_seqs(g_.expr(id));
    return *slot;
  }

  static std::vector<Utf8Seq> utf8_seqs(const Expr& e) {
    std::vector<CharRange> ranges;
    if (!e.negated) {
      ranges = e.ranges;
    } else {
      std::uint32_t next = 0;
      for (const CharRange& r : e.ranges) {
        if (r.lo > next) ranges.push_back({next, r.lo - 1});
        next = r.hi + 1;
      }
      if (next <= kMaxCodePoint) ranges.push_back({next, kMaxCodePoint});
    }
    std::vector<Utf8Seq> seqs;
    for (const CharRange& r : ranges) {
      // Surrogates are not scalar values: never matched.
      if (r.lo <= 0xDFFF && r.hi >= 0xD800) {
        if (r.lo < 0xD800) utf8_split(r.lo, 0xD7FF, seqs);
        if (r.hi > 0xDFFF) utf8_split(0xE000, std::min(r.hi, kMaxCodePoint), seqs);
      } else {
        utf8_split(r.lo, std::min(r.hi, kMaxCodePoint), seqs);
      }
    }
    return seqs;
  }

  // The state that reads the byte ranges [k, n) of `ranges` and then is at `exit`, one per such suffix
  // (up to kMaxSharedSuffix ranges long) and exit: the continuation bytes of every character class, and
  // the ends of literals, that lead to the same state are read by the same states. Built from the end,
  // without recursion (a literal may be megabytes long). Each shared state is keyed by its one edge
  // (range, next state): the next state is itself the one state of the shorter suffix, so this names
  // the whole suffix and its exit.
  static constexpr std::size_t kMaxSharedSuffix = 8;
  std::uint32_t suffix_state(std::span<const std::pair<std::uint8_t, std::uint8_t>> ranges, std::size_t k,
                             std::uint32_t exit) {
    std::uint32_t next = exit;
    for (std::size_t i = ranges.size(); i-- > k;) {
      const bool shared = ranges.size() - i <= kMaxSharedSuffix;
      const std::uint64_t key = std::uint64_t{next} << 16 | std::uint64_t{ranges[i].first} << 8 | ranges[i].second;
      if (shared) {
        if (auto it = suffix_states_.find(key); it != suffix_states_.end()) {
          next = it->second;
          continue;
        }
      }
      const std::uint32_t s = new_state();
      states[s].bytes.push_back({ranges[i].first, ranges[i].second, next});
      if (shared) suffix_states_.emplace(key, s);
      next = s;
    }
    return next;
  }

  // Emits `id` from `entry` to the existing state `exit` (the edges of a graph, the alternatives of a
  // choice): the last bytes of character classes and literals are shared with every other that leads to
  // `exit`, and a sub-expression met again on the way to the same `exit` (a JSON string's escapes after
  // each state of a trie of keys) reuses its first copy. A copy is entered only through its own fresh
  // start, so sharing it between entries keeps the language. `inline_shared`: `id` is emitted here even
  // when it is a shared rule's body (the rule itself is being built).
  void emit_into(ExprId id, std::uint32_t entry, std::uint32_t exit, std::size_t depth, bool inline_shared = false) {
    if (depth > limits_.max_expr_depth) {
      throw LimitError(fmt::format("[compile] rule '{}': expressions nested deeper than {}",
                                   rule_name(rule_), limits_.max_expr_depth));
    }
    const Expr& e = g_.expr(id);
    const bool here = inline_shared || promoted_[id] == kNotShared;
    std::vector<std::pair<std::uint8_t, std::uint8_t>> ranges;
    if (here && (e.kind == ExprKind::kEmpty || (e.kind == ExprKind::kBytes && e.bytes.empty()))) {
      states[entry].eps.push_back(exit);
      return;
    }
    if (here && e.kind == ExprKind::kCharClass) {
      for (const Utf8Seq& seq : utf8_seqs_of(id)) {
        ranges.clear();
        for (int i = 0; i < seq.n; ++i) ranges.emplace_back(seq.lo[i], seq.hi[i]);
        const std::uint32_t next = suffix_state(ranges, 1, exit);  // may grow `states`: index after
        states[entry].bytes.push_back({seq.lo[0], seq.hi[0], next});
      }
      return;
    }
    if (here && e.kind == ExprKind::kBytes) {
      for (unsigned char c : e.bytes) ranges.emplace_back(c, c);
      const std::uint32_t next = suffix_state(ranges, 1, exit);
      states[entry].bytes.push_back({ranges[0].first, ranges[0].second, next});
      return;
    }
    if (here && e.kind == ExprKind::kChoice) {
      for (ExprId c : e.children) emit_into(c, entry, exit, depth + 1);
      return;
    }
    if (here && e.kind == ExprKind::kToken) {
      states[entry].tokens.push_back({token_set(id), exit});
      return;
    }
    const std::uint64_t key = std::uint64_t{id} << 32 | exit;
    auto it = fragments_.find(key);
    if (it == fragments_.end()) {
      const std::uint32_t start = new_state();
      const std::uint32_t end = emit(id, start, depth + 1, inline_shared);
      states[end].eps.push_back(exit);
      it = fragments_.emplace(key, start).first;
    }
    states[entry].eps.push_back(it->second);
  }

  std::uint32_t emit(ExprId id, std::uint32_t entry, std::size_t depth, bool inline_shared = false) {
    if (depth > limits_.max_expr_depth) {
      throw LimitError(fmt::format("[compile] rule '{}': expressions nested deeper than {}",
                                   rule_name(rule_), limits_.max_expr_depth));
    }
    if (!inline_shared && promoted_[id] != kNotShared) {
      std::uint32_t next = new_state();
      states[entry].calls.push_back({promoted_[id], next});
      return next;
    }
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty:
        return entry;
      case ExprKind::kBytes: {
        std::uint32_t cur = entry;
        for (unsigned char c : e.bytes) {
          std::uint32_t next = new_state();
          states[cur].bytes.push_back({c, c, next});
          cur = next;
        }
        return cur;
      }
      case ExprKind::kCharClass: {
        const std::uint32_t exit = new_state();
        emit_into(id, entry, exit, depth, /*inline_shared=*/true);
        return exit;
      }
      case ExprKind::kToken: {
        const std::uint32_t exit = new_state();
        states[entry].tokens.push_back({token_set(id), exit});
        return exit;
      }
      case ExprKind::kSequence: {
        std::uint32_t cur = entry;
        for (ExprId c : e.children) cur = emit(c, cur, depth + 1);
        return cur;
      }
      case ExprKind::kChoice: {
        const std::uint32_t exit = new_state();
        emit_into(id, entry, exit, depth, /*inline_shared=*/true);
        return exit;
      }
      case ExprKind::kRepeat: {
        if (chunk_of_[id] != kNotShared) return emit_chunked(e, chunk_of_[id], entry, depth);
        // Each copy starts at a fresh state (which bypass_forwarders removes where it only moves on):
        // copies chained state to state build the same language but a shape whose tables leave more
        // tokens to run-time checks (c.gbnf: 500 -> 634 uncertain tokens, tables 1.7x slower).
        std::uint32_t cur = entry;
        for (std::uint32_t i = 0; i < e.min; ++i) cur = emit(e.children.at(0), fresh_from(cur), depth + 1);
        if (e.max == kUnbounded) {
          // The loop state is re-entered after each copy: a fresh one unless `cur` has no edges yet
          // (its edges would be repeatable too).
          const RawState& c = states[cur];
          std::uint32_t loop =
              c.bytes.empty() && c.tokens.empty() && c.calls.empty() && c.eps.empty() ? cur : fresh_from(cur);
          std::uint32_t end = emit(e.children.at(0), fresh_from(loop), depth + 1);
          states[end].eps.push_back(loop);
          return loop;
        }
        if (e.max == e.min) return cur;
        std::uint32_t exit = new_state();
        for (std::uint32_t i = e.min; i < e.max; ++i) {
          states[cur].eps.push_back(exit);
          cur = emit(e.children.at(0), fresh_from(cur), depth + 1);
        }
        states[cur].eps.push_back(exit);
        return exit;
      }
      case ExprKind::kRuleRef: {
        if (inline_size_[e.rule] != kNotInlined) return emit(g_.rule(e.rule).body, entry, depth + 1);
        std::uint32_t next = new_state();
        states[entry].calls.push_back({e.rule, next});
        return next;
      }
      case ExprKind::kGraph: {
        // One state per graph state (the start a fresh one: edges may lead back to it), each edge its
        // label's states between them, and the accepting states joined at one exit.
        std::vector<std::uint32_t> at(e.graph_states);
        at[0] = fresh_from(entry);
        for (std::uint32_t i = 1; i < e.graph_states; ++i) at[i] = new_state();
        if (e.distinct_states) mark_distinct(id, at);
        for (const GraphEdge& edge : e.edges) emit_into(e.children[edge.label], at[edge.from], at[edge.to], depth + 1);
        const std::uint32_t exit = new_state();
        for (std::uint32_t a : e.accepting) states[at[a]].eps.push_back(exit);
        return exit;
      }
    }
    return entry;
  }

  // A chunked repetition (see kChunk): calls of chunk rule `chunk` and the copies around them. Here the
  // copies follow one another state to state (no fresh state each, unlike emit's kRepeat); this is the
  // form that was measured (MaskBench dev split, docs/grammar-performance.md, session 10).
  std::uint32_t emit_chunked(const Expr& e, std::uint32_t chunk, std::uint32_t entry, std::size_t depth) {
    const std::uint32_t rule = static_cast<std::uint32_t>(g_.rules().size() + shared_body_.size() + chunk);
    const ExprId c = e.children.at(0);
    auto call = [&](std::uint32_t from) {
      const std::uint32_t next = new_state();
      states[from].calls.push_back({rule, next});
      return next;
    };
    std::uint32_t cur = entry;
    for (std::uint32_t i = 0; i < e.min / kChunk; ++i) cur = call(cur);
    for (std::uint32_t i = 0; i < e.min % kChunk; ++i) cur = emit(c, cur, depth + 1);
    const std::uint32_t n = e.max - e.min;
    if (n == 0) return cur;
    const std::uint32_t whole = n / kChunk;  // A
    std::uint32_t tail_copies = n;
    if (whole >= 1) {
      const std::uint32_t tail = new_state();
      for (std::uint32_t i = 0; i + 1 < whole; ++i) {
        states[cur].eps.push_back(tail);
        cur = call(cur);
      }
      states[cur].eps.push_back(tail);
      cur = tail;
      tail_copies = kChunk + n % kChunk;
    }
    const std::uint32_t exit = new_state();
    for (std::uint32_t i = 0; i < tail_copies; ++i) {
      states[cur].eps.push_back(exit);
      cur = emit(c, cur, depth + 1);
    }
    states[cur].eps.push_back(exit);
    return exit;
  }

  // The index of kToken expression `id` in token_sets (one per expression).
  std::uint32_t token_set(ExprId id) {
    auto [it, fresh] = token_set_of_.try_emplace(id, static_cast<std::uint32_t>(token_sets.size()));
    if (fresh) token_sets.push_back(id);
    return it->second;
  }
  std::unordered_map<ExprId, std::uint32_t> token_set_of_;  // token_sets' index, by expression
  static constexpr std::uint32_t kNotShared = ~0u;
  const Grammar& g_;
  const AutomatonLimits& limits_;
  std::uint32_t rule_ = 0;
  // Marks the states of a graph with distinct states (Expr::distinct_states) as such, while it is
  // emitted in one place only: at a second copy the first one's marks are cleared (copies of one state
  // at two places may have the same future, and share a table).
  void mark_distinct(ExprId id, const std::vector<std::uint32_t>& at) {
    auto [it, first] = distinct_copy_.try_emplace(id, at);
    if (first) {
      for (std::uint32_t s : at) states[s].distinct = true;
    } else {
      for (std::uint32_t s : it->second) states[s].distinct = false;
      it->second.clear();
    }
  }

  std::vector<std::uint32_t> promoted_;  // per expression: its shared rule, or kNotShared
  static constexpr std::uint64_t kNotInlined = ~std::uint64_t{0};
  std::vector<std::uint64_t> inline_size_;  // per rule: its states when inlined, or kNotInlined
  std::vector<ExprId> shared_body_;      // per shared rule (numbered after the grammar's)
  std::vector<std::uint32_t> chunk_of_;  // per expression: its chunk (a repetition written with one), or kNotShared
  std::vector<ExprId> chunk_body_;       // per chunk rule (numbered after the shared ones): the repeated child
  // emit_into's shared parts (states of the rule being built: exits are never shared between rules):
  // suffix states by their one edge (next state, byte range), fragments by (expression, exit).
  std::unordered_map<std::uint64_t, std::uint32_t> suffix_states_;
  std::vector<std::optional<std::vector<Utf8Seq>>> utf8_seqs_;  // per expression, computed on first use
  std::unordered_map<std::uint64_t, std::uint32_t> fragments_;
  std::unordered_map<ExprId, std::vector<std::uint32_t>> distinct_copy_;  // see mark_distinct
};

// Bypasses the states whose only edge is one empty move (the joints the construction leaves between
// sub-expressions): every edge into one goes to where it leads, and it is left without edges (then
// unproductive, and dropped). Fewer states for every pass after this one, and fewer in the stack
// automaton's configurations. Rule starts stay (calls enter there); a cycle of such states keeps one.
// Returns whether any was bypassed (dropping a bypassed self-loop can leave a new one: call again).
bool bypass_forwarders(std::vector<RawState>& st, const std::vector<std::uint32_t>& rule_start) {
  const std::size_t n = st.size();
  std::vector<std::uint32_t> to(n);
  bool any = false;
  for (std::uint32_t s = 0; s < n; ++s) {
    const RawState& r = st[s];
    to[s] = r.bytes.empty() && r.tokens.empty() && r.calls.empty() && r.eps.size() == 1 && rule_start[r.rule] != s
                ? r.eps[0]
                : s;
    any = any || to[s] != s;
  }
  if (!any) return false;
  // Resolve chains to their last state: 0 unvisited, 1 on the current chain, 2 resolved.
  std::vector<std::uint8_t> mark(n, 0);
  std::vector<std::uint32_t> chain;
  for (std::uint32_t s = 0; s < n; ++s) {
    std::uint32_t t = s;
    chain.clear();
    while (mark[t] == 0 && to[t] != t) {
      mark[t] = 1;
      chain.push_back(t);
      t = to[t];
    }
    if (mark[t] == 1) to[t] = t;  // a cycle of empty moves: t stays
    const std::uint32_t end = to[t];
    mark[t] = 2;
    for (std::uint32_t c : chain) {
      to[c] = end;
      mark[c] = 2;
    }
  }
  for (std::uint32_t s = 0; s < n; ++s) {
    RawState& r = st[s];
    if (to[s] != s) {
      r.eps.clear();
      continue;
    }
    for (ByteEdge& e : r.bytes) e.target = to[e.target];
    for (TokenEdge& e : r.tokens) e.target = to[e.target];
    for (CallEdge& c : r.calls) c.target = to[c.target];
    for (std::uint32_t& t : r.eps) t = to[t];
    std::erase(r.eps, s);
    std::sort(r.eps.begin(), r.eps.end());
    r.eps.erase(std::unique(r.eps.begin(), r.eps.end()), r.eps.end());
  }
  return true;
}

// A word at a time: a UTF-8 continuation range is 64 bytes; bit by bit, this was 7% of a large
// automaton's build.
void byte_set_add_range(ByteSet& s, unsigned lo, unsigned hi) {
  for (unsigned w = lo >> 6; w <= hi >> 6; ++w) {
    const unsigned from = std::max(lo, w * 64) & 63, to = std::min(hi, w * 64 + 63) & 63;
    s[w] |= (~0ULL >> (63 - to)) & (~0ULL << from);
  }
}

bool byte_set_merge(ByteSet& into, const ByteSet& from) {
  bool changed = false;
  for (int i = 0; i < 4; ++i) {
    std::uint64_t v = into[i] | from[i];
    changed |= v != into[i];
    into[i] = v;
  }
  return changed;
}

}  // namespace

std::size_t Automaton::memory_bytes() const {
  return (byte_begin.size() + token_begin.size() + call_begin.size() + eps_begin.size() + state_rule.size() +
          eps_edges.size() + token_sets.size()) * 4 +
         byte_edges.size() * sizeof(ByteEdge) + token_edges.size() * sizeof(TokenEdge) +
         call_edges.size() * sizeof(CallEdge) +
         reachable.size() + distinct.size() + rule_follow.size() * sizeof(ByteSet);
}

Automaton build_automaton(const Grammar& grammar, const AutomatonLimits& limits) {
  grammar.validate();
  Builder b(grammar, limits);
  b.build();
  std::vector<RawState>& st = b.states;
  const std::size_t n_rules = b.n_rules();
  while (bypass_forwarders(st, b.rule_start)) {
  }

  // Productive states: those that can reach their rule's final state. Worklist over reverse edges;
  // a call edge counts once both the callee's start and the return state are productive.
  const std::size_t n_raw = st.size();
  std::vector<std::uint8_t> prod(n_raw, 0);
  // Reverse edges, grouped by target (a counting sort: one array, not a vector per state).
  std::vector<std::uint32_t> rev_begin(n_raw + 1, 0), rev;
  auto for_each_edge = [&](auto&& f) {
    for (std::uint32_t s = 0; s < n_raw; ++s) {
      for (const ByteEdge& e : st[s].bytes) f(s, e.target);
      for (const TokenEdge& e : st[s].tokens) f(s, e.target);
      for (std::uint32_t t : st[s].eps) f(s, t);
      for (const CallEdge& c : st[s].calls) {
        f(s, c.target);
        f(s, b.rule_start[c.rule]);
      }
    }
  };
  for_each_edge([&](std::uint32_t, std::uint32_t t) { ++rev_begin[t + 1]; });
  for (std::size_t t = 0; t < n_raw; ++t) rev_begin[t + 1] += rev_begin[t];
  rev.resize(rev_begin[n_raw]);
  {
    std::vector<std::uint32_t> fill(rev_begin.begin(), rev_begin.end() - 1);
    for_each_edge([&](std::uint32_t s, std::uint32_t t) { rev[fill[t]++] = s; });
  }
  auto qualifies = [&](std::uint32_t s) {
    if (b.rule_final[st[s].rule] == s) return true;
    for (const ByteEdge& e : st[s].bytes)
      if (prod[e.target]) return true;
    for (const TokenEdge& e : st[s].tokens)
      if (prod[e.target]) return true;
    for (std::uint32_t t : st[s].eps)
      if (prod[t]) return true;
    for (const CallEdge& c : st[s].calls)
      if (prod[c.target] && prod[b.rule_start[c.rule]]) return true;
    return false;
  };
  std::vector<std::uint32_t> work;
  for (std::uint32_t r = 0; r < n_rules; ++r) {
    prod[b.rule_final[r]] = 1;
    work.push_back(b.rule_final[r]);
  }
  while (!work.empty()) {
    std::uint32_t t = work.back();
    work.pop_back();
    for (std::uint32_t i = rev_begin[t]; i < rev_begin[t + 1]; ++i) {
      const std::uint32_t s = rev[i];
      if (!prod[s] && qualifies(s)) {
        prod[s] = 1;
        work.push_back(s);
      }
    }
  }
  std::vector<std::uint32_t>().swap(rev);
  const std::uint32_t root = grammar.root();
  if (!prod[b.rule_start[root]]) {
    throw GrammarError(fmt::format("[compile] the grammar's language is empty: rule '{}' matches no "
                                   "string (every alternative needs an unmatchable part)",
                                   grammar.rule(root).name));
  }

  // Unproductive states are dropped (with the edges into them); the others keep their order, so each
  // rule's states stay contiguous, from its start to its final state.
  std::vector<std::uint32_t> id(n_raw, ~0u);
  std::size_t n = 0;
  for (std::uint32_t s = 0; s < n_raw; ++s)
    if (prod[s] || b.rule_start[st[s].rule] == s) id[s] = static_cast<std::uint32_t>(n++);
  Automaton a;
  a.root = root;
  a.token_sets = std::move(b.token_sets);
  for (std::uint32_t r = 0; r < n_rules; ++r) {
    a.rule_start.push_back(id[b.rule_start[r]]);
    a.rule_final.push_back(id[b.rule_final[r]]);
  }
  a.state_rule.resize(n);
  a.distinct.assign(n, 0);
  a.byte_begin.assign(n + 1, 0);
  a.token_begin.assign(n + 1, 0);
  a.call_begin.assign(n + 1, 0);
  a.eps_begin.assign(n + 1, 0);
  {
    std::size_t n_bytes = 0, n_calls = 0, n_eps = 0;
    for (std::uint32_t s = 0; s < n_raw; ++s) {
      if (!prod[s]) continue;
      n_bytes += st[s].bytes.size();
      n_calls += st[s].calls.size();
      n_eps += st[s].eps.size();
    }
    a.byte_edges.reserve(n_bytes);
    a.call_edges.reserve(n_calls);
    a.eps_edges.reserve(n_eps);
  }
  for (std::uint32_t s = 0; s < n_raw; ++s) {
    if (id[s] == ~0u) continue;
    const std::uint32_t i = id[s];
    a.state_rule[i] = st[s].rule;
    a.distinct[i] = st[s].distinct ? 1 : 0;
    a.byte_begin[i] = static_cast<std::uint32_t>(a.byte_edges.size());
    a.token_begin[i] = static_cast<std::uint32_t>(a.token_edges.size());
    a.call_begin[i] = static_cast<std::uint32_t>(a.call_edges.size());
    a.eps_begin[i] = static_cast<std::uint32_t>(a.eps_edges.size());
    if (prod[s]) {
      for (const ByteEdge& e : st[s].bytes)
        if (prod[e.target]) a.byte_edges.push_back({e.lo, e.hi, id[e.target]});
      for (const TokenEdge& e : st[s].tokens)
        if (prod[e.target]) a.token_edges.push_back({e.set, id[e.target]});
      for (const CallEdge& c : st[s].calls)
        if (prod[c.target] && prod[b.rule_start[c.rule]]) a.call_edges.push_back({c.rule, id[c.target]});
      for (std::uint32_t t : st[s].eps)
        if (prod[t]) a.eps_edges.push_back(id[t]);
    }
  }
  a.byte_begin[n] = static_cast<std::uint32_t>(a.byte_edges.size());
  a.token_begin[n] = static_cast<std::uint32_t>(a.token_edges.size());
  a.call_begin[n] = static_cast<std::uint32_t>(a.call_edges.size());
  a.eps_begin[n] = static_cast<std::uint32_t>(a.eps_edges.size());
  st.clear();

  // Reachable states from the root's start.
  a.reachable.assign(n, 0);
  work.push_back(a.rule_start[root]);
  a.reachable[a.rule_start[root]] = 1;
  auto visit = [&](std::uint32_t t) {
    if (!a.reachable[t]) {
      a.reachable[t] = 1;
      work.push_back(t);
    }
  };
  while (!work.empty()) {
    std::uint32_t s = work.back();
    work.pop_back();
    for (std::uint32_t i = a.byte_begin[s]; i < a.byte_begin[s + 1]; ++i) visit(a.byte_edges[i].target);
    for (std::uint32_t i = a.token_begin[s]; i < a.token_begin[s + 1]; ++i) visit(a.token_edges[i].target);
    for (std::uint32_t i = a.eps_begin[s]; i < a.eps_begin[s + 1]; ++i) visit(a.eps_edges[i]);
    for (std::uint32_t i = a.call_begin[s]; i < a.call_begin[s + 1]; ++i) {
      visit(a.call_edges[i].target);
      visit(a.rule_start[a.call_edges[i].rule]);
    }
  }

  // Nullable rules and, per state, whether its rule's end is reachable without input (null_end) and
  // which bytes can come first (first). Fixpoints by sweeps, latest states first (edges mostly point
  // forward in creation order, so a few sweeps suffice).
  a.rule_nullable.assign(n_rules, 0);
  std::vector<std::uint8_t> null_end(n, 0);
  // Each state's own bytes start its first set (computed once: the sweeps below only merge sets).
  std::vector<ByteSet> first(n, ByteSet{});
  for (std::uint32_t s = 0; s < n; ++s)
    for (std::uint32_t i = a.byte_begin[s]; i < a.byte_begin[s + 1]; ++i)
      byte_set_add_range(first[s], a.byte_edges[i].lo, a.byte_edges[i].hi);
  for (bool changed = true; changed;) {
    changed = false;
    if (limits.deadline.passed()) {
      throw LimitError("[compile] compile time limit exceeded in the nullable analysis");
    }
    for (std::uint32_t s = static_cast<std::uint32_t>(n); s-- > 0;) {
      bool ne = a.is_final(s);
      ByteSet f = first[s];
      for (std::uint32_t i = a.eps_begin[s]; i < a.eps_begin[s + 1]; ++i) {
        ne = ne || null_end[a.eps_edges[i]];
        byte_set_merge(f, first[a.eps_edges[i]]);
      }
      for (std::uint32_t i = a.call_begin[s]; i < a.call_begin[s + 1]; ++i) {
        const CallEdge& c = a.call_edges[i];
        byte_set_merge(f, first[a.rule_start[c.rule]]);
        if (a.rule_nullable[c.rule]) {
          ne = ne || null_end[c.target];
          byte_set_merge(f, first[c.target]);
        }
      }
      if (ne && !null_end[s]) {
        null_end[s] = 1;
        changed = true;
      }
      if (f != first[s]) {
        first[s] = f;
        changed = true;
      }
      std::uint32_t r = a.state_rule[s];
      if (s == a.rule_start[r] && null_end[s] && !a.rule_nullable[r]) {
        a.rule_nullable[r] = 1;
        changed = true;
      }
    }
  }
  // Follow bytes of each rule: what the callers can read after the call returns (transitively through
  // callers whose end is reached without input).
  a.rule_follow.assign(n_rules, ByteSet{});
  for (bool changed = true; changed;) {
    changed = false;
    for (std::uint32_t s = 0; s < n; ++s) {
      for (std::uint32_t i = a.call_begin[s]; i < a.call_begin[s + 1]; ++i) {
        const CallEdge& c = a.call_edges[i];
        changed |= byte_set_merge(a.rule_follow[c.rule], first[c.target]);
        if (null_end[c.target]) {
          changed |= byte_set_merge(a.rule_follow[c.rule], a.rule_follow[a.state_rule[c.target]]);
        }
      }
    }
  }
  // Follow contexts: direct return states, then closed over return states that end their rule.
  std::vector<std::vector<std::uint32_t>> direct(n_rules);
  for (std::uint32_t s = 0; s < n; ++s) {
    if (!a.reachable[s]) continue;
    for (std::uint32_t i = a.call_begin[s]; i < a.call_begin[s + 1]; ++i)
      direct[a.call_edges[i].rule].push_back(a.call_edges[i].target);
  }
  a.rule_contexts.assign(n_rules, {});
  std::vector<std::uint32_t> seen_rule(n_rules, ~0u);
  for (std::uint32_t r = 0; r < n_rules; ++r) {
    std::vector<std::uint32_t> out;
    std::vector<std::uint32_t> rules{r};
    seen_rule[r] = r;
    bool overflow = false;
    while (!rules.empty() && !overflow) {
      const std::uint32_t q = rules.back();
      rules.pop_back();
      for (std::uint32_t t : direct[q]) {
        out.push_back(t);
        const std::uint32_t tr = a.state_rule[t];
        if (null_end[t] && seen_rule[tr] != r) {
          seen_rule[tr] = r;
          rules.push_back(tr);
        }
      }
      overflow = out.size() > Automaton::kMaxContexts;
    }
    if (!overflow) {
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      a.rule_contexts[r] = std::move(out);
    }
  }
  return a;
}

}  // namespace pse::detail
