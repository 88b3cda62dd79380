// A lazily built deterministic automaton over sets of explicit call stacks, for the detached walks
// of the token tables (a state's walk over the sorted vocabulary, the follow check, the chain
// tables). A configuration is the set of stacks (return states..., current state) reachable after
// the bytes read so far from the start states, closed under epsilon moves, calls (push) and rule
// ends (pop); it is the same parse information as the Earley sets of a detached chart, but a
// configuration is a value, so it is interned and each (configuration, byte) step is computed once
// and then looked up. A vocabulary walk meets few distinct configurations, so the walk costs about
// one table lookup per byte instead of an Earley step. Stacks are bounded: left recursion, deep
// nesting or too many configurations throw Overflow, and the caller walks with the Earley chart
// instead (same results, slower).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "automaton.h"
#include "flat_index.h"
#include "pse/vocabulary.h"
#include "vocabulary_index.h"

namespace pse::detail {

class StackDfa {
 public:
  struct Overflow {};
  static constexpr std::size_t kMaxDepth = 1024;  // stack height (tokens like "((((((" nest deep)
  static constexpr std::size_t kMaxElements = 2048;  // stacks in one configuration
  static constexpr std::size_t kMaxConfigs = 8192;   // configurations per automaton instance
  static constexpr std::int32_t kDead = -1;

  explicit StackDfa(const Automaton& automaton, std::size_t max_configs = kMaxConfigs)
      : a_(automaton), max_configs_(max_configs) {}

