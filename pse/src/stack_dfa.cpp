#include "stack_dfa.h"

#include <algorithm>
#include <bit>
#include <map>
#include <span>

#include "pse/vocabulary.h"
#include "u32_hash.h"
#include "vocabulary_index.h"

namespace pse::detail {


namespace {
std::size_t node_hash(std::uint32_t parent, std::uint32_t state) {
  std::uint64_t h = ((std::uint64_t{parent} << 32) | state) * 0x9e3779b97f4a7c15ULL;
  return static_cast<std::size_t>(h ^ (h >> 32));  // the upper half (the parent's part) folded down
}
}  // namespace

std::uint32_t StackDfa::node(std::uint32_t parent, std::uint32_t state) {
  std::size_t mask = node_slots_.size() - 1;
  std::size_t slot = node_hash(parent, state) & mask;
  for (; node_slots_[slot] >= 0; slot = (slot + 1) & mask) {
    const Node& n = nodes_[static_cast<std::size_t>(node_slots_[slot])];
    if (n.parent == parent && n.state == state) return static_cast<std::uint32_t>(node_slots_[slot]);
  }
  const std::uint32_t height = parent == kNoNode ? 1 : nodes_[parent].height + 1;
  if (height > kMaxDepth) throw Overflow{};
  const auto id = static_cast<std::uint32_t>(nodes_.size());
  nodes_.push_back({parent, state, height});
  node_slots_[slot] = static_cast<std::int32_t>(id);
  if (nodes_.size() * 2 > node_slots_.size()) {  // keep the table at most half full
    node_slots_.assign(node_slots_.size() * 2, -1);
    mask = node_slots_.size() - 1;
    for (std::size_t k = 0; k < nodes_.size(); ++k) {
      std::size_t t = node_hash(nodes_[k].parent, nodes_[k].state) & mask;
      while (node_slots_[t] >= 0) t = (t + 1) & mask;
      node_slots_[t] = static_cast<std::int32_t>(k);
    }
  }
  return id;
}

std::int32_t StackDfa::find_node(std::uint32_t parent, std::uint32_t state) const {
  const std::size_t mask = node_slots_.size() - 1;
  for (std::size_t slot = node_hash(parent, state) & mask; node_slots_[slot] >= 0;
       slot = (slot + 1) & mask) {
    const Node& n = nodes_[static_cast<std::size_t>(node_slots_[slot])];
    if (n.parent == parent && n.state == state) return node_slots_[slot];
  }
  return -1;
}

std::int32_t StackDfa::start(std::span<const std::uint32_t> states) {
  seeds_.clear();
  for (std::uint32_t s : states) seeds_.push_back(node(kNoNode, canonical(s)));
  return close_and_intern();
}

std::size_t StackDfa::memory_bytes() const {
  std::size_t n = trans_.capacity() * 4 + outer_final_.capacity() + text_steps_.capacity() * 4 +
                  ascii_self_loop_.capacity() + ascii_loops_.capacity() * 16 + ascii_loops_known_.capacity();
  for (const auto& c : configs_) n += c.capacity() * 4 + sizeof(c);
  n += nodes_.capacity() * sizeof(Node) + node_slots_.capacity() * 4 + closure_mark_.capacity() * 4;
  n += config_index_.memory_bytes() + seed_index_.memory_bytes();
  n += (seed_words_.capacity() + seed_begin_.capacity() + seed_config_.capacity()) * 4;
  return n + group_bytes_;
}

ByteSet StackDfa::first_bytes(std::int32_t config) const {
  ByteSet out{};
  for (const std::uint32_t n : configs_[static_cast<std::size_t>(config)]) {
    const std::uint32_t s = nodes_[n].state;
    for (std::uint32_t e = a_.byte_begin[s]; e < a_.byte_begin[s + 1]; ++e) {
      for (unsigned b = a_.byte_edges[e].lo; b <= a_.byte_edges[e].hi; ++b)
        out[b >> 6] |= 1ULL << (b & 63);
    }
  }
  return out;
}

std::int32_t StackDfa::compute_step(std::int32_t config, std::uint8_t byte) {
  // Seeds written with class representatives: equivalent states close to configurations with the same
  // stacks (a closure's own states are then the representative's, so first_bytes and steps stay exact).
  // The states below a top are representatives already. (configs_ may grow below: indexed each time.)
  seeds_.clear();
  for (std::size_t i = 0; i < configs_[static_cast<std::size_t>(config)].size(); ++i) {
    const std::uint32_t n = configs_[static_cast<std::size_t>(config)][i];
    const std::uint32_t s = nodes_[n].state;
    for (std::uint32_t e = a_.byte_begin[s]; e < a_.byte_begin[s + 1]; ++e) {
      const ByteEdge& be = a_.byte_edges[e];
      if (byte < be.lo || byte > be.hi) continue;
      seeds_.push_back(node(nodes_[n].parent, canonical(be.target)));
    }
  }
  if (seeds_.empty()) return kDead;
  return close_and_intern();
}

std::int32_t StackDfa::close_and_intern() {
  // Seeds closed before close to the same configuration: many steps (from configurations that differ in
  // stacks the byte does not move) lead to seeds met already, and the closure (through every rule a
  // stack may call) costs far more than the lookup. A seed set is its nodes, sorted.
  std::sort(seeds_.begin(), seeds_.end());
  seeds_.erase(std::unique(seeds_.begin(), seeds_.end()), seeds_.end());
  const std::uint64_t h = hash_u32s(seeds_);
  const std::int32_t met = seed_index_.find(h, [&](std::int32_t e) {
    const auto k = static_cast<std::size_t>(e);
    return std::equal(seeds_.begin(), seeds_.end(), seed_words_.begin() + seed_begin_[k],
                      seed_words_.begin() + seed_begin_[k + 1]);
  });
  if (met >= 0) return seed_config_[static_cast<std::size_t>(met)];
  const std::int32_t id = close_seeds();
  (void)seed_index_.add(h);
  seed_words_.insert(seed_words_.end(), seeds_.begin(), seeds_.end());
  seed_begin_.push_back(static_cast<std::uint32_t>(seed_words_.size()));
  seed_config_.push_back(id);
  return id;
}

std::int32_t StackDfa::close_seeds() {
  // Closure: epsilon moves, calls (push the return state, enter the callee) and completions of a
  // called rule (pop: continue at the return state). A completed stack of height one is an outer
  // completion. Between two bytes a stack can grow by at most one frame per rule unless some rule
  // calls itself without reading a byte (left recursion): that closure would never end, so it
  // overflows at once. A stack is a node (its top state over the node of the stack below), so a move
  // makes one node whatever the stack's height.
  std::uint32_t base = kMaxDepth;
  for (const std::uint32_t n : seeds_) base = std::min(base, nodes_[n].height);
  const std::size_t max_height = std::min<std::size_t>(kMaxDepth, base + a_.rule_start.size() + 1);
  if (++closure_epoch_ == 0) {  // wrapped: forget every mark
    std::fill(closure_mark_.begin(), closure_mark_.end(), 0u);
    closure_epoch_ = 1;
  }
  work_.clear();
  // The key: whether the closure has an outer completion (key_[0], set at the end), then its states that
  // read bytes, sorted.
  key_.clear();
  key_.push_back(0);
  std::size_t n_met = 0;
  auto add = [&](std::uint32_t n) {
    if (closure_mark_.size() <= n) {
      closure_mark_.resize(std::max<std::size_t>(nodes_.size(), 2 * closure_mark_.size()), 0);
    }
    if (closure_mark_[n] == closure_epoch_) return;
    closure_mark_[n] = closure_epoch_;
    if (nodes_[n].height > max_height || ++n_met > kMaxElements * 8) throw Overflow{};
    work_.push_back(n);
  };
  for (const std::uint32_t n : seeds_) add(n);
  bool outer = false;
  while (!work_.empty()) {
    const std::uint32_t n = work_.back();
    work_.pop_back();
    const std::uint32_t s = nodes_[n].state, below = nodes_[n].parent;
    for (std::uint32_t e = a_.eps_begin[s]; e < a_.eps_begin[s + 1]; ++e) add(node(below, a_.eps_edges[e]));
    for (std::uint32_t e = a_.call_begin[s]; e < a_.call_begin[s + 1]; ++e) {
      const CallEdge& c = a_.call_edges[e];
      // The return state with its class representative, as in the seeds: a loop through a call then
      // closes at once (the configuration after one character of a string is the one after two).
      add(node(node(below, canonical(c.target)), a_.rule_start[c.rule]));
    }
    if (a_.is_final(s)) {
      if (below == kNoNode) {
        outer = true;
      } else {
        add(below);
      }
    }
    if (a_.has_bytes(s)) {
      if (key_.size() > kMaxElements) throw Overflow{};
      key_.push_back(n);
    }
  }
  std::sort(key_.begin() + 1, key_.end());
  key_[0] = outer ? 1 : 0;
  const std::uint64_t h = hash_u32s(key_);
  const std::int32_t met = config_index_.find(h, [&](std::int32_t c) {
    const auto& nodes = configs_[static_cast<std::size_t>(c)];
    return outer_final_[static_cast<std::size_t>(c)] == key_[0] &&
           std::equal(key_.begin() + 1, key_.end(), nodes.begin(), nodes.end());
  });
  if (met >= 0) return met;
  if (configs_.size() >= max_configs_) throw Overflow{};
  const std::int32_t id = config_index_.add(h);  // (the configuration's id: both count from 0)
  configs_.emplace_back(key_.begin() + 1, key_.end());
  outer_final_.push_back(outer ? 1 : 0);
  trans_.resize(trans_.size() + 256, kUnknown);
  return id;
}

template <class Fn>
bool StackDfa::each_byte_interval(std::int32_t config, unsigned lo, unsigned hi, Fn fn) {
  // A step depends only on which byte edges of the configuration's states match the byte.
  std::vector<unsigned> cuts;
  for (const std::uint32_t n : configs_[static_cast<std::size_t>(config)]) {
    const std::uint32_t s = nodes_[n].state;
    for (std::uint32_t e = a_.byte_begin[s]; e < a_.byte_begin[s + 1]; ++e) {
      cuts.push_back(a_.byte_edges[e].lo);
      cuts.push_back(a_.byte_edges[e].hi + 1u);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  for (unsigned b = lo; b <= hi;) {
    const auto next = std::upper_bound(cuts.begin(), cuts.end(), b);
    const unsigned last = next == cuts.end() || *next > hi ? hi : *next - 1;
    if (!fn(b, last)) return false;
    if (last == hi) break;
    b = last + 1;
  }
  return true;
}

bool StackDfa::loops_on(std::int32_t config, VocabularyIndex::TokenClass cls) {
  if (cls == VocabularyIndex::TokenClass::kText) return text_step(config) == config;
  static constexpr std::array<std::uint64_t, 2> kPlain = [] {
    std::array<std::uint64_t, 2> set{};
    for (const auto& [lo, hi] : VocabularyIndex::kPlainRanges)
      for (unsigned b = lo; b <= hi; ++b) set[b >> 6] |= std::uint64_t{1} << (b & 63);
    return set;
  }();
  const std::array<std::uint64_t, 2>& loops = ascii_loops(config);
  return (kPlain[0] & ~loops[0]) == 0 && (kPlain[1] & ~loops[1]) == 0;
}


std::int32_t StackDfa::multibyte_step(std::int32_t config) {
  const auto c = static_cast<std::size_t>(config);
  if (multibyte_steps_.size() <= c) multibyte_steps_.resize(n_configs(), kUnknown);
  if (multibyte_steps_[c] != kUnknown) return multibyte_steps_[c];
  // Every one of Unicode's well-formed multi-byte sequences (byte ranges per position) must lead to the
  // same configuration: follow the set of configurations reached after each position of a sequence (a
  // handful, since the ranges are read by few distinct edges).
  // (Constant data, no destructor: the background table threads may still walk while statics are
  // destroyed at exit.)
  struct Range {
    std::uint8_t lo, hi;
  };
  struct Sequence {
    std::size_t length;
    Range at[4];
  };
  static constexpr Sequence kSequences[] = {
      {2, {{0xC2, 0xDF}, {0x80, 0xBF}}},
      {3, {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}}},
      {3, {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}}},
      {3, {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}}},
      {3, {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}}},
      {4, {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}}},
      {4, {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}}},
      {4, {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}}},
  };
  auto find = [&]() -> std::int32_t {
    std::int32_t target = kUnknown;
    for (const Sequence& seq : kSequences) {
      std::vector<std::int32_t> at{config};
      for (const Range& r : std::span<const Range>(seq.at, seq.length)) {
        std::vector<std::int32_t> next;
        for (const std::int32_t from : at) {
          const bool ok = each_byte_interval(from, r.lo, r.hi, [&](unsigned b, unsigned) {
            const std::int32_t t = step(from, static_cast<std::uint8_t>(b));
            if (t == kDead) return false;
            if (std::find(next.begin(), next.end(), t) == next.end()) next.push_back(t);
            return next.size() <= 16;  // beyond: not worth finding, the walk reads them instead
          });
          if (!ok) return kDead;
        }
        at = std::move(next);
      }
      if (at.size() != 1 || (target != kUnknown && at[0] != target)) return kDead;
      target = at[0];
    }
    return target;
  };
  const std::int32_t target = find();
  multibyte_steps_.resize(std::max(multibyte_steps_.size(), n_configs()), kUnknown);  // steps may add configurations
  multibyte_steps_[c] = target;
  return target;
}

