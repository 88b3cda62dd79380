#include "vocabulary_index.h"

#include <algorithm>
#include <map>
#include <mutex>

namespace pse {

namespace {

// Whether byte d of t starts a UTF-8 character, or ends t.
bool starts_character(std::string_view t, std::size_t d) {
  return d == t.size() || (static_cast<unsigned char>(t[d]) & 0xC0) != 0x80;
}

// Bitsets by level, each holding only its own level's bits, made cumulative: level n also holds the bits of
// every level below it.
void accumulate_levels(std::vector<std::vector<std::uint64_t>>& levels) {
  for (std::size_t n = 1; n < levels.size(); ++n)
    for (std::size_t w = 0; w < levels[n].size(); ++w) levels[n][w] |= levels[n - 1][w];
}

// Whether the UTF-8 sequence that starts at t[d] (a byte >= 0x80) is well-formed (Unicode's table:
// the length by the lead byte, the range of the second byte), or its first bytes when t ends first;
// *n receives its length.
bool good_sequence_at(std::string_view t, std::size_t d, std::size_t* n) {
  const unsigned char c = static_cast<unsigned char>(t[d]);
  unsigned char lo = 0x80, hi = 0xBF;
  *n = 0;
  if (c >= 0xC2 && c <= 0xDF) *n = 2;
  else if (c == 0xE0) *n = 3, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) *n = 3;
  else if (c == 0xED) *n = 3, hi = 0x9F;
  else if (c >= 0xEE && c <= 0xEF) *n = 3;
  else if (c == 0xF0) *n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) *n = 4;
  else if (c == 0xF4) *n = 4, hi = 0x8F;
  bool good = *n > 0;
  for (std::size_t k = 1; good && k < *n && d + k < t.size(); ++k) {
    const unsigned char x = static_cast<unsigned char>(t[d + k]);
    good = x >= (k == 1 ? lo : 0x80) && x <= (k == 1 ? hi : 0xBF);
  }
  return good;
}

// The first byte from which the rest of t is JSON text: well-formed UTF-8 characters (no overlong forms,
// surrogates or values past U+10FFFF), none a control character (below U+0020), DEL, '"' or '\\'; the
// last may be cut short (the first bytes of a well-formed sequence), as byte-level tokens often are: what
// reads every character reads those too. t.size() when no non-empty rest is. One pass from the end (a
// rest is text when its first character is and the rest after it is), so long tokens cost linear time.
std::size_t text_from(std::string_view t, std::vector<std::uint8_t>& ok) {
  ok.assign(t.size() + 1, 0);
  ok[t.size()] = 1;
  std::size_t from = t.size();
  for (std::size_t d = t.size(); d-- > 0;) {
    const unsigned char c = static_cast<unsigned char>(t[d]);
    if (c < 0x80) {
      ok[d] = VocabularyIndex::is_plain_byte(c) && ok[d + 1];
    } else {
      std::size_t n = 0;
      const bool good = good_sequence_at(t, d, &n);
      ok[d] = good && (d + n >= t.size() || ok[d + n]);
    }
    if (ok[d]) from = d;
  }
  return from;
}

// The first byte from which the rest of t is plain bytes (t.size() when no non-empty rest is).
std::size_t plain_from(std::string_view t) {
  std::size_t d = t.size();
  while (d > 0 && VocabularyIndex::is_plain_byte(static_cast<unsigned char>(t[d - 1]))) --d;
  return d;
}

}  // namespace

