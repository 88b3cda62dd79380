#include "token_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "bit_ranges.h"
#include "earley.h"
#include "pse/error.h"
#include "stack_dfa.h"
#include "vocabulary_index.h"

namespace pse::detail {

namespace {

// The set bits of a word, inline (std::popcount is a library call on baseline x86-64, where builds stay
// portable; the counts below run over 4,000-word bitsets per table).
inline std::size_t count_bits(std::uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  return static_cast<std::size_t>((((x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full) * 0x0101010101010101ull) >> 56);
}
// The bytes of a set of ASCII bytes (bit b of word b / 64) (asked at every byte a walk pushes into a
// configuration that loops).
inline std::size_t count_bytes(const std::array<std::uint64_t, 2>& set) {
  return count_bits(set[0]) + count_bits(set[1]);
}

// A table's accepted ids (in any order, duplicates allowed) as a bitset over the mask words when there
// are more distinct ids than words, else as an ascending list (many ids: marked in a scratch bitset and
// read back in order, cheaper than sorting them).
void set_accepted(std::vector<TokenId>& ids, std::size_t n_mask_words, std::vector<std::uint32_t>& bits,
                  std::vector<TokenId>& list) {
  if (ids.size() < 256 && ids.size() <= n_mask_words) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    list = std::move(ids);
    list.shrink_to_fit();
    return;
  }
  thread_local std::vector<std::uint32_t> scratch;  // all zero between calls
  if (scratch.size() < n_mask_words) scratch.resize(n_mask_words, 0);
  std::size_t lo = n_mask_words, hi = 0;
  for (const TokenId id : ids) {
    const std::size_t w = static_cast<std::uint32_t>(id) >> 5;
    scratch[w] |= 1u << (id & 31);
    lo = std::min(lo, w);
    hi = std::max(hi, w);
  }
  // (Counted only when there may be more distinct ids than words: duplicates only lower the count.)
  std::size_t n = ids.size();
  if (n > n_mask_words) {
    n = 0;
    for (std::size_t w = lo; w <= hi && w < n_mask_words; ++w) n += count_bits(scratch[w]);
  }
  bits.clear();
  list.clear();
  if (n > n_mask_words) {
    bits.assign(n_mask_words, 0);
    std::copy(scratch.begin() + static_cast<std::ptrdiff_t>(lo), scratch.begin() + static_cast<std::ptrdiff_t>(hi) + 1,
              bits.begin() + static_cast<std::ptrdiff_t>(lo));
  } else {
    list.reserve(n);
    for (std::size_t w = lo; w <= hi && w < n_mask_words; ++w)
      for (std::uint32_t x = scratch[w]; x != 0; x &= x - 1)
        list.push_back(static_cast<TokenId>(w * 32 + static_cast<std::size_t>(__builtin_ctz(x))));
  }
  for (std::size_t w = lo; w <= hi && w < n_mask_words; ++w) scratch[w] = 0;
}

// A token table's accepted ids while it is built: a list while short (most tables accept few tokens:
// no bitset to clear and scan for them), then marked in a per-thread bitset over the mask words (a
// table inside a string accepts most of the vocabulary: one bit set per token, no list to grow).
// finish() gives the table's bitset when there are more ids than mask words, else an ascending list.
class AcceptedIds {
 public:
  explicit AcceptedIds(std::size_t n_mask_words) : n_words_(n_mask_words) {}
  AcceptedIds(const AcceptedIds&) = delete;
  AcceptedIds& operator=(const AcceptedIds&) = delete;
  ~AcceptedIds() { release(); }  // also when a deadline throws part-way