std::int32_t StackDfa::text_step(std::int32_t config) {
  const auto c = static_cast<std::size_t>(config);
  if (text_steps_.size() <= c) text_steps_.resize(n_configs(), kUnknown);
  if (text_steps_[c] != kUnknown) return text_steps_[c];
  // Every plain byte, then every multi-byte character, must lead to the same configuration.
  auto find = [&]() -> std::int32_t {
    const std::int32_t target = step(config, 'a');
    if (target == kDead) return kDead;
    for (const auto& [lo, hi] : VocabularyIndex::kPlainRanges) {
      if (!each_byte_interval(config, lo, hi, [&](unsigned b, unsigned) { return step(config, static_cast<std::uint8_t>(b)) == target; }))
        return kDead;
    }
    return multibyte_step(config) == target ? target : kDead;
  };
  const std::int32_t target = find();
  text_steps_.resize(std::max(text_steps_.size(), n_configs()), kUnknown);  // steps may add configurations
  text_steps_[c] = target;
  return target;
}

const std::array<std::uint64_t, 2>& StackDfa::ascii_loops(std::int32_t config) {
  const auto c = static_cast<std::size_t>(config);
  if (ascii_loops_known_.size() <= c) {
    ascii_loops_known_.resize(n_configs(), 0);
    ascii_loops_.resize(n_configs());
  }
  if (!ascii_loops_known_[c]) {
    std::array<std::uint64_t, 2> loops{};
    each_byte_interval(config, 1, 0x7F, [&](unsigned b, unsigned last) {
      if (may_loop(config, static_cast<std::uint8_t>(b)) && step(config, static_cast<std::uint8_t>(b)) == config)
        for (unsigned x = b; x <= last; ++x) loops[x >> 6] |= std::uint64_t{1} << (x & 63);
      return true;
    });
    // Steps may add configurations.
    ascii_loops_known_.resize(std::max(ascii_loops_known_.size(), n_configs()), 0);
    ascii_loops_.resize(ascii_loops_known_.size());
    ascii_loops_[c] = loops;
    ascii_loops_known_[c] = 1;
  }
  return ascii_loops_[c];
}