  // The configuration of the start states, each the bottom of its own stack (an outer rule).
  std::int32_t start(std::span<const std::uint32_t> states);
  // The configuration after reading `byte`, or kDead.
  std::int32_t step(std::int32_t config, std::uint8_t byte) {
    const std::size_t i = static_cast<std::size_t>(config) * 256 + byte;
    std::int32_t t = trans_[i];
    if (t == kUnknown) {
      t = compute_step(config, byte);
      trans_[i] = t;  // compute_step may grow trans_: index again
      if (t == config && byte < 0x80) note_ascii_self_loop(config);
    }
    return t;
  }
  // Some step computed so far leads from the configuration back to itself on an ASCII byte: a cheap
  // first test for the loops that ascii_loops and loops_on look for (they compute every step).
  bool has_ascii_self_loop(std::int32_t config) const {
    const auto c = static_cast<std::size_t>(config);
    return c < ascii_self_loop_.size() && ascii_self_loop_[c] != 0;
  }
  // Some outer rule (a stack of height one) is complete: the detached chart's (final, origin 0).
  bool outer_final(std::int32_t config) const {
    return outer_final_[static_cast<std::size_t>(config)] != 0;
  }
  // The bytes some stack of the configuration can read next.
  ByteSet first_bytes(std::int32_t config) const;
  // Every token of the class (VocabularyIndex::TokenClass) is read from the configuration, whole characters
  // leading back to it, so a walk from here reads such a token whole: kPlain, every plain byte loops;
  // kText, also every well-formed multi-byte character (and so every first part of one). Memoized.
  bool loops_on(std::int32_t config, VocabularyIndex::TokenClass c);
  // The configuration that every JSON text character (a plain byte, or a well-formed multi-byte
  // character) leads to from `config`, when it is the same for all of them; else kDead. A bounded run
  // of string characters steps this way: a token of n text characters read from here ends n such steps
  // later. Memoized.
  std::int32_t text_step(std::int32_t config);
  // The configuration that every well-formed multi-byte UTF-8 character leads to from `config`, when it
  // is the same for all of them; else kDead. Memoized.
  std::int32_t multibyte_step(std::int32_t config);
  // The ASCII bytes other than NUL that lead from `config` back to itself (bit b of word b / 64): a
  // token whose bytes are all among them is read whole from here. Memoized.
  const std::array<std::uint64_t, 2>& ascii_loops(std::int32_t config);
  // A bounded run over a set of ASCII bytes (a counted repetition of a character class, such as
  // [a-z0-9_]{1,64}): every byte of `bytes` leads from `config` to one configuration, and from there
  // every one of them again to one configuration, `length` times in a row (at most kMaxAsciiRun). A
  // token of at most `length` bytes, all in the set, is read whole from `config`. The set is the
  // largest group of ASCII bytes (NUL excluded) stepping alike from `config`; length 0 when it has
  // fewer than kMinAsciiRunBytes bytes or leads back to `config` (a loop: ascii_loops). Memoized.
  struct AsciiRun {
    std::array<std::uint64_t, 2> bytes{};
    std::uint32_t length = 0;
  };
  static constexpr std::uint32_t kMaxAsciiRun = 32;
  static constexpr std::size_t kMaxChain = 2 * kMaxAsciiRun;  // configurations ascii_run follows at once
  static constexpr int kMinAsciiRunBytes = 16;
  AsciiRun ascii_run(std::int32_t config);
  // How many text characters in a row, up to `limit`, step this way from `config`.
  std::size_t text_run(std::int32_t config, std::size_t limit) {
    std::size_t n = 0;
    for (; n < limit && (config = text_step(config)) != kDead; ++n) {
    }
    return n;
  }
  std::size_t n_configs() const { return outer_final_.size(); }
  // Near its bound on configurations: a new walk would likely overflow.
  bool saturated() const { return n_configs() >= max_configs_ - max_configs_ / 8; }
  // What a token-table walk found for the tokens of one first byte read from a configuration (the
  // configuration after that byte decides it): the accepted tokens and the uncertain positions with their
  // end depths (uncertain_ends[k] of them per position, in order). Tables of different states that
  // reach the same configuration after a first byte reuse it instead of walking the group again.
  struct GroupResult {
    std::int8_t whole = -1;  // a VocabularyIndex::TokenClass whose members in the group are accepted too, or -1
    std::vector<std::uint64_t> accepted;  // bit i: the group's i-th token (by position) is accepted
    std::size_t n_accepted = 0;           // its bits set
    std::vector<std::uint32_t> uncertain, uncertain_ends, end_depths;
    std::size_t bytes() const {
      return accepted.size() * 8 + (uncertain.size() + uncertain_ends.size() + end_depths.size()) * 4 + sizeof(GroupResult);
    }
  };
  // after: the configuration after `byte`. filter: what else the results depend on (the table's rule,
  // or its follow bytes: a configuration whose stacks have all ended is the same for every rule).
  // nullptr when absent.
  const GroupResult* find_group(std::int32_t after, std::uint8_t byte, std::uint32_t filter) {
    auto it = groups_.find(GroupKey{after, byte, filter});
    if (it == groups_.end()) return nullptr;
    ++group_hits_;
    return &it->second;
  }
  void add_group(std::int32_t after, std::uint8_t byte, std::uint32_t filter, GroupResult result) {
    if (group_bytes_ + result.bytes() > max_group_bytes_) return;
    group_bytes_ += result.bytes();
    ++group_records_;
    groups_.emplace(GroupKey{after, byte, filter}, std::move(result));
  }
  // Whether a walk should record its group results: always, unless set_selective_records(true); then
  // from kMinGroupRecords results on, only while at least one in kGroupHitRatio of them was found again.
  // compile() sets it while it builds every table, in state order: the positions of a bounded run each
  // reach their own configurations (the regex grammar of scripts/bench-grammar.sh recorded 4,317 results
  // and found 17 of them again; recording cost a fifth of its compile; c.gbnf found 767 of its 877). Tables
  // built at first use come in the order the masks need them and meet recurring configurations: there the
  // rule cost MaskBench's sample 5% more mask instructions.
  static constexpr std::size_t kMinGroupRecords = 64, kGroupHitRatio = 8;
  bool keeps_groups() const {
    return !selective_records_ || group_records_ < kMinGroupRecords ||
           group_hits_ * kGroupHitRatio >= group_records_;
  }
  void set_selective_records(bool on) { selective_records_ = on; }
  // The same number for rules with the same follow bytes (Automaton::rule_follow), counted from 0.
  std::uint32_t follow_set_id(std::uint32_t rule);

