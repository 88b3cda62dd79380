// Byte pair encoding by merge rank, over byte symbols (byte-level BPE) or character symbols with byte
// fallback (SentencePiece-style vocabularies loaded from a tokenizer.json merges list).
#include <queue>
#include <deque>

#include "tokenizer_impl.h"
#include "unicode.h"

namespace tokenizers {

namespace {

// Merges adjacent symbols in place, lowest rank first, leftmost first among equal ranks. Short words
// rescan the pair ranks (tiktoken's approach, fastest for a few symbols); long ones use a heap over a
// linked list, O(n log n).
void bpe_merge(const detail::MergeMap& merges, std::vector<TokenId>& syms) {
  constexpr std::uint32_t kNone = 0xFFFFFFFF;
  const std::size_t n = syms.size();
  if (n < 2) return;
  if (n <= 48) {
    std::uint32_t ranks[48];
    TokenId results[48];
    std::size_t m = n;
    for (std::size_t i = 0; i + 1 < m; ++i) {
      const auto* e = merges.find(syms[i], syms[i + 1]);
      ranks[i] = e ? e->rank : kNone;
      results[i] = e ? e->result : -1;
    }
    while (m > 1) {
      std::uint32_t best = kNone;
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < m; ++i) {
        if (ranks[i] < best) best = ranks[i], at = i;
      }
      if (best == kNone) break;
      syms[at] = results[at];
      for (std::size_t i = at + 1; i + 1 < m; ++i) {
        syms[i] = syms[i + 1];
        ranks[i] = ranks[i + 1];
        results[i] = results[i + 1];
      }
      --m;
      auto refresh = [&](std::size_t i) {
        const auto* e = merges.find(syms[i], syms[i + 1]);
        ranks[i] = e ? e->rank : kNone;
        results[i] = e ? e->result : -1;
      };
      if (at > 0) refresh(at - 1);
      if (at + 1 < m) refresh(at);
    }
    syms.resize(m);
    return;
  }
  struct Node {
    TokenId id;
    std::int32_t prev, next;
  };
  struct Cand {
    std::uint32_t rank;
    std::int32_t left;
    TokenId left_id, right_id;
    bool operator<(const Cand& o) const {  // priority_queue pops the largest: invert
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<Node> nodes(n);
  for (std::size_t i = 0; i < n; ++i) {
    nodes[i] = {syms[i], static_cast<std::int32_t>(i) - 1, i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1};
  }
  std::priority_queue<Cand> heap;
  auto push = [&](std::int32_t left) {
    if (left < 0) return;
    const std::int32_t right = nodes[static_cast<std::size_t>(left)].next;
    if (right < 0) return;
    const TokenId a = nodes[static_cast<std::size_t>(left)].id, b = nodes[static_cast<std::size_t>(right)].id;
    if (const auto* e = merges.find(a, b)) heap.push({e->rank, left, a, b});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<std::int32_t>(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Node& l = nodes[static_cast<std::size_t>(c.left)];
    if (l.id != c.left_id || l.next < 0) continue;
    Node& r = nodes[static_cast<std::size_t>(l.next)];
    if (r.id != c.right_id) continue;
    l.id = merges.find(c.left_id, c.right_id)->result;
    r.id = -2;  // dead
    l.next = r.next;
    if (r.next >= 0) nodes[static_cast<std::size_t>(r.next)].prev = c.left;
    push(l.prev);
    push(c.left);
  }
  syms.clear();
  for (std::int32_t i = 0; i >= 0; i = nodes[static_cast<std::size_t>(i)].next) syms.push_back(nodes[static_cast<std::size_t>(i)].id);
}

}  // namespace

void Tokenizer::Impl::push_unknown_bytes(std::string_view raw, std::vector<TokenId>& out) const {
  for (char ch : raw) {
    const TokenId b = byte_token[static_cast<unsigned char>(ch)];
    if (b >= 0 && static_cast<std::size_t>(b) < n_vocab()) {
      out.push_back(b);
    } else if (special.unk) {
      out.push_back(*special.unk);
    }
  }
}

void Tokenizer::Impl::encode_bpe_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  // The per-thread cache is small and hot; look there first, then the whole word in the vocabulary.
  const bool cacheable = word.size() <= detail::PieceCache::kMaxPieceBytes;
  detail::PieceCache* cache = cacheable ? &detail::PieceCache::for_thread(instance_id) : nullptr;
  if (cache && cache->lookup(word, out)) return;
  const std::size_t first = out.size();
  if (ignore_merges) {
    if (const TokenId* id = bytes_to_id.find(word)) {
      out.push_back(*id);
      if (cache) cache->store(word, out.data() + first, 1);
      return;
    }
  }
  thread_local std::vector<TokenId> syms;
  syms.clear();
  for (char ch : word) syms.push_back(byte_token[static_cast<unsigned char>(ch)]);
  bpe_merge(merges, syms);
  for (TokenId s : syms) {
    if (static_cast<std::size_t>(s) < n_vocab()) {
      out.push_back(s);
    } else {
      push_unknown_bytes(extra_bytes[static_cast<std::size_t>(s) - n_vocab()], out);
    }
  }
  if (cache) cache->store(word, out.data() + first, out.size() - first);
}

void Tokenizer::Impl::encode_char_bpe(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  if (ignore_merges) {
    if (const TokenId* id = text_to_id.find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  thread_local std::vector<TokenId> syms;
  syms.clear();
  std::size_t pos = 0;
  bool last_unk = false;
  while (pos < piece.size()) {
    const std::size_t start = pos;
    pos += unicode::utf8_length(static_cast<unsigned char>(piece[pos]));
    const std::string_view ch = piece.substr(start, pos - start);
    if (const TokenId* id = text_to_id.find(ch)) {
      syms.push_back(*id);
      last_unk = false;
      continue;
    }
    bool all_bytes = byte_fallback;
    if (byte_fallback) {
      for (char b : ch) all_bytes = all_bytes && byte_token[static_cast<unsigned char>(b)] >= 0;
    }
    if (all_bytes) {
      for (char b : ch) syms.push_back(byte_token[static_cast<unsigned char>(b)]);
      last_unk = false;
    } else if (special.unk && !(fuse_unk && last_unk)) {  // unknown characters in a row may fuse
      syms.push_back(*special.unk);
      last_unk = true;
    }
  }
  bpe_merge(merges, syms);
  for (TokenId s : syms) {
    if (static_cast<std::size_t>(s) < n_vocab()) {
      out.push_back(s);
    } else {
      push_unknown_bytes(extra_bytes[static_cast<std::size_t>(s) - n_vocab()], out);
    }
  }
}

}  // namespace tokenizers

namespace tokenizers::detail {

namespace {

// Symbol ids for merge texts: vocabulary ids, or new ids from n_vocab up for texts the vocabulary lacks.
class SymbolTable {
 public:
  SymbolTable(Tokenizer::Impl& impl, bool byte_level) : impl_(impl), byte_level_(byte_level) {
    for (std::size_t i = 0; i < impl.texts.size(); ++i) ids_.insert(impl.texts[i], static_cast<TokenId>(i));
  }
  TokenId get(std::string_view text) {
    if (const TokenId* id = ids_.find(text)) return *id;
    const auto id = static_cast<TokenId>(impl_.texts.size() + impl_.extra_bytes.size());
    std::string raw;
    if (byte_level_) {
      if (!decode_byte_level(text, raw)) raw = std::string(text);
    } else {
      for (std::size_t at = 0; at < text.size();) {  // ▁ -> ' '
        if (text.substr(at, 3) == "\xE2\x96\x81") {
          raw.push_back(' ');
          at += 3;
        } else {
          raw.push_back(text[at++]);
        }
      }
    }
    impl_.extra_bytes.push_back(std::move(raw));
    synthetic_.emplace_back(text);
    ids_.insert(synthetic_.back(), id);
    return id;
  }

 private:
  Tokenizer::Impl& impl_;
  bool byte_level_;
  StringMap ids_;
  std::deque<std::string> synthetic_;  // stable storage for the keys of new texts
};

void add_merges(Tokenizer::Impl& impl, SymbolTable& table, const std::vector<std::pair<std::string, std::string>>& merges) {
  std::uint32_t rank = 0;
  std::string joined;
  for (const auto& [a, b] : merges) {
    const TokenId left = table.get(a);
    const TokenId right = table.get(b);
    joined.assign(a).append(b);
    const TokenId result = table.get(joined);
    impl.merges.insert(left, right, rank++, result);
  }
}

}  // namespace

void setup_byte_level_bpe(Tokenizer::Impl& impl, const std::vector<std::pair<std::string, std::string>>& merges) {
  const std::size_t n = impl.texts.size();
  impl.bytes.assign(n, std::string());
  std::string decoded;
  for (std::size_t i = 0; i < n; ++i) {
    const TokenType ty = impl.types.empty() ? TokenType::kNormal : impl.types[i];
    const bool plain = ty != TokenType::kControl && ty != TokenType::kUserDefined && ty != TokenType::kUnknown;
    impl.bytes[i] = plain && decode_byte_level(impl.texts[i], decoded) ? decoded : impl.texts[i];
  }
  for (std::size_t i = 0; i < n; ++i) {
    const TokenType ty = impl.types.empty() ? TokenType::kNormal : impl.types[i];
    if (ty == TokenType::kControl || ty == TokenType::kUnknown) continue;
    impl.bytes_to_id.insert(impl.bytes[i], static_cast<TokenId>(i));
  }
  SymbolTable table(impl, true);
  for (int b = 0; b < 256; ++b) impl.byte_token[static_cast<std::size_t>(b)] = table.get(encode_byte_level(std::string(1, static_cast<char>(b))));
  add_merges(impl, table, merges);
}

void setup_char_bpe(Tokenizer::Impl& impl, const std::vector<std::pair<std::string, std::string>>& merges) {
  SymbolTable table(impl, false);
  add_merges(impl, table, merges);
}

}  // namespace tokenizers::detail