bool StackDfa::may_loop(std::int32_t config, std::uint8_t byte) const {
  const std::int32_t known = trans_[static_cast<std::size_t>(config) * 256 + byte];
  if (known != kUnknown) return known == config;
  // A step's seeds whose state reads bytes are kept by its closure as they are: each must be a stack
  // of the configuration (its sorted nodes) for the step to lead back to it.
  const std::vector<std::uint32_t>& stacks = configs_[static_cast<std::size_t>(config)];
  for (const std::uint32_t n : stacks) {
    const std::uint32_t s = nodes_[n].state;
    for (std::uint32_t e = a_.byte_begin[s]; e < a_.byte_begin[s + 1]; ++e) {
      const ByteEdge& be = a_.byte_edges[e];
      if (byte < be.lo || byte > be.hi) continue;
      const std::uint32_t t = canonical(be.target);
      if (!a_.has_bytes(t)) continue;
      const std::int32_t seed = find_node(nodes_[n].parent, t);
      if (seed < 0 || !std::binary_search(stacks.begin(), stacks.end(), static_cast<std::uint32_t>(seed))) return false;
    }
  }
  return true;
}

StackDfa::AsciiRun StackDfa::ascii_run(std::int32_t config) {
  auto known = [&](std::int32_t c) {
    const auto i = static_cast<std::size_t>(c);
    return i < ascii_runs_known_.size() && ascii_runs_known_[i] != 0;
  };
  auto holds = [](const std::array<std::uint64_t, 2>& outer, const std::array<std::uint64_t, 2>& inner) {
    return (inner[0] & ~outer[0]) == 0 && (inner[1] & ~outer[1]) == 0;
  };
  // Follows the configurations that the largest byte group leads to while their runs are unknown
  // (up to kMaxChain of them, stopping at one met before), then fills the runs in from the last: a
  // run goes on into the next configuration's when that one's set holds it.
  std::vector<std::int32_t> chain;
  std::vector<AsciiRun> runs;
  bool no_run_at_end = false;  // the last of the chain has no run (fewer bytes than the minimum)
  std::int32_t c = config;
  while (!known(c) && chain.size() < kMaxChain && std::find(chain.begin(), chain.end(), c) == chain.end()) {
    std::vector<std::pair<std::int32_t, std::array<std::uint64_t, 2>>> targets;
    each_byte_interval(c, 1, 0x7F, [&](unsigned b, unsigned last) {
      const std::int32_t t = step(c, static_cast<std::uint8_t>(b));
      if (t == kDead || t == c) return true;
      auto it = std::find_if(targets.begin(), targets.end(), [&](const auto& x) { return x.first == t; });
      if (it == targets.end()) it = targets.insert(targets.end(), {t, {}});
      for (unsigned x = b; x <= last; ++x) it->second[x >> 6] |= std::uint64_t{1} << (x & 63);
      return true;
    });
    AsciiRun run;
    std::int32_t next = kDead;
    int best = 0;
    for (const auto& [t, bytes] : targets) {
      const int n = std::popcount(bytes[0]) + std::popcount(bytes[1]);
      if (n > best) {
        best = n;
        next = t;
        run.bytes = bytes;
      }
    }
    chain.push_back(c);
    if (best < kMinAsciiRunBytes) {
      runs.push_back(AsciiRun{});  // length 0, and no set for the one before to continue in
      no_run_at_end = true;
      break;
    }
    runs.push_back(run);
    c = next;
  }
  // The run after the last of the chain: known, or cut short (the bound, a cycle, no run: length 0).
  // Cut by the bound, the chain's last runs come out shorter than they are (the last one 1): those are
  // not kept but found again when asked for (their steps are known by then), so that a table starting
  // part-way along a long run accepts its tokens at once too. A run is exact once it reaches
  // kMaxAsciiRun or stops short of the chain's end; then so are those before it.
  const bool bounded = !known(c) && !no_run_at_end && chain.size() == kMaxChain &&
                       std::find(chain.begin(), chain.end(), c) == chain.end();
  const std::size_t n = runs.size();
  std::size_t n_exact = bounded ? 0 : n;  // chain[0, n_exact) are kept
  AsciiRun after = known(c) && !no_run_at_end ? ascii_runs_[static_cast<std::size_t>(c)] : AsciiRun{};
  for (std::size_t i = n; i-- > 0;) {
    if (i + 1 == n && no_run_at_end) continue;
    const bool goes_on = holds(after.bytes, runs[i].bytes);
    runs[i].length = 1 + (goes_on ? std::min(after.length, kMaxAsciiRun - 1) : 0);
    if (n_exact == 0 && (!goes_on || runs[i].length == kMaxAsciiRun)) n_exact = i + 1;
    after = runs[i];
  }
  // Steps may add configurations.
  ascii_runs_known_.resize(std::max(ascii_runs_known_.size(), n_configs()), 0);
  ascii_runs_.resize(ascii_runs_known_.size());
  // (The first is kept whatever: a run found shorter than it is only walks more tokens.)
  for (std::size_t i = 0; i < std::min(n, std::max<std::size_t>(n_exact, 1)); ++i) {
    ascii_runs_[static_cast<std::size_t>(chain[i])] = runs[i];
    ascii_runs_known_[static_cast<std::size_t>(chain[i])] = 1;
  }
  return ascii_runs_[static_cast<std::size_t>(config)];
}