  // Forgets the group results and bounds their memory from now on (compile() keeps up to 64 MiB while it
  // builds every table; a compiled grammar keeps a few MiB for the tables it builds later).
  void reset_groups(std::size_t max_bytes) {
    groups_.clear();
    group_bytes_ = 0;
    group_records_ = group_hits_ = 0;
    max_group_bytes_ = max_bytes;
  }

  // States known to read the same byte strings the same way for every walk this automaton serves
  // (future_classes with a horizon of the longest token): each configuration is closed from stacks whose
  // states are replaced by their class representatives, canonical[state] (and so are the return states
  // its calls push), so that walks from equivalent states meet the same configurations (and share their
  // steps and group results). nullptr: as they are.
  // Set before the first configuration is built.
  void set_canonical_states(const std::vector<std::uint32_t>* canonical) { canonical_ = canonical; }

  // Forgets every configuration (keeping the allocations), so that walks start afresh; configuration
  // ids from before are invalid. set_max_configs changes the bound for later configurations.
  void clear();
  void set_max_configs(std::size_t n) { max_configs_ = n; }
  std::size_t memory_bytes() const;

 private:
  static constexpr std::int32_t kUnknown = -2;

  std::int32_t compute_step(std::int32_t config, std::uint8_t byte);
  // False when reading `byte` cannot lead from the configuration back to itself (checked without the
  // step's closure: ascii_loops asks it for bytes the walks may never read there).
  bool may_loop(std::int32_t config, std::uint8_t byte) const;
  // Closes seeds_ (stack nodes) and interns the result (only stacks whose state reads bytes are kept,
  // plus whether an outer rule is complete).
  std::int32_t close_and_intern();
  std::int32_t close_seeds();  // close_and_intern's closure, for seeds not met before

  // A stack is an interned node: its top state over the node of the stack below it (kNoNode at the
  // bottom), so that stacks share what lies below them, a move makes one node whatever the height, and
  // a set of stacks is a set of node ids. Every state below a top is a class representative (seeds and
  // pushed return states are written with them).
  static constexpr std::uint32_t kNoNode = ~0u;
  static constexpr std::size_t kMinNodeSlots = 1024;
  struct Node {
    std::uint32_t parent, state, height;
  };
  std::vector<Node> nodes_;
  // open addressing over (parent, state), at most half full
  std::vector<std::int32_t> node_slots_ = std::vector<std::int32_t>(kMinNodeSlots, -1);
  std::uint32_t node(std::uint32_t parent, std::uint32_t state);  // interned; Overflow past kMaxDepth
  std::int32_t find_node(std::uint32_t parent, std::uint32_t state) const;  // -1 when absent
  std::uint32_t canonical(std::uint32_t s) const { return canonical_ != nullptr ? (*canonical_)[s] : s; }

  // Scratch of close_and_intern, kept between calls so that a step allocates nothing: the seeds, the
  // nodes met in this closure (closure_mark_ == closure_epoch_), the work list, the kept ones.
  std::vector<std::uint32_t> seeds_, key_, work_;
  std::vector<std::uint32_t> closure_mark_;
  std::uint32_t closure_epoch_ = 0;

