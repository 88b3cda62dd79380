// WordPiece: greedy longest match first, word-initial pieces then continuation pieces; a word that cannot
// be split (or is longer than the limit) is one [UNK].
#include "tokenizer_impl.h"
#include "unicode.h"

namespace tokenizers {

void Tokenizer::Impl::encode_wordpiece_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  auto unk = [&] {
    if (special.unk) out.push_back(*special.unk);
  };
  if (wp_max_word_chars > 0) {
    std::size_t n_chars = 0;
    for (char c : word) n_chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    if (n_chars > wp_max_word_chars) {
      unk();
      return;
    }
  }
  const std::size_t first = out.size();
  std::size_t i = 0;
  bool initial = true;
  while (i < word.size()) {
    const detail::StringMap& map = initial ? wp_start : wp_cont;
    bool found = false;
    for (std::size_t j = std::min(word.size(), i + wp_max_piece_bytes); j > i; --j) {
      if (const TokenId* id = map.find(word.substr(i, j - i))) {
        out.push_back(*id);
        i = j;
        found = true;
        break;
      }
    }
    if (!found) {
      out.resize(first);
      unk();
      return;
    }
    initial = false;
  }
}

}  // namespace tokenizers