std::uint32_t StackDfa::follow_set_id(std::uint32_t rule) {
  if (follow_set_ids_.empty()) {
    std::map<ByteSet, std::uint32_t> ids;
    follow_set_ids_.reserve(a_.rule_follow.size());
    for (const ByteSet& f : a_.rule_follow)
      follow_set_ids_.push_back(ids.emplace(f, static_cast<std::uint32_t>(ids.size())).first->second);
  }
  return follow_set_ids_[rule];
}

void StackDfa::clear() {
  configs_.clear();
  nodes_.clear();
  node_slots_.assign(kMinNodeSlots, -1);
  std::fill(closure_mark_.begin(), closure_mark_.end(), 0u);
  closure_epoch_ = 0;
  outer_final_.clear();
  trans_.clear();
  config_index_.clear();
  seed_index_.clear();
  seed_words_.clear();
  seed_begin_.assign(1, 0);
  seed_config_.clear();
  text_steps_.clear();
  multibyte_steps_.clear();
  ascii_self_loop_.clear();
  ascii_loops_.clear();
  ascii_loops_known_.clear();
  ascii_runs_.clear();
  ascii_runs_known_.clear();
  groups_.clear();
  group_bytes_ = 0;
  group_records_ = group_hits_ = 0;
}

}  // namespace pse::detail