  void add(TokenId id) {
    if (bits_ != nullptr) {
      bits_[static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
    } else {
      ids_.push_back(id);
      if (ids_.size() > kMaxList) to_bits();
    }
  }
  void add(std::span<const TokenId> ids) {
    if (bits_ == nullptr && ids_.size() + ids.size() > kMaxList) to_bits();
    if (bits_ == nullptr) {
      ids_.insert(ids_.end(), ids.begin(), ids.end());
    } else {
      for (const TokenId id : ids) bits_[static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
    }
  }
  // The ids at the set bits of a group's bitset over consecutive sorted positions (`ids[i]` for bit i),
  // clearing the words as it goes; add_group leaves them (a group result kept for other tables).
  void add_and_clear_group(std::uint64_t* words, std::size_t n_words, const TokenId* ids) {
    add_words<true>(words, n_words, ids);
  }
  void add_group(const std::uint64_t* words, std::size_t n_words, const TokenId* ids) {
    add_words<false>(words, n_words, ids);
  }
  // The same for the whole first-byte group b (its n positions from `begin`, their ids from `ids`): when
  // most are accepted, the group's ids less the rejected ones are or-ed in, as its mask
  // (Vocabulary::first_byte_mask) or its sparse words (Vocabulary::group_words), whichever costs less.
  // Returns false (and does nothing) when setting the accepted ids one by one costs less. `accepted`: the
  // bits set in words, when known.
  template <class Word>
  bool add_mostly_accepted_group(Word* words, std::size_t n, const TokenId* ids, const Vocabulary& vocab,
                                 std::uint8_t b, std::uint32_t begin, std::size_t accepted = kUncounted) {
    const VocabularyIndex& ix = vocab.index();
    const std::vector<std::uint32_t>& mask = ix.first_byte_mask(b);
    const std::span<const std::uint32_t> group_words = ix.group_words(b);
    if (mask.empty() && group_words.empty()) return false;
    const std::size_t n_group_words = (n + 63) / 64;
    if (accepted == kUncounted) {
      accepted = 0;
      for (std::size_t w = 0; w < n_group_words; ++w) accepted += count_bits(words[w]);
    }
    // (While the ids fit the list, they stay there: no bitset to clear and scan for them.)
    if (bits_ == nullptr && ids_.size() + accepted <= kMaxList) return false;
    // Costs in word operations: an id set or cleared costs about two, a word of the mask or of the
    // sparse words copied and or-ed in about one (the mask's in vector loops).
    const std::size_t one_by_one = 2 * accepted, rejected_ids = 2 * (n - accepted);
    const bool dense = !mask.empty() && n_words_ + rejected_ids < std::min(one_by_one, 2 * group_words.size());
    if (!dense && (group_words.empty() || 2 * group_words.size() + rejected_ids >= one_by_one)) return false;
    to_bits();
    thread_local std::vector<std::uint32_t> kept;
    const std::uint32_t* const word_of = ix.word_of_position() + begin;
    if (dense) {
      kept.assign(mask.begin(), mask.end());
    } else {
      kept.assign(ix.group_word_bits(b).begin(), ix.group_word_bits(b).end());
    }
    for (std::size_t w = 0; w < n_group_words; ++w) {
      std::uint64_t rejected = ~static_cast<std::uint64_t>(words[w]);
      if (w + 1 == n_group_words && n % 64 != 0) rejected &= (std::uint64_t{1} << (n % 64)) - 1;
      for (; rejected != 0; rejected &= rejected - 1) {
        const std::size_t q = w * 64 + static_cast<std::size_t>(std::countr_zero(rejected));
        const TokenId id = ids[q];
        kept[dense ? static_cast<std::uint32_t>(id) >> 5 : word_of[q]] &= ~(1u << (id & 31));
      }
    }
    if (dense) {
      for (std::size_t w = 0; w < n_words_; ++w) bits_[w] |= kept[w];
    } else {
      const std::uint32_t* const gw = group_words.data();
      const std::uint32_t* const kb = kept.data();
      const std::size_t m = group_words.size();
      std::size_t k = 0;
      for (; k + 2 <= m; k += 2) {  // (two a round: the loop's own steps are half its cost)
        bits_[gw[k]] |= kb[k];
        bits_[gw[k + 1]] |= kb[k + 1];
      }
      if (k < m) bits_[gw[k]] |= kb[k];
    }
    return true;
  }
  static constexpr std::size_t kUncounted = ~std::size_t{0};
  void add_mask(std::span<const std::uint32_t> mask) {
    to_bits();
    for (std::size_t w = 0; w < n_words_; ++w) bits_[w] |= mask[w];
  }
  void finish(std::vector<std::uint32_t>& bits, std::vector<TokenId>& list) {
    if (bits_ == nullptr) {
      set_accepted(ids_, n_words_, bits, list);
      return;
    }
    // A bitset when there are more ids than words: counted until past that (a class of tokens or-ed in
    // is past it within its first words), not over the whole bitset.
    std::size_t n = 0;
    std::size_t w = 0;
    for (; w + 1 < n_words_ && n <= n_words_; w += 2) {  // two words per count
      std::uint64_t x;
      std::memcpy(&x, bits_ + w, sizeof x);
      n += count_bits(x);
    }
    if (w < n_words_ && n <= n_words_) n += count_bits(bits_[w]);
    if (n > n_words_) {
      bits.assign(bits_, bits_ + n_words_);
    } else {
      list.clear();
      list.reserve(n);
      for (std::size_t w = 0; w < n_words_; ++w)
        for (std::uint32_t x = bits_[w]; x != 0; x &= x - 1)
          list.push_back(static_cast<TokenId>(w * 32 + static_cast<std::size_t>(std::countr_zero(x))));
    }
    release();
  }

 private:
  static constexpr std::size_t kMaxList = 1024;
  template <bool kClear, class Word>
  void add_words(Word* words, std::size_t n_words, const TokenId* ids) {
    for (std::size_t w = 0; w < n_words; ++w) {
      std::uint64_t x = words[w];
      if (x == 0) continue;
      if constexpr (kClear) words[w] = 0;
      if (bits_ == nullptr && ids_.size() + 64 > kMaxList) to_bits();
      const TokenId* const base = ids + w * 64;
      if (bits_ != nullptr) {
        for (; x != 0; x &= x - 1) {
          const TokenId id = base[std::countr_zero(x)];
          bits_[static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
        }
      } else {
        for (; x != 0; x &= x - 1) ids_.push_back(base[std::countr_zero(x)]);
      }
    }
  }
  void to_bits() {
    if (bits_ != nullptr) return;
    thread_local std::vector<std::uint32_t> scratch;  // all zero while not in use
    thread_local bool in_use = false;
    if (!in_use) {
      if (scratch.size() < n_words_) scratch.resize(n_words_, 0);
      in_use = true;
      in_use_ = &in_use;
      bits_ = scratch.data();
    } else {  // a table built while another is (not done today): a bitset of its own
      own_.assign(n_words_, 0);
      bits_ = own_.data();
    }
    for (const TokenId id : ids_) bits_[static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
    ids_.clear();
  }
  void release() {
    if (in_use_ != nullptr) {
      std::fill(bits_, bits_ + n_words_, 0u);
      *in_use_ = false;
      in_use_ = nullptr;
    }
    bits_ = nullptr;
  }
  std::size_t n_words_;
  std::vector<TokenId> ids_;
  std::uint32_t* bits_ = nullptr;
  bool* in_use_ = nullptr;
  std::vector<std::uint32_t> own_;
};

ByteSet first_bytes(const Automaton& a, const Chart& chart) {
  ByteSet first{};
  for (const Item& it : chart.last()) {
    for (std::uint32_t e = a.byte_begin[it.state]; e < a.byte_begin[it.state + 1]; ++e) {
      for (unsigned b = a.byte_edges[e].lo; b <= a.byte_edges[e].hi; ++b) first[b >> 6] |= 1ULL << (b & 63);
    }
  }
  return first;
}

ByteSet first_bytes(const Automaton& /*a*/, const DfaCursor& cursor) { return cursor.first_bytes(); }

// The follow contexts a table's FollowCheck checks: the rule's with the full filter, none (the check
// skipped) with the bytes filter.
std::span<const std::uint32_t> checked_contexts(const Automaton& a, std::uint32_t rule, FollowFilter filter) {
  if (filter != FollowFilter::kFull) return {};
  return a.rule_contexts[rule];
}

// A configuration looping on fewer ASCII bytes is not worth reading tokens whole from.
constexpr int kMinLoopBytes = 16;

// The walks below run on either cursor: a DfaCursor (memoized steps) or, when the stack automaton
// overflows its bounds, the Earley Chart. Both answer the same questions identically.
// Whether the rests of tokens after the current rule's end can continue in some caller context (a
// superset of the real ones: the rule's follow contexts, transitively). A final item of an outer rule
// reached part-way leaves the answer to the run-time check (true). One walk per end depth j: the rests
// at the same depth of consecutive (sorted) tokens share prefixes, so each walk resumes from the common
// prefix with the previous rest and, when the previous walk stopped inside it, reuses its answer.
template <class Cursor>
class FollowCheck {
 public:
  template <class MakeCursor>
  FollowCheck(std::span<const std::uint32_t> contexts, MakeCursor make) : contexts_(contexts) {
    if (contexts_.empty()) return;
    for (std::size_t j = 0; j < walks_.size(); ++j) walks_[j].cursor = make();
  }

  bool viable(std::string_view suffix, std::size_t j) {
    if (contexts_.empty()) return true;
    Walk& w = walks_[std::min(j, walks_.size() - 1)];
    if (!w.started) {
      w.cursor.reset_detached(contexts_);
      w.started = true;
    }
    std::size_t l = 0;
    if (w.have_prev) {
      const std::size_t n = std::min(w.prev.size(), suffix.size());
      while (l < n && w.prev[l] == suffix[l]) ++l;
      // The previous walk decided within the common prefix: same sets up to there, same answer.
      if (w.prev_viable ? w.prev_stop <= l && w.prev_stop < w.prev.size() : w.prev_stop < l) {
        w.prev = suffix;
        return w.prev_viable;
      }
    }
    const std::size_t depth = std::min(l, w.cursor.n_sets() - 2);
    w.cursor.truncate(depth + 2);
    bool ok = true;
    std::size_t i = depth;
    for (; i < suffix.size(); ++i) {
      if (i > 0 && w.cursor.last_has_any_final_at_origin0()) break;
      if (!w.cursor.push(static_cast<std::uint8_t>(suffix[i]))) {
        ok = false;
        break;
      }
    }
    w.have_prev = true;
    w.prev = suffix;
    w.prev_stop = i;
    w.prev_viable = ok;
    return ok;
  }

 private:
  struct Walk {
    Cursor cursor{nullptr};
    bool started = false, have_prev = false, prev_viable = true;
    std::string_view prev;
    std::size_t prev_stop = 0;
  };
  std::span<const std::uint32_t> contexts_;
  std::array<Walk, 8> walks_;
};

// Whether every caller context reads the rest of a token (after the rule's end) inside its own rule, each
// walked alone: the real caller is one of them, so the token is then accepted whatever the stack holds
// above it, instead of being left uncertain (after `int ` in c.gbnf, the 44,000 tokens like " foo" whose
// rest is an identifier in every caller of `dataType`). Off (false) for no contexts, too many, or the root
// (nothing calls its outermost instance). One walk per context, each resuming from the common prefix with
// the rest it walked before.
template <class Cursor>
class EveryContextReads {
 public:
  static constexpr std::size_t kMaxContexts = 16;

  template <class MakeCursor>
  EveryContextReads(const Vocabulary& vocab, std::span<const std::uint32_t> contexts, bool enabled, MakeCursor make)
      : vocab_(vocab), ix_(vocab.index()) {
    if (!enabled || contexts.empty() || contexts.size() > kMaxContexts) return;
    walks_.resize(contexts.size());
    for (std::size_t i = 0; i < contexts.size(); ++i) {
      walks_[i].cursor = make();
      walks_[i].context = contexts[i];
    }
  }

  // When every context's walk reached a loop on one set whose index is built: the index, and in `depth` the
  // deepest of those loops' depths. A rest that shares that many bytes with the last one all() accepted,
  // and whose other bytes are in the set, is read by every context (that rest shared each walk's loop
  // depth with the rest the walk last stepped through), so a run of such tokens is accepted a word at a
  // time. Else nullptr.
  const VocabularyIndex::AsciiSetIndex* common_loop(std::size_t& depth) const {
    if (walks_.empty() || walks_[0].loop_set == nullptr) return nullptr;
    const VocabularyIndex::AsciiSetIndex* const set = walks_[0].loop_set.get();
    depth = 0;
    for (const Walk& w : walks_) {
      if (w.loop_set.get() != set || w.loop_depth == SIZE_MAX) return nullptr;
      depth = std::max(depth, w.loop_depth);
    }
    return set;
  }

  // The rest of the token at sorted position p after its first `offset` bytes.
  bool all(std::uint32_t p, std::size_t offset) {
    const std::string_view tok = ix_.sorted_token(p);
    if (walks_.empty() || offset >= tok.size()) return false;
    for (Walk& w : walks_) {
      if (!w.reads(vocab_, p, offset, tok.substr(offset))) return false;
    }
    return true;
  }

 private:
  struct Walk {
    Cursor cursor{nullptr};
    std::uint32_t context = 0;
    bool started = false, have_prev = false;
    std::string_view prev;
    std::size_t prev_dead = SIZE_MAX;  // where the previous rest died; SIZE_MAX: read whole
    // The depth of prev's path at which it reached a configuration looping on a set of ASCII bytes
    // (an identifier's characters), if it did: a rest sharing that many bytes whose other bytes are in
    // the set is read whole without stepping through them.
    std::size_t loop_depth = SIZE_MAX;
    std::array<std::uint64_t, 2> loop_bytes{};
    // loop_bytes' index, once the vocabulary has built it: one lookup per rest instead of its bytes.
    std::shared_ptr<const VocabularyIndex::AsciiSetIndex> loop_set;

    // Whether the rest from `from` on (token p's bytes from offset + from) is made of the loop's set.
    bool in_loop_set(std::uint32_t p, std::size_t offset, std::string_view rest, std::size_t from) const {
      if (loop_set != nullptr && loop_set->member_from[p] < 255) return loop_set->member_from[p] <= offset + from;
      for (std::size_t i = from; i < rest.size(); ++i) {
        const auto c = static_cast<unsigned char>(rest[i]);
        if (c >= 0x80 || ((loop_bytes[c >> 6] >> (c & 63)) & 1) == 0) return false;
      }
      return true;
    }
    void note_loop(const Vocabulary& vocab, std::size_t d) {
      if constexpr (std::is_same_v<Cursor, DfaCursor>) {
        const VocabularyIndex& ix = vocab.index();
        const std::int32_t c = cursor.last_config();
        if (!cursor.dfa()->has_ascii_self_loop(c)) return;
        const std::array<std::uint64_t, 2>& bytes = cursor.dfa()->ascii_loops(c);
        if (count_bytes(bytes) < kMinLoopBytes) return;
        loop_depth = d;
        // (Only an index built already: the rests checked here are few next to the walks that build it.)
        if (loop_set == nullptr || bytes != loop_bytes) loop_set = ix.ascii_set_index(bytes, false);
        loop_bytes = bytes;
      }
    }

    bool reads(const Vocabulary& vocab, std::uint32_t p, std::size_t offset, std::string_view rest) {
      if (!started) {
        cursor.reset_detached({&context, 1});
        started = true;
      }
      std::size_t l = 0;
      if (have_prev) {
        const std::size_t n = std::min(prev.size(), rest.size());
        while (l < n && prev[l] == rest[l]) ++l;
        if (prev_dead != SIZE_MAX && prev_dead < l) {  // dies inside the common prefix too
          prev = rest;
          return false;
        }
        // (prev stays the rest the cursor walked: the next rest resumes from its path.)
        if (loop_depth <= l && in_loop_set(p, offset, rest, loop_depth)) return true;
      }
      const std::size_t depth = std::min(l, cursor.n_sets() - 2);
      cursor.truncate(depth + 2);
      if (loop_depth > depth) loop_depth = SIZE_MAX;
      std::size_t dead = SIZE_MAX;
      for (std::size_t i = depth; i < rest.size(); ++i) {
        if (loop_depth <= i && in_loop_set(p, offset, rest, i)) break;  // the rest loops in the set: read whole
        if (!cursor.push(static_cast<std::uint8_t>(rest[i]))) {
          dead = i;
          break;
        }
        if (loop_depth == SIZE_MAX) note_loop(vocab, i + 1);
      }
      have_prev = true;
      prev = rest;
      prev_dead = dead;
      return dead == SIZE_MAX;
    }
  };
  const Vocabulary& vocab_;
  const VocabularyIndex& ix_;
  std::vector<Walk> walks_;
};

// The walks below run on either cursor: a DfaCursor (memoized steps) or, when the stack automaton
// overflows its bounds, the Earley Chart. Both answer the same questions identically.
// Groups of at least this many tokens (by first byte) are kept for reuse by other tables.
constexpr std::uint32_t kMinMemoGroup = 64;

// First-byte groups smaller than this are walked without looking for a bounded ASCII run after the
// first byte (finding one computes the steps of every ASCII byte along it).
constexpr std::uint32_t kMinRunGroup = 128;
// A tight run over a loop's subtree at least this long asks for the loop set's index.
constexpr std::uint32_t kMinIndexedRun = 64;
// A run's tokens are taken from the set index's masks by length.
static_assert(StackDfa::kMaxAsciiRun <= VocabularyIndex::kMaxSetRunBytes);

// Whether a bounded run of `length` bytes of `set` from `config` (StackDfa::ascii_run: each byte of the
// set one step on, whichever it is) ends closed: no configuration on the way lets the rule end, and after
// the last one no byte of the set can be read. A token of more bytes of the set then dies inside the
// rule: rejected whatever the stack holds.
bool ascii_run_ends_closed(StackDfa& dfa, std::int32_t config, const std::array<std::uint64_t, 2>& set,
                           std::size_t length) {
  const auto some = static_cast<std::uint8_t>(set[0] != 0 ? std::countr_zero(set[0]) : 64 + std::countr_zero(set[1]));
  for (std::size_t i = 0; i < length; ++i) {
    config = dfa.step(config, some);
    if (config == StackDfa::kDead || dfa.outer_final(config)) return false;
  }
  for (unsigned b = 0; b < 0x80; ++b) {
    if (((set[b >> 6] >> (b & 63)) & 1) != 0 && dfa.step(config, static_cast<std::uint8_t>(b)) != StackDfa::kDead)
      return false;
  }
  return true;
}

// Whether a bounded run of `length` text characters from `config` (StackDfa::text_run) ends closed: no
// configuration on the way lets the rule end (a token of text characters is then never uncertain), and
// after the last one no text character can be read. A token of more text characters then dies inside
// the rule: rejected whatever the stack holds.
bool run_ends_closed(StackDfa& dfa, std::int32_t config, std::size_t length) {
  for (std::size_t i = 0; i < length; ++i) {
    config = dfa.text_step(config);
    if (config == StackDfa::kDead || dfa.outer_final(config)) return false;
  }
  for (unsigned b = 0x20; b < 0x100; ++b) {
    const bool starts_text = VocabularyIndex::is_plain_byte(b) || (b >= 0xC2 && b <= 0xF4);
    if (starts_text && dfa.step(config, static_cast<std::uint8_t>(b)) != StackDfa::kDead) return false;
  }
  return true;
}

template <class Cursor, class MakeCursor>
TokenTable build_token_table_with(const Automaton& a, const Vocabulary& vocab, std::uint32_t state,
                                  const Deadline* deadline, FollowFilter filter,
                                  MakeCursor make) {
  const VocabularyIndex& ix = vocab.index();
  TokenTable table;
  const std::uint32_t rule = a.state_rule[state];
  const ByteSet& follow = a.rule_follow[rule];
  const std::vector<TokenId>& sorted = ix.text_tokens();
  const std::vector<std::uint32_t>& fb = ix.first_byte_begin();

  Cursor chart = make();
  chart.reset_detached({&state, 1});
  const ByteSet first = first_bytes(a, chart);
  FollowCheck<Cursor> follow_check(checked_contexts(a, rule, filter), make);
  EveryContextReads<Cursor> every_context(vocab, a.rule_contexts[rule],
                                          filter == FollowFilter::kFull && rule != a.root, make);

  AcceptedIds accepted_ids(vocab.n_mask_words());
  std::vector<std::uint64_t> group_accepted;  // zero between groups (see accept below)
  auto accept_whole = [&](VocabularyIndex::TokenClass c, unsigned b) {
    const VocabularyIndex::TokenClassIndex& index = ix.token_class(c);
    if (!index.group_bits[b].empty()) {
      accepted_ids.add_mask(index.group_bits[b]);
    } else {
      accepted_ids.add(std::span<const TokenId>(index.ids).subspan(index.begin[b], index.begin[b + 1] - index.begin[b]));
    }
  };
  // ends: the depths j > 0 of the current prefix after which the rule's end is reached (a property of
  // the prefix, so it survives truncation to a shorter prefix).
  std::vector<std::uint32_t> ends;
  std::size_t n_checked = 0;
  // Records p as uncertain, with its end depths, when the rest after some end may continue in a caller;
  // sets `accepted` instead when every caller reads the rest after one of the ends.
  // Returns whether some end is followed by a byte that may follow the rule: when none is, neither is
  // it in any token with the same bytes up to died_at (the ends and the bytes after them are the same).
  bool every_first = false;
  std::size_t accepted_end = 0;  // the end after which every caller read the rest (when uncertain accepts)
  auto uncertain = [&](std::uint32_t p, std::string_view tok, std::size_t died_at, bool& accepted) {
    const std::size_t before = table.end_depths.size();
    bool some_follow_byte = false;
    accepted = false;
    for (std::uint32_t j : ends) {
      if (j > died_at || j >= tok.size()) break;
      if (!byte_set_has(follow, static_cast<unsigned char>(tok[j]))) continue;
      some_follow_byte = true;
      // Every caller reading the rest implies that some caller may, so the follow check is not needed
      // then. Which check comes first follows the last token's answer (sorted tokens come in runs alike:
      // after `int ` in c.gbnf, 44,000 tokens that every caller reads; in json.gbnf, runs that no caller
      // may read).
      if (every_first && every_context.all(p, j)) {
        table.end_depths.resize(before);
        accepted = true;
        accepted_end = j;
        return true;
      }
      if (!follow_check.viable(tok.substr(j), j)) {
        every_first = false;
        continue;
      }
      if (!every_first && every_context.all(p, j)) {
        table.end_depths.resize(before);
        accepted = every_first = true;
        accepted_end = j;
        return true;
      }
      every_first = false;
      table.end_depths.push_back(j);
    }
    if (table.end_depths.size() != before) {
      table.end_begin.push_back(static_cast<std::uint32_t>(before));
      table.uncertain.push_back(p);
    }
    return some_follow_byte;
  };
  // What the group memo's results depend on besides the configuration: the rule (full filter) or its
  // follow bytes.
  std::uint32_t filter_id = 0;
  const VocabularyIndex::TokenClassIndex& plain_class = ix.token_class(VocabularyIndex::TokenClass::kPlain);
  const VocabularyIndex::TokenClassIndex& text_class = ix.token_class(VocabularyIndex::TokenClass::kText);
  // Text tokens read whole from the start: all of them when the start configuration loops on every text
  // character (inside a JSON string), or those of at most text_run characters when it steps through a
  // bounded run of them (a string with a maxLength: each character one step on, whichever it is). They
  // are accepted at once (a mask) and the walk visits only the others.
  bool start_loops_on_text = false;
  std::size_t text_run = 0;
  // And the text tokens of more characters are rejected without a walk when the run ends closed (a
  // string at its maxLength: a walk of each was most of such a table, tens of thousands of tokens).
  bool reject_longer_text = false;
  // Else, tokens made only of a set of ASCII bytes that the start configuration loops on (all of them)
  // or starts a bounded run over (those of at most start_set_length bytes): accepted at once too.
  // Without the set's index (not built yet), each token is checked as the walk meets it.
  std::shared_ptr<const VocabularyIndex::AsciiSetIndex> start_set;
  std::size_t start_set_length = 0;
  std::array<std::uint64_t, 2> start_bytes{};
  // And the longer members are rejected without a walk when that run ends closed (the last positions
  // of a counted repetition: each walked its longer members, tens of thousands of tokens).
  bool reject_longer_members = false;
  if constexpr (std::is_same_v<Cursor, DfaCursor>) {
    filter_id = filter == FollowFilter::kFull ? 2 * (rule + 1) : 2 * chart.dfa()->follow_set_id(rule) + 1;
    start_loops_on_text = chart.last_loops_on(VocabularyIndex::TokenClass::kText);
    if (start_loops_on_text) {
      accepted_ids.add_mask(text_class.bits);
    } else if (!text_class.up_to.empty()) {
      text_run = chart.dfa()->text_run(chart.last_config(), text_class.up_to.size() - 1);
      if (text_run > 0) accepted_ids.add_mask(text_class.up_to[text_run]);
      if (text_run > 0 && text_run + 1 < text_class.up_to.size())
        reject_longer_text = run_ends_closed(*chart.dfa(), chart.last_config(), text_run);
    }
    // (Only when the start reads enough ASCII bytes: the tests compute every ASCII step.)
    if (!start_loops_on_text && text_run == 0 && count_bytes({first[0], first[1]}) >= kMinLoopBytes) {
      const std::int32_t c0 = chart.last_config();
      const std::array<std::uint64_t, 2> loops = chart.dfa()->ascii_loops(c0);
      if (count_bytes(loops) >= kMinLoopBytes) {
        start_bytes = loops;
        start_set_length = SIZE_MAX;
      } else if (const StackDfa::AsciiRun start_run = chart.dfa()->ascii_run(c0); start_run.length > 0) {
        start_bytes = start_run.bytes;
        start_set_length = start_run.length;
      }
      if (start_set_length > 0) start_set = ix.ascii_set_index(start_bytes);
      if (start_set != nullptr) {
        if (start_set_length >= start_set->max_length) {
          start_set_length = SIZE_MAX;
          accepted_ids.add_mask(start_set->all);
        } else {
          accepted_ids.add_mask(start_set->up_to[start_set_length]);
          reject_longer_members = ascii_run_ends_closed(*chart.dfa(), c0, start_bytes, start_set_length);
        }
      }
    }
  }
  // The tight runs over a loop's subtree (below), where no text run accepts tokens already (the walk's
  // checks jump over those). A start set's member met in a run is accepted again (it is in the mask
  // already) or ends the run. (With a start set, runs measured 12% fewer instructions in c.gbnf's
  // compile: after `int ` the tables start in an identifier yet accept " foo" after a space.)
  const bool loop_runs = text_run == 0;
  for (unsigned b = 0; b < 256; ++b) {
    if (!byte_set_has(first, b)) continue;
    std::size_t depth_dead = SIZE_MAX;  // byte index at which the previous token died, if it did
    chart.truncate(2);
    ends.clear();
    // When the first byte leads to a configuration that loops on every token of a class (plain ASCII,
    // or all JSON string text), the group's tokens of that class are read whole: accepted at once, not
    // walked; the walk visits the others, each resuming from its common prefix with the last one walked.
    const VocabularyIndex::TokenClassIndex* whole = nullptr;
    VocabularyIndex::TokenClass whole_class = VocabularyIndex::TokenClass::kPlain;
    // Or, when the first byte (a plain one) leads into a bounded run of text characters, the group's
    // text tokens of at most 1 + group_run characters are accepted as they come, without a walk.
    std::size_t group_run = 0;
    // Or, when it leads into a bounded run over a set of ASCII bytes holding the first byte (a counted
    // repetition of a character class), the group's tokens of at most 1 + run.length bytes, all in the
    // set, are accepted without a walk.
    StackDfa::AsciiRun run;
    // The configuration after the first byte decides the whole group: a group met before (by another
    // state's table reaching the same configuration) is copied, and a large group walked here is kept.
    std::int32_t after = StackDfa::kDead;
    StackDfa::GroupResult record;
    // (Not when the text tokens are accepted apart: the group's record would lack them.) A group not
    // found is recorded (`keep`) while the stack automaton's records are found again often enough.
    const bool memo = fb[b + 1] - fb[b] >= kMinMemoGroup && !start_loops_on_text && text_run == 0;
    bool keep = false;
    const std::size_t uncertain_before = table.uncertain.size();
    if constexpr (std::is_same_v<Cursor, DfaCursor>) {
      if (chart.push(static_cast<std::uint8_t>(b))) {
        after = chart.last_config();
        keep = memo && chart.dfa()->keeps_groups();
        if (memo) {
          if (const StackDfa::GroupResult* g = chart.dfa()->find_group(after, static_cast<std::uint8_t>(b), filter_id)) {
            if (!accepted_ids.add_mostly_accepted_group(g->accepted.data(), fb[b + 1] - fb[b], sorted.data() + fb[b],
                                                         vocab, static_cast<std::uint8_t>(b), fb[b], g->n_accepted)) {
              accepted_ids.add_group(g->accepted.data(), g->accepted.size(), sorted.data() + fb[b]);
            }
            if (g->whole >= 0) accept_whole(static_cast<VocabularyIndex::TokenClass>(g->whole), b);
            for (std::size_t k = 0, e = 0; k < g->uncertain.size(); ++k) {
              table.end_begin.push_back(static_cast<std::uint32_t>(table.end_depths.size()));
              table.uncertain.push_back(g->uncertain[k]);
              for (std::uint32_t n = 0; n < g->uncertain_ends[k]; ++n) table.end_depths.push_back(g->end_depths[e++]);
            }
            continue;
          }
        }
        if (text_run > 0) {
          // The text tokens that fit are accepted already; the others are walked.
        } else if (VocabularyIndex::is_plain_byte(b) && chart.last_loops_on(VocabularyIndex::TokenClass::kText)) {
          whole = &text_class;
          whole_class = VocabularyIndex::TokenClass::kText;
        } else if (VocabularyIndex::is_plain_byte(b) && chart.last_loops_on(VocabularyIndex::TokenClass::kPlain)) {
          whole = &plain_class;
        } else if (VocabularyIndex::is_plain_byte(b) && !text_class.up_to.empty()) {
          group_run = chart.dfa()->text_run(chart.last_config(), text_class.up_to.size() - 1);
        }
        if (whole == nullptr && group_run == 0 && text_run == 0 && start_set_length == 0 && b < 0x80 &&
            fb[b + 1] - fb[b] >= kMinRunGroup) {
          run = chart.dfa()->ascii_run(after);
          if (((run.bytes[b >> 6] >> (b & 63)) & 1) == 0) run.length = 0;
        }
        chart.truncate(2);
      }
    }
    if (start_loops_on_text) whole = &text_class;
    const std::size_t group_words = (fb[b + 1] - fb[b] + 63) / 64;
    if (keep) record.accepted.assign(group_words, 0);
    // The tokens the walk accepts, a bit per position in the group: one bit set per token (often 40,000 a
    // table), read into the table's ids and the group's record at the end of the group.
    if (group_accepted.size() < group_words) group_accepted.resize(group_words, 0);
    std::uint64_t* const group_bits = group_accepted.data();
    const std::uint32_t group_begin = fb[b];
    // The words set (most tables accept few tokens of a group: only those words are read back). The walk
    // accepts positions in ascending order: the last one's word ends the range.
    std::size_t words_lo = group_words, words_hi = 0;
    auto accept = [&](std::uint32_t p) {  // a position in the group
      const std::size_t w = (p - group_begin) >> 6;
      group_bits[w] |= std::uint64_t{1} << ((p - group_begin) & 63);
      if (words_lo == group_words) words_lo = w;
      words_hi = w + 1;
    };
    if (whole != nullptr && !start_loops_on_text) {
      accept_whole(whole_class, b);
      record.whole = static_cast<std::int8_t>(whole_class);
    }
    std::string_view last;  // the last token walked in this group
    std::uint32_t last_p = 0;  // and its position (valid while last is not empty)
    // The depth of the last walked token's path at which it reached a configuration looping on every
    // member of a token class (loop_from: that class's member_from) or on a set of ASCII bytes
    // (loop_bytes), if it did: a token sharing that many bytes with it whose rest from there is of
    // the class, or whose bytes are all in the set, is accepted without a walk.
    std::size_t loop_depth = SIZE_MAX;
    const std::vector<std::uint32_t>* loop_from = nullptr;
    std::array<std::uint64_t, 2> loop_bytes{};
    // loop_bytes' index, asked for at the first token whose bytes before the loop are not all in the set
    std::shared_ptr<const VocabularyIndex::AsciiSetIndex> loop_set;
    bool loop_set_asked = false;
    bool loop_multibyte = false;  // and on every multi-byte character
    auto note_loop = [&](std::size_t d) {
      if constexpr (std::is_same_v<Cursor, DfaCursor>) {
        if (loop_depth != SIZE_MAX || d == 0) return;
        // Only a configuration with a self-loop among the steps computed so far (computing steps to
        // find one would add configurations the walks never meet; a per-configuration flag, not a
        // look into the transition table, keeps this cheap on every byte pushed).
        const std::int32_t c = chart.last_config();
        if (!chart.dfa()->has_ascii_self_loop(c)) return;
        // A small set (digits, spaces) reads few tokens whole: leave the depth to a larger loop.
        const std::array<std::uint64_t, 2>& bytes = chart.dfa()->ascii_loops(c);
        if (count_bytes(bytes) < kMinLoopBytes) return;
        if (chart.last_loops_on(VocabularyIndex::TokenClass::kText)) {
          loop_from = &text_class.member_from;
        } else if (chart.last_loops_on(VocabularyIndex::TokenClass::kPlain)) {  // from the same set
          loop_from = &plain_class.member_from;
        } else {
          loop_from = nullptr;
          if (bytes != loop_bytes) loop_set_asked = false;
          loop_bytes = bytes;
          loop_multibyte = chart.dfa()->multibyte_step(c) == c;
        }
        loop_depth = d;
      }
    };
    auto rest_read_whole = [&](std::uint32_t p) __attribute__((always_inline)) {
      // The rest from loop_depth on must be in the loop's class or set; the bytes before it need not
      // (" foo" enters an identifier loop after "f"). It starts at a character boundary (a loop entered
      // after a lone lead byte does not read the continuation bytes that follow it).
      auto at_boundary = [&] {
        return loop_depth == ix.sorted_token_size(p) ||
               (static_cast<unsigned char>(ix.sorted_token(p)[loop_depth]) & 0xC0) != 0x80;
      };
      if (loop_from != nullptr) return (*loop_from)[p] <= loop_depth && at_boundary();
      // The set's index, once asked for (below), answers most tokens at once: the rest from loop_depth is
      // made of the set exactly when the token's last byte outside it comes before (an ASCII byte then
      // starts the rest: a character boundary). An ASCII token with a byte outside the set in its rest is
      // not read whole; a longer token, or one with other bytes there (the loop may read multi-byte
      // characters), is checked below.
      if (loop_set_asked && loop_set != nullptr && loop_set->member_from[p] < 255) {
        if (loop_set->member_from[p] <= loop_depth) return true;
        if (ix.non_ascii(p) == VocabularyIndex::NonAscii::kNone) return false;
      }
      if (!at_boundary()) return false;
      const std::array<std::uint64_t, 2>& used = ix.ascii_bytes(p);
      if ((used[0] & ~loop_bytes[0]) == 0 && (used[1] & ~loop_bytes[1]) == 0) {  // every ASCII byte in the set
        return ix.non_ascii(p) == VocabularyIndex::NonAscii::kNone ||
               (loop_multibyte && ix.non_ascii(p) == VocabularyIndex::NonAscii::kCharacters);
      }
      // Some byte is not in the set: the set's index answers for ASCII tokens (asked for only now: a
      // loop whose tokens are all made of the set never needs it); else the rest is read.
      if (!loop_set_asked) {
        loop_set = ix.ascii_set_index(loop_bytes);
        loop_set_asked = true;
      }
      if (loop_set != nullptr && loop_set->member_from[p] < 255 && ix.non_ascii(p) == VocabularyIndex::NonAscii::kNone)
        return loop_set->member_from[p] <= loop_depth;
      const std::string_view tok = ix.sorted_token(p);
      for (std::size_t i = loop_depth; i < tok.size(); ++i) {
        const unsigned c = static_cast<unsigned char>(tok[i]);
        if (c < 0x80 ? ((loop_bytes[c >> 6] >> (c & 63)) & 1) == 0
                     : !loop_multibyte || ix.non_ascii(p) != VocabularyIndex::NonAscii::kCharacters)
          return false;
      }
      return true;
    };
    // After token p, accepted because every caller reads its rest (with the same bytes up to depth_dead,
    // where the walk failed): the following tokens with those bytes have the same ends. When every caller
    // read the rest into a loop on one set, those whose rest shares the loops' depths and is in the set
    // from there are accepted too, a word at a time (after `int ` in c.gbnf, 44,000 identifiers after a
    // space). Returns the last position accepted. (Out of line: the walk's loop is hot.)
    auto every_caller_run = [&](std::uint32_t p, std::size_t dead_at) __attribute__((noinline)) {
      std::size_t loop_at = 0;
      const VocabularyIndex::AsciiSetIndex* const set = every_context.common_loop(loop_at);
      const std::size_t depth = accepted_end + loop_at;
      if (set == nullptr || depth > dead_at + 1 || depth >= VocabularyIndex::kReadWholeDepths) return p;
      const std::uint32_t q = next_clear(set->from_depth[depth].data(), p + 1, ix.subtree_end(p, dead_at));
      if (q == p + 1) return p;
      set_bits(group_bits, p + 1 - group_begin, q - group_begin);
      words_hi = ((q - 1 - group_begin) >> 6) + 1;
      return q - 1;
    };
    // Positions below loop_end share the first loop_depth bytes with the last token walked (its subtree
    // at that depth): those read whole from the loop are accepted in a tight run, without the checks
    // below (inside an identifier after a space, tens of thousands of tokens).
    std::uint32_t loop_end = 0;
    for (std::uint32_t p = fb[b]; p < fb[b + 1]; ++p) {
      if (p < loop_end) {
        // The tokens rest_read_whole accepts, a word at a time, when the loop's depth is one the indexes
        // keep bits for (a clear bit is left to rest_read_whole); else its first answer, from the set's
        // index, inline: most tokens of a run take it. (A long run asks for the index: its tokens may all
        // be made of the set, which rest_read_whole answers without it, a token at a time.)
        if (loop_from == nullptr && !loop_set_asked && loop_end - p >= kMinIndexedRun) {
          loop_set = ix.ascii_set_index(loop_bytes);
          loop_set_asked = true;
        }
        const bool indexed = loop_from == nullptr && loop_set_asked && loop_set != nullptr;
        // (Not when the group's class is accepted already: its members, most of such a run, are skipped
        // below instead of being accepted twice.)
        const std::uint64_t* read_whole_bits = nullptr;
        if (loop_depth < VocabularyIndex::kReadWholeDepths && whole == nullptr) {
          if (loop_from == &text_class.member_from) {
            read_whole_bits = text_class.from_depth[loop_depth].data();
          } else if (loop_from == &plain_class.member_from) {
            read_whole_bits = plain_class.from_depth[loop_depth].data();
          } else if (indexed) {
            read_whole_bits = (loop_multibyte ? loop_set->from_depth_chars : loop_set->from_depth)[loop_depth].data();
          }
        }
        const std::uint8_t* const member_from =
            indexed && read_whole_bits == nullptr ? loop_set->member_from.data() : nullptr;
        while (p < loop_end) {
          if (read_whole_bits != nullptr) {
            const std::uint32_t q = next_clear(read_whole_bits, p, loop_end);
            if (q > p) {
              set_bits(group_bits, p - group_begin, q - group_begin);
              if (words_lo == group_words) words_lo = (p - group_begin) >> 6;
              words_hi = ((q - 1 - group_begin) >> 6) + 1;
              p = q;
              continue;
            }
          }
          if (whole != nullptr && whole->member[p]) {  // accepted with the group's class already
            p = whole->next_out[p];
            continue;
          }
          if (member_from != nullptr && member_from[p] <= loop_depth && member_from[p] < 255) {
            accept(p++);
            continue;
          }
          if (!rest_read_whole(p)) break;
          accept(p++);
        }
        if (p >= fb[b + 1]) break;
      }
      if (whole != nullptr && whole->member[p]) {
        p = whole->next_out[p];
        if (p >= fb[b + 1]) break;
      }
      if (start_set == nullptr && start_set_length > 0 && ix.sorted_token_size(p) <= start_set_length &&
          ix.made_of(p, start_bytes)) {
        accept(p);
        continue;
      }
      if (reject_longer_members && start_set->length[p] != 0) {
        // Every member fits (accepted: in the mask already) or is longer (rejected): jump past them.
        const std::uint32_t q = std::min(start_set->next_out[p], fb[b + 1]);
        if (keep) or_bit_range(record.accepted.data(), start_set->fits[start_set_length].data(), p, q, fb[b]);
        p = q;
        if (p >= fb[b + 1]) break;
      }
      if (start_set != nullptr && start_set->length[p] != 0 && start_set->length[p] <= start_set_length) {
        // Accepted (in the mask already; the group's record has them too: they are accepted from the
        // configuration after the first byte, whatever table reaches it).
        if (start_set_length != SIZE_MAX) {  // the run of members that fit: one tight scan
          const std::uint32_t q = next_clear(start_set->fits[start_set_length].data(), p + 1, fb[b + 1]);
          if (keep) set_bits(record.accepted.data(), p - fb[b], q - fb[b]);
          p = q - 1;
          continue;
        }
        const std::uint32_t q = std::min(start_set->next_out[p], fb[b + 1]);  // every member: jump past them
        if (keep) set_bits(record.accepted.data(), p - fb[b], q - fb[b]);
        p = q;
        if (p >= fb[b + 1]) break;
      }
      if (group_run > 0 && text_class.chars[p] != 0 && text_class.chars[p] <= group_run + 1) {
        accept(p);
        continue;
      }
      if (run.length > 0 && ix.sorted_token_size(p) <= run.length + 1 && ix.made_of(p, run.bytes)) {
        accept(p);
        continue;
      }
      if (text_run > 0 && text_class.chars[p] != 0 && (reject_longer_text || text_class.chars[p] <= text_run)) {
        // Accepted (in the mask already), or rejected (longer than a closed run): no walk.
        if (reject_longer_text) {
          p = text_class.next_out[p];  // every member is one or the other: jump past them
          if (p >= fb[b + 1]) break;
        } else if (text_run + 1 == text_class.up_to.size()) {
          p = text_class.next_out_of_run[p];  // every member that fits: jump past them
          if (p >= fb[b + 1]) break;
        } else {
          continue;
        }
      }
      if (deadline != nullptr && (++n_checked & 0x3FFF) == 0 &&
          deadline->passed()) {
        throw LimitError(fmt::format("[compile] compile time limit exceeded building the token "
                                     "table of automaton state {}",
                                     state));
      }
      const std::string_view tok = ix.sorted_token(p);
      // The bytes shared with the last token walked (tokens read whole may lie between them): from the
      // vocabulary's common prefixes of neighbours when it is a few positions back, else compared.
      std::size_t l = 0;
      if (!last.empty() && p - last_p <= 4) {
        l = ix.lcp()[p];
        for (std::uint32_t k = last_p + 1; k < p; ++k) l = std::min<std::size_t>(l, ix.lcp()[k]);
      } else {
        for (const std::size_t n = std::min(last.size(), tok.size()); l < n && last[l] == tok[l];) ++l;
      }
      if (l >= loop_depth && rest_read_whole(p)) {
        accept(p);
        continue;
      }
      last = tok;
      last_p = p;
      if (depth_dead != SIZE_MAX && l > depth_dead) {
        // Same bytes up to the one that failed: same chart, but the suffixes after an end differ.
        bool accepted = false;
        uncertain(p, tok, depth_dead, accepted);
        if (accepted) {
          accept(p);
          p = every_caller_run(p, depth_dead);
        }
        continue;
      }
      const std::size_t depth = std::min(l, chart.n_sets() - 2);
      chart.truncate(depth + 2);
      while (!ends.empty() && ends.back() > depth) ends.pop_back();
      if (loop_depth > depth) loop_depth = SIZE_MAX;
      note_loop(depth);
      depth_dead = SIZE_MAX;
      bool read_whole = false;  // the rest is of the class a configuration on the path loops on
      for (std::size_t j = depth; j < tok.size(); ++j) {
        if (loop_depth <= j && rest_read_whole(p)) {
          read_whole = true;
          break;
        }
        if (!chart.push(static_cast<unsigned char>(tok[j]))) {
          depth_dead = j;
          break;
        }
        if (chart.last_has_final(rule, 0)) ends.push_back(static_cast<std::uint32_t>(j + 1));
        note_loop(j + 1);
      }
      loop_end = loop_depth == SIZE_MAX || !loop_runs ? 0 : ix.subtree_end(p, loop_depth - 1);
      if (read_whole || depth_dead == SIZE_MAX) {
        accept(p);
      } else {
        bool accepted = false;
        if (ends.empty() || !uncertain(p, tok, depth_dead, accepted)) {
          // No end before the failing byte, or none followed by a byte that may follow the rule: every
          // token under this prefix is rejected; skip them all.
          p = ix.subtree_end(p, depth_dead) - 1;
          // With no end on the way, so are the next subtrees with the same bytes before it and a byte
          // there that dies too: each costs one step looked up (a bounded run's table meets thousands,
          // "aB", "a-", ... after each letter).
          if (ends.empty()) {
            const std::uint32_t siblings_end = depth_dead == 0 ? fb[b + 1] : ix.subtree_end(p, depth_dead - 1);
            std::uint32_t q = p + 1;
            while (q < siblings_end) {
              if (chart.push(static_cast<unsigned char>(ix.sorted_token(q)[depth_dead]))) {
                chart.truncate(depth_dead + 2);
                break;
              }
              q = ix.subtree_end(q, depth_dead);
            }
            p = q - 1;
          }
        } else if (accepted) {
          accept(p);
        }
      }
    }
    if (keep)
      for (std::size_t w = words_lo; w < words_hi; ++w) record.accepted[w] |= group_bits[w];
    if (words_lo < words_hi) {
      // (Not counted when the words set hold too few bits for it: more than the group's sparse words.)
      if (64 * (words_hi - words_lo) > ix.group_words(static_cast<std::uint8_t>(b)).size() &&
          accepted_ids.add_mostly_accepted_group(group_bits, fb[b + 1] - group_begin, sorted.data() + group_begin,
                                                 vocab, static_cast<std::uint8_t>(b), group_begin)) {
        std::fill(group_bits + words_lo, group_bits + words_hi, 0);
      } else {
        accepted_ids.add_and_clear_group(group_bits + words_lo, words_hi - words_lo,
                                         sorted.data() + group_begin + words_lo * 64);
      }
    }
    if constexpr (std::is_same_v<Cursor, DfaCursor>) {
      if (keep) {
        for (std::size_t k = uncertain_before; k < table.uncertain.size(); ++k) {
          record.uncertain.push_back(table.uncertain[k]);
          const std::uint32_t e1 = k + 1 < table.uncertain.size() ? table.end_begin[k + 1]
                                                                  : static_cast<std::uint32_t>(table.end_depths.size());
          record.uncertain_ends.push_back(e1 - table.end_begin[k]);
          record.end_depths.insert(record.end_depths.end(), table.end_depths.begin() + table.end_begin[k],
                                   table.end_depths.begin() + e1);
        }
        for (const std::uint64_t w : record.accepted) record.n_accepted += count_bits(w);
        chart.dfa()->add_group(after, static_cast<std::uint8_t>(b), filter_id, std::move(record));
      }
    }
  }
  accepted_ids.finish(table.accepted_bits, table.accepted_list);
  table.end_begin.push_back(static_cast<std::uint32_t>(table.end_depths.size()));
  table.uncertain.shrink_to_fit();
  table.end_depths.shrink_to_fit();
  return table;
}

// A walk from one start through tokens in sorted order, each resuming from its common prefix with the
// last one read (the same bytes up to the one that failed: the same answer).
template <class Cursor>
struct ResumingWalk {
  Cursor chart;
  std::size_t dead = SIZE_MAX;      // where the last token read died; SIZE_MAX: read up to its limit
  std::vector<std::uint32_t> ends;  // the depths after which the rule's end was reached (with_ends)
  // Reads tok's bytes up to `limit`, sharing `l` bytes with the last token read; returns where it died,
  // or SIZE_MAX.
  std::size_t read(std::string_view tok, std::size_t l, std::size_t limit, std::uint32_t rule, bool with_ends) {
    if (dead != SIZE_MAX && l > dead) return dead;
    const std::size_t depth = std::min(l, chart.n_sets() - 2);
    chart.truncate(depth + 2);
    while (!ends.empty() && ends.back() > depth) ends.pop_back();
    dead = SIZE_MAX;
    for (std::size_t j = depth; j < std::min(limit, tok.size()); ++j) {
      if (!chart.push(static_cast<unsigned char>(tok[j]))) return dead = j;
      if (with_ends && chart.last_has_final(rule, 0)) ends.push_back(static_cast<std::uint32_t>(j + 1));
    }
    return dead;
  }
};

// Throws LimitError when `deadline` (if given) passes, checked every 1,024 tokens.
void check_deadline(const Deadline* deadline, std::size_t k, std::uint32_t state) {
  if (deadline != nullptr && (k & 0x3FF) == 0x3FF && deadline->passed()) {
    throw LimitError(fmt::format("[compile] compile time limit exceeded deriving the token table of automaton "
                                 "state {}",
                                 state));
  }
}

template <class Cursor, class MakeCursor>
std::vector<std::uint32_t> long_tokens_read_far_with(const Automaton& a, const Vocabulary& vocab, std::uint32_t state,
                                                     const Deadline* deadline,
                                                     MakeCursor make) {
  const VocabularyIndex& ix = vocab.index();
  constexpr std::size_t kShort = VocabularyIndex::kShortTokenBytes;
  ResumingWalk<Cursor> walk{make()};
  walk.chart.reset_detached({&state, 1});
  const std::vector<std::uint32_t>& lcp = ix.long_token_lcp();
  std::vector<std::uint32_t> far;
  for (std::size_t k = 0; k < ix.long_tokens().size(); ++k) {
    check_deadline(deadline, k, state);
    const std::uint32_t p = ix.long_tokens()[k];
    const std::size_t l = std::min<std::size_t>(lcp[k], kShort);
    if (walk.read(ix.sorted_token(p), l, kShort, a.state_rule[state], false) == SIZE_MAX) far.push_back(p);
  }
  return far;
}

// The table of `state` from `base` (see derive_token_table): the tokens of `read_far` are walked from
// `state` and replace their entries in `base`. The ends and the two checks after them are
// build_token_table_with's.
template <class Cursor, class MakeCursor>
TokenTable derive_token_table_with(const Automaton& a, const Vocabulary& vocab, std::uint32_t state,
                                   const TokenTable& base, std::span<const std::uint32_t> read_far,
                                   const Deadline* deadline, FollowFilter filter,
                                   MakeCursor make) {
  const VocabularyIndex& ix = vocab.index();
  const std::uint32_t rule = a.state_rule[state];
  const ByteSet& follow = a.rule_follow[rule];
  FollowCheck<Cursor> follow_check(checked_contexts(a, rule, filter), make);
  EveryContextReads<Cursor> every_context(vocab, a.rule_contexts[rule],
                                          filter == FollowFilter::kFull && rule != a.root, make);
  const std::vector<TokenId>& sorted = ix.text_tokens();
  ResumingWalk<Cursor> walk{make()};
  walk.chart.reset_detached({&state, 1});
  std::vector<TokenId> accepted, not_accepted;                  // of read_far
  std::vector<std::uint32_t> uncertain, end_begin, end_depths;  // of read_far, ascending
  std::string_view last;
  for (std::size_t k = 0; k < read_far.size(); ++k) {
    check_deadline(deadline, k, state);
    const std::uint32_t p = read_far[k];
    const std::string_view tok = ix.sorted_token(p);
    std::size_t l = 0;
    for (const std::size_t n = std::min(last.size(), tok.size()); l < n && last[l] == tok[l];) ++l;
    last = tok;
    const std::size_t dead = walk.read(tok, l, tok.size(), rule, true);
    if (dead == SIZE_MAX) {
      accepted.push_back(sorted[p]);
      continue;
    }
    // Accepted when every caller reads the rest after some end (which implies the follow check);
    // uncertain with the ends whose rest may follow the rule; else rejected.
    const std::size_t before = end_depths.size();
    bool every = false;
    for (const std::uint32_t j : walk.ends) {
      if (j > dead || j >= tok.size()) break;
      if (!byte_set_has(follow, static_cast<unsigned char>(tok[j]))) continue;
      if (every_context.all(p, j)) {
        every = true;
        break;
      }
      if (follow_check.viable(tok.substr(j), j)) end_depths.push_back(j);
    }
    if (every) {
      end_depths.resize(before);
      accepted.push_back(sorted[p]);
      continue;
    }
    not_accepted.push_back(sorted[p]);  // rejected or uncertain: out of the base's accepted ids
    if (end_depths.size() != before) {
      end_begin.push_back(static_cast<std::uint32_t>(before));
      uncertain.push_back(p);
    }
  }
  end_begin.push_back(static_cast<std::uint32_t>(end_depths.size()));

  TokenTable table;
  if (!base.accepted_bits.empty()) {  // a bitset still (few ids change)
    table.accepted_bits = base.accepted_bits;
    std::vector<std::uint32_t>& bits = table.accepted_bits;
    for (const TokenId id : not_accepted) bits[static_cast<std::uint32_t>(id) >> 5] &= ~(1u << (id & 31));
    for (const TokenId id : accepted) bits[static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
  } else {
    std::vector<TokenId> ids;
    ids.reserve(base.accepted_list.size() + accepted.size());
    std::sort(not_accepted.begin(), not_accepted.end());
    std::set_difference(base.accepted_list.begin(), base.accepted_list.end(), not_accepted.begin(),
                        not_accepted.end(), std::back_inserter(ids));
    ids.insert(ids.end(), accepted.begin(), accepted.end());
    set_accepted(ids, vocab.n_mask_words(), table.accepted_bits, table.accepted_list);
  }
  // The base's uncertain tokens but those walked here, and the ones walked here, in position order.
  auto append = [&](std::uint32_t p, std::span<const std::uint32_t> depths) {
    table.uncertain.push_back(p);
    table.end_begin.push_back(static_cast<std::uint32_t>(table.end_depths.size()));
    table.end_depths.insert(table.end_depths.end(), depths.begin(), depths.end());
  };
  const std::span<const std::uint32_t> base_depths(base.end_depths), depths(end_depths);
  std::size_t k = 0, w = 0;
  for (std::size_t i = 0; i < base.uncertain.size(); ++i) {
    const std::uint32_t p = base.uncertain[i];
    for (; k < uncertain.size() && uncertain[k] < p; ++k)
      append(uncertain[k], depths.subspan(end_begin[k], end_begin[k + 1] - end_begin[k]));
    while (w < read_far.size() && read_far[w] < p) ++w;
    if (w < read_far.size() && read_far[w] == p) continue;
    append(p, base_depths.subspan(base.end_begin[i], base.end_begin[i + 1] - base.end_begin[i]));
  }
  for (; k < uncertain.size(); ++k) append(uncertain[k], depths.subspan(end_begin[k], end_begin[k + 1] - end_begin[k]));
  table.end_begin.push_back(static_cast<std::uint32_t>(table.end_depths.size()));
  table.uncertain.shrink_to_fit();
  table.end_depths.shrink_to_fit();
  return table;
}

template <class Cursor>
ChainTable build_chain_table_with(const Automaton& a, const Vocabulary& vocab, UncertainView below,
                                  std::span<const std::uint32_t> caller_returns, Cursor& chart) {
  const VocabularyIndex& ix = vocab.index();
  // The rest of each token after a depth where the callee ends, read from the caller returns (one rule,
  // one origin: every parse path the caller's rule may take) in a detached chart. Consumed: accepted.
  // Dead: the depths where the caller's rule ended (outer end, any depth including 0) with a byte its
  // own callers may read carry the token one level up; none: rejected.
  // The rests come mostly in byte order (tokens are sorted and usually end the callee at the same
  // depth), so consecutive ones share the chart of their common prefix; `leaves` is a prefix property.
  const std::uint32_t rule = a.state_rule[caller_returns.front()];
  const ByteSet& follow = a.rule_follow[rule];
  chart.reset_detached(caller_returns);
  std::vector<std::uint32_t> leaves;  // rest positions i where the caller's rule may be left
  std::string_view prev;
  std::size_t dead_at = SIZE_MAX;
  bool have_prev = false;
  std::vector<std::uint32_t> next_ends;
  // Returns true when the rest is consumed; else appends offset + leave positions (< dead index) to
  // next_ends.
  auto walk = [&](std::string_view rest, std::uint32_t offset) {
    std::size_t l = 0;
    if (have_prev) {
      const std::size_t n = std::min(prev.size(), rest.size());
      while (l < n && prev[l] == rest[l]) ++l;
    }
    have_prev = true;
    prev = rest;
    if (!(dead_at != SIZE_MAX && l > dead_at)) {
      const std::size_t depth = std::min(l, chart.n_sets() - 2);
      chart.truncate(depth + 2);
      while (!leaves.empty() && leaves.back() >= depth) leaves.pop_back();
      dead_at = SIZE_MAX;
      for (std::size_t i = depth; i < rest.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(rest[i]);
        if (byte_set_has(follow, c) && chart.last_has_final(rule, 0)) leaves.push_back(static_cast<std::uint32_t>(i));
        if (!chart.push(c)) {
          dead_at = i;
          break;
        }
      }
      if (dead_at == SIZE_MAX) return true;
    }
    for (std::uint32_t i : leaves) {
      if (i > dead_at) break;
      next_ends.push_back(offset + i);
    }
    return false;
  };
  ChainTable out;
  const std::vector<TokenId>& sorted = ix.text_tokens();
  std::vector<TokenId> accepted_ids;  // in byte order; a bitset or an ascending list at the end
  for (std::size_t k = 0; k < below.uncertain.size(); ++k) {
    const std::uint32_t p = below.uncertain[k];
    const std::string_view tok = ix.sorted_token(p);
    next_ends.clear();
    bool accepted = false;
    for (std::uint32_t e = below.end_begin[k]; e < below.end_begin[k + 1] && !accepted; ++e) {
      const std::uint32_t j = below.end_depths[e];
      accepted = walk(tok.substr(j), j);
    }
    if (accepted) {
      accepted_ids.push_back(sorted[p]);
    } else if (!next_ends.empty()) {
      std::sort(next_ends.begin(), next_ends.end());
      next_ends.erase(std::unique(next_ends.begin(), next_ends.end()), next_ends.end());
      out.uncertain.push_back(p);
      out.end_begin.push_back(static_cast<std::uint32_t>(out.end_depths.size()));
      out.end_depths.insert(out.end_depths.end(), next_ends.begin(), next_ends.end());
    }
  }
  out.end_begin.push_back(static_cast<std::uint32_t>(out.end_depths.size()));
  set_accepted(accepted_ids, vocab.n_mask_words(), out.accepted_bits, out.accepted);
  return out;
}

}  // namespace

namespace {

template <class Cursor, class MakeCursor>
void apply_follow_filter_with(const Automaton& a, const Vocabulary& vocab, std::uint32_t state, TokenTable& table,
                              MakeCursor make) {
  const VocabularyIndex& ix = vocab.index();
  const std::uint32_t rule = a.state_rule[state];
  const ByteSet& follow = a.rule_follow[rule];
  FollowCheck<Cursor> follow_check(a.rule_contexts[rule], make);
  EveryContextReads<Cursor> every_context(vocab, a.rule_contexts[rule], rule != a.root, make);
  TokenTable out;
  std::vector<TokenId> accepted;  // uncertain tokens that every caller reads on
  for (std::size_t k = 0; k < table.uncertain.size(); ++k) {
    const std::uint32_t p = table.uncertain[k];
    const std::string_view tok = ix.sorted_token(p);
    const std::size_t before = out.end_depths.size();
    bool accept = false;
    for (std::uint32_t e = table.end_begin[k]; e < table.end_begin[k + 1] && !accept; ++e) {
      const std::uint32_t j = table.end_depths[e];
      if (byte_set_has(follow, static_cast<unsigned char>(tok[j])) && follow_check.viable(tok.substr(j), j)) {
        accept = every_context.all(p, j);
        out.end_depths.push_back(j);
      }
    }
    if (accept) {
      out.end_depths.resize(before);
      accepted.push_back(ix.text_tokens()[p]);
      continue;
    }
    if (out.end_depths.size() == before) continue;
    out.end_begin.push_back(static_cast<std::uint32_t>(before));
    out.uncertain.push_back(p);
  }
  out.end_begin.push_back(static_cast<std::uint32_t>(out.end_depths.size()));
  if (!accepted.empty()) {
    if (!table.accepted_bits.empty()) {
      for (const TokenId id : accepted) table.accepted_bits[static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
    } else {
      accepted.insert(accepted.end(), table.accepted_list.begin(), table.accepted_list.end());
      table.accepted_list.clear();
      set_accepted(accepted, vocab.n_mask_words(), table.accepted_bits, table.accepted_list);
    }
  }
  table.uncertain = std::move(out.uncertain);
  table.end_begin = std::move(out.end_begin);
  table.end_depths = std::move(out.end_depths);
}


// Runs `walk` with cursors of the shared stack automaton (cleared first when saturated, and once more
// after an overflow), else of a fresh stack automaton, else of the Earley chart: the same answer each time,
// each slower than the one before. walk(make) takes a callable that returns a new cursor.
template <class Walk>
auto with_cursors(const Automaton& a, StackDfa* shared, Walker walker, Walk walk) {
  if (walker == Walker::kAuto) {
    if (shared != nullptr) {
      for (int attempt = 0; attempt < 2; ++attempt) {
        if (attempt == 1 || shared->saturated()) shared->clear();
        try {
          return walk([&] { return DfaCursor(shared); });
        } catch (const StackDfa::Overflow&) {
        }
      }
      shared->clear();
    }
    try {
      StackDfa fresh(a);
      return walk([&] { return DfaCursor(&fresh); });
    } catch (const StackDfa::Overflow&) {
    }
  }
  return walk([&] { return Chart(&a); });
}

}  // namespace

TokenTable build_token_table(const Automaton& a, const Vocabulary& vocab, std::uint32_t state,
                             const Deadline* deadline, StackDfa* shared,
                             Walker walker, FollowFilter follow) {
  return with_cursors(a, shared, walker, [&](auto make) {
    return build_token_table_with<decltype(make())>(a, vocab, state, deadline, follow, make);
  });
}

std::vector<std::uint32_t> long_tokens_read_far(const Automaton& a, const Vocabulary& vocab, std::uint32_t state,
                                                const Deadline* deadline,
                                                StackDfa* shared, Walker walker) {
  return with_cursors(a, shared, walker, [&](auto make) {
    return long_tokens_read_far_with<decltype(make())>(a, vocab, state, deadline, make);
  });
}

TokenTable derive_token_table(const Automaton& a, const Vocabulary& vocab, std::uint32_t state, const TokenTable& base,
                              std::span<const std::uint32_t> read_far,
                              const Deadline* deadline, StackDfa* shared, Walker walker,
                              FollowFilter follow) {
  return with_cursors(a, shared, walker, [&](auto make) {
    return derive_token_table_with<decltype(make())>(a, vocab, state, base, read_far, deadline, follow, make);
  });
}

void apply_follow_filter(const Automaton& a, const Vocabulary& vocab, std::uint32_t state, TokenTable& table,
                         StackDfa* shared) {
  if (table.uncertain.empty()) return;
  // `table` changes only once a walk has finished: an overflow part-way leaves it as it was.
  with_cursors(a, shared, Walker::kAuto, [&](auto make) {
    apply_follow_filter_with<decltype(make())>(a, vocab, state, table, make);
    return 0;
  });
}

ChainTable build_chain_table(const Automaton& a, const Vocabulary& vocab, UncertainView below,
                             std::span<const std::uint32_t> caller_returns, StackDfa* shared, Walker walker) {
  if (caller_returns.empty()) throw std::logic_error("build_chain_table: no caller return state");
  for (const std::uint32_t r : caller_returns) {
    if (a.state_rule[r] != a.state_rule[caller_returns.front()])
      throw std::logic_error("build_chain_table: caller return states of different rules");
  }
  return with_cursors(a, shared, walker, [&](auto make) {
    auto chart = make();
    return build_chain_table_with(a, vocab, below, caller_returns, chart);
  });
}

}  // namespace pse::detail