  const Automaton& a_;
  std::size_t max_configs_;
  // Configuration c: its stacks' nodes, ascending.
  std::vector<std::vector<std::uint32_t>> configs_;
  std::vector<std::uint8_t> outer_final_;
  std::vector<std::int32_t> trans_;  // [n_configs * 256]
  std::vector<std::int32_t> text_steps_;  // per configuration: text_step, or kUnknown
  std::vector<std::int32_t> multibyte_steps_;  // per configuration: multibyte_step, or kUnknown
  std::vector<std::uint8_t> ascii_self_loop_;  // per configuration: has_ascii_self_loop
  void note_ascii_self_loop(std::int32_t config) {
    const auto c = static_cast<std::size_t>(config);
    if (ascii_self_loop_.size() <= c) ascii_self_loop_.resize(n_configs(), 0);
    ascii_self_loop_[c] = 1;
  }
  std::vector<std::array<std::uint64_t, 2>> ascii_loops_;  // per configuration: ascii_loops
  std::vector<std::uint8_t> ascii_loops_known_;
  std::vector<AsciiRun> ascii_runs_;  // per configuration: ascii_run
  std::vector<std::uint8_t> ascii_runs_known_;
  // Calls fn(b, last) for each interval [b, last] of [lo, hi] between the bounds of the byte edges of
  // the configuration's states (the bytes of an interval step alike), until fn returns false; returns
  // whether it never did.
  template <class Fn>
  bool each_byte_interval(std::int32_t config, unsigned lo, unsigned hi, Fn fn);
  const std::vector<std::uint32_t>* canonical_ = nullptr;
  struct GroupKey {
    std::int32_t after;
    std::uint8_t byte;
    std::uint32_t filter;
    bool operator==(const GroupKey&) const = default;
  };
  struct GroupKeyHash {
    std::size_t operator()(const GroupKey& k) const {
      return static_cast<std::size_t>((static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.after)) << 8 | k.byte) *
                                          0x9e3779b97f4a7c15ULL ^ k.filter);
    }
  };
  std::unordered_map<GroupKey, GroupResult, GroupKeyHash> groups_;
  std::vector<std::uint32_t> follow_set_ids_;  // [n_rules], filled on first use
  std::size_t group_bytes_ = 0;
  std::size_t group_records_ = 0, group_hits_ = 0;  // since the last reset_groups (or clear)
  bool selective_records_ = false;
  std::size_t max_group_bytes_ = std::size_t{64} << 20;
  // The configurations by their key (the outer-completion flag, then the nodes): entry c is configs_[c].
  FlatIndex config_index_;
  // The seed sets met so far (close_and_intern), back to back in seed_words_ (entry e: [seed_begin_[e],
  // seed_begin_[e + 1])), and the configuration each closed to.
  FlatIndex seed_index_;
  std::vector<std::uint32_t> seed_words_, seed_begin_ = std::vector<std::uint32_t>(1, 0);
  std::vector<std::int32_t> seed_config_;
};

// The walking interface of Chart (detached use only) over a StackDfa: one configuration per byte
// read.
class DfaCursor {
 public:
  explicit DfaCursor(StackDfa* dfa) : dfa_(dfa) {}
  void reset_detached(std::span<const std::uint32_t> starts) {
    path_.assign(1, dfa_->start(starts));
  }
  std::size_t n_sets() const {
    return path_.size() + 1;
  }  // as Chart: set 0 is the empty detached set
  void truncate(std::size_t n_sets) { path_.resize(n_sets - 1); }
  bool push(std::uint8_t byte) {
    const std::int32_t next = dfa_->step(path_.back(), byte);
    if (next == StackDfa::kDead) return false;
    path_.push_back(next);
    return true;
  }
  // In a detached walk only the start's own rule sits at the bottom of a stack: its completion is
  // the outer completion.
  bool last_has_final(std::uint32_t /*rule*/, std::uint32_t /*origin*/) const {
    return dfa_->outer_final(path_.back());
  }
  bool last_has_any_final_at_origin0() const { return dfa_->outer_final(path_.back()); }
  ByteSet first_bytes() const { return dfa_->first_bytes(path_.back()); }
  bool last_loops_on(VocabularyIndex::TokenClass c) { return dfa_->loops_on(path_.back(), c); }
  std::int32_t last_config() const { return path_.back(); }
  StackDfa* dfa() const { return dfa_; }

 private:
  StackDfa* dfa_;
  std::vector<std::int32_t> path_;
};

}  // namespace pse::detail