VocabularyIndex::VocabularyIndex(const std::vector<std::string>& tokens, const std::vector<std::uint8_t>& kind,
                                 std::size_t mask_words)
    : n_mask_words_(mask_words), ascii_set_indexes_(std::make_unique<AsciiSetIndexes>()) {
  sorted_.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (kind[i] == 0 && !tokens[i].empty()) {
      sorted_.push_back(static_cast<TokenId>(i));
      max_length_ = std::max(max_length_, tokens[i].size());  // (a special token's name is no text)
    }
  }
  // Sort on the first 8 bytes (big-endian, so integer order is byte order) and compare whole strings
  // only on ties: far fewer cache misses than comparing std::strings throughout.
  std::vector<std::pair<std::uint64_t, TokenId>> keyed;
  keyed.reserve(sorted_.size());
  for (TokenId id : sorted_) {
    std::uint64_t key = 0;
    const std::string& t = tokens[id];
    for (std::size_t i = 0; i < 8; ++i) key = (key << 8) | (i < t.size() ? static_cast<unsigned char>(t[i]) : 0u);
    keyed.emplace_back(key, id);
  }
  std::sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return tokens[a.second] < tokens[b.second];
  });
  for (std::size_t i = 0; i < keyed.size(); ++i) sorted_[i] = keyed[i].second;
  lcp_.assign(sorted_.size(), 0);
  for (std::size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = tokens[sorted_[i - 1]];
    const std::string& b = tokens[sorted_[i]];
    std::size_t n = std::min(a.size(), b.size());
    std::size_t k = 0;
    while (k < n && a[k] == b[k]) ++k;
    lcp_[i] = static_cast<std::uint32_t>(k);
  }
  sorted_offset_.reserve(sorted_.size() + 1);
  for (TokenId id : sorted_) {
    sorted_offset_.push_back(static_cast<std::uint32_t>(sorted_bytes_.size()));
    sorted_bytes_ += tokens[id];
  }
  sorted_offset_.push_back(static_cast<std::uint32_t>(sorted_bytes_.size()));
  std::uint32_t lcp_since_long = 0;  // with the last long token: the least lcp since it
  for (std::size_t p = 0; p < sorted_.size(); ++p) {
    lcp_since_long = std::min(lcp_since_long, lcp_[p]);
    if (sorted_token_size(p) <= kShortTokenBytes) continue;
    long_token_lcp_.push_back(long_tokens_.empty() ? 0 : lcp_since_long);
    long_tokens_.push_back(static_cast<std::uint32_t>(p));
    lcp_since_long = UINT32_MAX;
  }
  // subtree_end(p, d): position p + 1 when it shares at most d bytes with p, else (it shares more, and
  // is at least that long) the same answer as for p + 1. Right to left, one entry per byte.
  subtree_end_.resize(sorted_bytes_.size());
  for (std::size_t p = sorted_.size(); p-- > 0;) {
    const std::size_t len = sorted_offset_[p + 1] - sorted_offset_[p];
    const bool last = p + 1 == sorted_.size();
    for (std::size_t d = 0; d < len; ++d) {
      subtree_end_[sorted_offset_[p] + d] = last || lcp_[p + 1] <= d ? static_cast<std::uint32_t>(p + 1)
                                                                     : subtree_end_[sorted_offset_[p + 1] + d];
    }
  }
  ascii_bytes_.resize(sorted_.size());
  non_ascii_.assign(sorted_.size(), NonAscii::kNone);
  for (std::size_t p = 0; p < sorted_.size(); ++p) {
    std::array<std::uint64_t, 2>& set = ascii_bytes_[p];
    const std::string_view t = sorted_token(p);
    for (std::size_t d = 0; d < t.size();) {
      const auto c = static_cast<unsigned char>(t[d]);
      if (c < 0x80) {
        set[c >> 6] |= std::uint64_t{1} << (c & 63);
        ++d;
        continue;
      }
      std::size_t n = 0;
      if (good_sequence_at(t, d, &n)) {
        if (non_ascii_[p] == NonAscii::kNone) non_ascii_[p] = NonAscii::kCharacters;
        d += n;
      } else {
        non_ascii_[p] = NonAscii::kOther;
        ++d;  // the bytes after it are looked at on their own
      }
    }
  }
  first_byte_begin_.assign(257, 0);
  for (TokenId id : sorted_) ++first_byte_begin_[static_cast<unsigned char>(tokens[id][0]) + 1];
  for (int b = 0; b < 256; ++b) first_byte_begin_[b + 1] += first_byte_begin_[b];
  for (unsigned b = 0; b < 256; ++b) {
    if (first_byte_begin_[b + 1] - first_byte_begin_[b] < kMinMaskedGroup) continue;
    first_byte_masks_[b].assign(n_mask_words(), 0);
    for (std::uint32_t p = first_byte_begin_[b]; p < first_byte_begin_[b + 1]; ++p)
      first_byte_masks_[b][static_cast<std::uint32_t>(sorted_[p]) >> 5] |= 1u << (sorted_[p] & 31);
  }
  group_word_begin_.assign(257, 0);
  word_of_position_.assign(sorted_.size(), 0);
  std::vector<std::uint32_t> word_index(n_mask_words(), ~0u);  // per mask word: its index in the group's
  for (unsigned b = 0; b < 256; ++b) {
    group_word_begin_[b + 1] = group_word_begin_[b];
    if (first_byte_begin_[b + 1] - first_byte_begin_[b] < kMinWordGroup) continue;
    for (std::uint32_t p = first_byte_begin_[b]; p < first_byte_begin_[b + 1]; ++p)
      word_index[static_cast<std::uint32_t>(sorted_[p]) >> 5] = 0;
    for (std::uint32_t w = 0; w < word_index.size(); ++w) {
      if (word_index[w] == ~0u) continue;
      word_index[w] = static_cast<std::uint32_t>(group_words_.size()) - group_word_begin_[b];
      group_words_.push_back(w);
      group_word_bits_.push_back(0);
    }
    for (std::uint32_t p = first_byte_begin_[b]; p < first_byte_begin_[b + 1]; ++p) {
      const auto id = static_cast<std::uint32_t>(sorted_[p]);
      word_of_position_[p] = word_index[id >> 5];
      group_word_bits_[group_word_begin_[b] + word_index[id >> 5]] |= 1u << (id & 31);
    }
    group_word_begin_[b + 1] = static_cast<std::uint32_t>(group_words_.size());
    for (const std::uint32_t w : group_words(static_cast<std::uint8_t>(b))) word_index[w] = ~0u;
  }
  // A token is a member when its rest from byte 0 is (member_from).
  auto index_class = [&](TokenClassIndex& c, auto member_from) {
    c.member_from.resize(sorted_.size());
    for (std::size_t p = 0; p < sorted_.size(); ++p)
      c.member_from[p] = static_cast<std::uint32_t>(member_from(sorted_token(p)));
    c.member.assign(sorted_.size(), 0);
    c.next_out.resize(sorted_.size());
    c.begin.assign(257, 0);
    for (std::size_t p = 0; p < sorted_.size(); ++p) {
      const std::string_view t = sorted_token(p);
      c.member[p] = c.member_from[p] == 0 ? 1 : 0;
      if (c.member[p]) {
        c.ids.push_back(sorted_[p]);
        ++c.begin[static_cast<unsigned char>(t[0]) + 1];
      }
    }
    for (int b = 0; b < 256; ++b) c.begin[b + 1] += c.begin[b];
    c.bits.assign(n_mask_words(), 0);
    for (const TokenId id : c.ids) c.bits[static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
    c.group_bits.assign(256, {});
    for (unsigned b = 0; b < 256; ++b) {
      if (c.begin[b + 1] - c.begin[b] <= n_mask_words()) continue;
      c.group_bits[b].assign(n_mask_words(), 0);
      for (std::uint32_t i = c.begin[b]; i < c.begin[b + 1]; ++i)
        c.group_bits[b][static_cast<std::uint32_t>(c.ids[i]) >> 5] |= 1u << (c.ids[i] & 31);
    }
    auto out = static_cast<std::uint32_t>(sorted_.size());
    for (std::size_t p = sorted_.size(); p-- > 0;) {
      if (!c.member[p]) out = static_cast<std::uint32_t>(p);
      c.next_out[p] = out;
    }
    c.from_depth.assign(kReadWholeDepths, std::vector<std::uint64_t>((sorted_.size() + 63) / 64, 0));
    for (std::size_t p = 0; p < sorted_.size(); ++p) {
      const std::string_view t = sorted_token(p);
      for (std::size_t d = c.member_from[p]; d < kReadWholeDepths && d <= t.size(); ++d) {
        if (starts_character(t, d)) c.from_depth[d][p >> 6] |= std::uint64_t{1} << (p & 63);
      }
    }
  };
  index_class(plain_, plain_from);
  std::vector<std::uint8_t> ok;
  index_class(text_, [&](std::string_view t) { return text_from(t, ok); });
  // Lengths in characters (a walk through a bounded run of string characters accepts the text tokens
  // that fit at once).
  text_.chars.assign(sorted_.size(), 0);
  std::vector<std::vector<TokenId>> by_chars(1);
  for (std::size_t p = 0; p < sorted_.size(); ++p) {
    if (!text_.member[p]) continue;
    std::uint32_t n = 0;
    for (const char c : sorted_token(p)) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    text_.chars[p] = n;
    if (n > kMaxRunChars) continue;
    if (by_chars.size() <= n) by_chars.resize(n + 1);
    by_chars[n].push_back(sorted_[p]);
  }
  text_.next_out_of_run.resize(sorted_.size());
  auto out = static_cast<std::uint32_t>(sorted_.size());
  for (std::size_t p = sorted_.size(); p-- > 0;) {
    if (!text_.member[p] || text_.chars[p] >= by_chars.size()) out = static_cast<std::uint32_t>(p);
    text_.next_out_of_run[p] = out;
  }
  text_.up_to.assign(by_chars.size(), std::vector<std::uint32_t>(n_mask_words(), 0));
  for (std::size_t n = 1; n < by_chars.size(); ++n) {
    text_.up_to[n] = text_.up_to[n - 1];
    for (const TokenId id : by_chars[n]) text_.up_to[n][static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
  }
}

VocabularyIndex::~VocabularyIndex() = default;

struct VocabularyIndex::AsciiSetIndexes {
  std::mutex mutex;
  std::map<std::array<std::uint64_t, 2>, std::uint32_t> requests;  // sets not built yet: times asked
  std::vector<std::shared_ptr<const AsciiSetIndex>> built;
};

std::shared_ptr<const VocabularyIndex::AsciiSetIndex> VocabularyIndex::ascii_set_index(const std::array<std::uint64_t, 2>& asked,
                                                                                       bool count) const {
  std::array<std::uint64_t, 2> set = asked;
  set[0] &= ~std::uint64_t{1};  // NUL is never a member byte: a set with or without it is one index
  std::lock_guard<std::mutex> lock(ascii_set_indexes_->mutex);
  std::vector<std::shared_ptr<const AsciiSetIndex>>& built = ascii_set_indexes_->built;
  for (const auto& index : built)
    if (index->set == set) return index;
  if (built.size() >= kMaxAsciiSetIndexes || !count) return nullptr;
  // An index costs a pass over the vocabulary (a few milliseconds): a set's first few tables walk
  // without it.
  auto& requests = ascii_set_indexes_->requests;
  if (requests.size() >= 4096) requests.clear();  // bounds the counts' memory
  if (++requests[set] < kAsciiSetIndexAfter) return nullptr;
  requests.erase(set);
  auto index = std::make_shared<AsciiSetIndex>();
  index->set = set;
  index->length.assign(sorted_.size(), 0);
  index->member_from.resize(sorted_.size());
  std::array<bool, 256> in_set{};
  for (unsigned c = 1; c < 0x80; ++c) in_set[c] = ((set[c >> 6] >> (c & 63)) & 1) != 0;
  std::vector<std::vector<TokenId>> by_length(kMaxSetRunBytes + 1);
  index->all.assign(n_mask_words(), 0);
  // The position bitsets by depth and by length: each token's bit at its own level in the pass below,
  // then made cumulative a word at a time.
  const std::size_t n_words = (sorted_.size() + 63) / 64;
  index->from_depth.assign(kReadWholeDepths, std::vector<std::uint64_t>(n_words, 0));
  index->fits.assign(kMaxSetRunBytes + 1, std::vector<std::uint64_t>(n_words, 0));
  // One pass from each token's end: where its rest in the set begins; a member when that is 0.
  for (std::size_t p = 0; p < sorted_.size(); ++p) {
    const std::size_t begin = sorted_offset_[p];
    std::size_t i = sorted_offset_[p + 1];
    if (made_of(p, set)) {
      i = begin;  // (most tokens, for a set of most bytes: no scan)
    } else {
      while (i > begin && in_set[static_cast<unsigned char>(sorted_bytes_[i - 1])]) --i;
    }
    const std::size_t from = i - begin, n = sorted_offset_[p + 1] - begin;
    const std::uint64_t bit = std::uint64_t{1} << (p & 63);
    index->member_from[p] = static_cast<std::uint8_t>(std::min<std::size_t>(from, 255));
    if (from < kReadWholeDepths) index->from_depth[from][p >> 6] |= bit;
    if (from != 0) continue;
    if (n <= kMaxSetRunBytes) index->fits[n][p >> 6] |= bit;
    index->length[p] = static_cast<std::uint8_t>(std::min<std::size_t>(n, 255));
    index->max_length = std::max(index->max_length, n);
    const TokenId id = sorted_[p];
    index->all[static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
    if (n <= kMaxSetRunBytes) by_length[n].push_back(id);
  }
  accumulate_levels(index->from_depth);
  index->from_depth_chars = index->from_depth;
  for (std::size_t p = 0; p < sorted_.size(); ++p) {
    if (non_ascii_[p] != NonAscii::kCharacters) continue;
    // From the last ASCII byte outside the set on, its rest (from a character's start) is read.
    const std::string_view t = sorted_token(p);
    std::size_t from = 0;  // (when every ASCII byte is in the set: most tokens, for a set of most bytes)
    const std::array<std::uint64_t, 2>& used = ascii_bytes_[p];
    if ((used[0] & ~set[0]) != 0 || (used[1] & ~set[1]) != 0) {
      from = t.size();
      auto rest_byte = [&](std::size_t i) {
        const auto c = static_cast<unsigned char>(t[i]);
        return c >= 0x80 || in_set[c];
      };
      while (from > 0 && rest_byte(from - 1)) --from;
    }
    for (std::size_t d = from; d < kReadWholeDepths && d <= t.size(); ++d) {
      if (starts_character(t, d)) index->from_depth_chars[d][p >> 6] |= std::uint64_t{1} << (p & 63);
    }
  }
  index->next_out.resize(sorted_.size());
  auto out = static_cast<std::uint32_t>(sorted_.size());
  for (std::size_t p = sorted_.size(); p-- > 0;) {
    if (index->length[p] == 0) out = static_cast<std::uint32_t>(p);
    index->next_out[p] = out;
  }
  const std::size_t n_masks = std::min(index->max_length, kMaxSetRunBytes) + 1;
  index->fits.resize(n_masks);  // (no member is longer)
  accumulate_levels(index->fits);
  index->up_to.assign(n_masks, std::vector<std::uint32_t>(n_mask_words(), 0));
  for (std::size_t n = 1; n < n_masks; ++n) {
    index->up_to[n] = index->up_to[n - 1];
    for (const TokenId id : by_length[n]) index->up_to[n][static_cast<std::uint32_t>(id) >> 5] |= 1u << (id & 31);
  }
  built.push_back(index);
  return index;
}

}  // namespace pse
