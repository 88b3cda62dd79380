// SentencePiece BPE by score, as llama.cpp's llm_tokenizer_spm: characters are symbols; the adjacent pair
// whose concatenation is the highest-scoring token merges first (leftmost among equal scores); what is
// left unmatched becomes <0xXX> byte tokens.
#include <queue>

#include "tokenizer_impl.h"
#include "unicode.h"

namespace tokenizers {

namespace {

struct Symbol {
  std::uint32_t start, len;
  std::int32_t prev, next;
};

struct Bigram {
  float score;
  std::int32_t left, right;
  std::uint32_t size;
  bool operator<(const Bigram& o) const {  // priority_queue pops the largest
    return score < o.score || (score == o.score && left > o.left);
  }
};

void encode_segment_uncached(const Tokenizer::Impl& impl, std::string_view text, std::vector<TokenId>& out);

void encode_segment(const Tokenizer::Impl& impl, std::string_view text, std::vector<TokenId>& out) {
  if (text.size() > detail::PieceCache::kMaxPieceBytes) {
    encode_segment_uncached(impl, text, out);
    return;
  }
  detail::PieceCache& cache = detail::PieceCache::for_thread(impl.instance_id);
  if (cache.lookup(text, out)) return;
  const std::size_t first = out.size();
  encode_segment_uncached(impl, text, out);
  cache.store(text, out.data() + first, out.size() - first);
}

void encode_by_score(const Tokenizer::Impl& impl, std::string_view text, std::vector<TokenId>& out);

void encode_segment_uncached(const Tokenizer::Impl& impl, std::string_view text, std::vector<TokenId>& out) {
  if (impl.spm_scores && !impl.spm_scores_as_ranks) {
    encode_by_score(impl, text, out);
  } else {
    impl.encode_char_bpe(text, out);
  }
}

void encode_by_score(const Tokenizer::Impl& impl, std::string_view text, std::vector<TokenId>& out) {
  thread_local std::vector<Symbol> syms;
  syms.clear();
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t len = std::min(unicode::utf8_length(static_cast<unsigned char>(text[pos])), text.size() - pos);
    const auto i = static_cast<std::int32_t>(syms.size());
    syms.push_back({static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(len), i - 1,
                    pos + len < text.size() ? i + 1 : -1});
    pos += len;
  }
  std::priority_queue<Bigram> queue;
  auto try_add = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = syms[static_cast<std::size_t>(left)];
    const Symbol& r = syms[static_cast<std::size_t>(right)];
    const std::string_view joined = text.substr(l.start, l.len + r.len);
    const TokenId* id = impl.text_to_id.find(joined);
    if (id == nullptr) return;
    queue.push({impl.scores[static_cast<std::size_t>(*id)], left, right, l.len + r.len});
  };
  for (std::size_t i = 1; i < syms.size(); ++i) try_add(static_cast<std::int32_t>(i - 1), static_cast<std::int32_t>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = syms[static_cast<std::size_t>(b.left)];
    Symbol& r = syms[static_cast<std::size_t>(b.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<std::size_t>(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (std::int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<std::size_t>(i)].next) {
    const Symbol& s = syms[static_cast<std::size_t>(i)];
    const std::string_view piece = text.substr(s.start, s.len);
    if (const TokenId* id = impl.text_to_id.find(piece)) {
      out.push_back(*id);
      continue;
    }
    for (char ch : piece) {
      const TokenId b = impl.byte_token[static_cast<unsigned char>(ch)];
      if (b >= 0) {
        out.push_back(b);
      } else if (const TokenId* id1 = impl.text_to_id.find(std::string_view(&ch, 1))) {
        out.push_back(*id1);
      } else if (impl.special.unk) {
        out.push_back(*impl.special.unk);
      }
    }
  }
}

}  // namespace

void Tokenizer::Impl::encode_spm(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  if (!spm_split_at_space) {
    encode_segment_uncached(*this, text, out);
    return;
  }
  // No token holds ▁ after another character, so no merge crosses the start of a run of ▁: the segments
  // starting there tokenize independently, with the same result, and the queues stay small.
  const std::string_view space = spm_space;
  const std::size_t w = space.size();
  std::size_t seg = 0;
  for (std::size_t at = text.find(space, 1); at != std::string_view::npos; at = text.find(space, at + 1)) {
    if (at >= w && text.substr(at - w, w) == space) continue;
    if (at > seg) encode_segment(*this, text.substr(seg, at - seg), out);
    seg = at;
  }
  encode_segment(*this, text.substr(seg), out);
}

}  // namespace tokenizers
