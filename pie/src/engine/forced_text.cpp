#include "forced_text.h"

#include <exception>
#include <string_view>

namespace pie::detail {

namespace {

// The longest text token of `vocab` whose bytes start `text`, or -1.
std::int32_t longest_prefix_token(const pse::Vocabulary& vocab, std::string_view text) {
  return vocab.longest_text_prefix(text).value_or(-1);
}

// The length of the longest prefix of text[from..] that ends on a whole UTF-8 character (the forced text
// may stop inside one).
std::size_t whole_characters_end(const std::string& text, std::size_t from) {
  std::size_t end = text.size();
  std::size_t start = end;
  while (start > from && (static_cast<unsigned char>(text[start - 1]) & 0xC0) == 0x80) --start;
  if (start > from) {
    const auto lead = static_cast<unsigned char>(text[start - 1]);
    const std::size_t need = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
    if (end - (start - 1) < need) end = start - 1;
  }
  return end;
}

}  // namespace

// Tokens that spell a prefix of `text`: the tokenizer's own tokenization as far as its tokens spell the
// text byte for byte (SentencePiece's dummy prefix, for one, does not), then the longest vocabulary
// token at each position. The tokenizer sees whole characters only: bytes that finish a character the
// last token began, and a character the text leaves unfinished, are spelled by the longest tokens.
std::vector<std::int32_t> spell(const tokenizers::Tokenizer& tokenizer, const pse::Vocabulary& vocab,
                                const std::string& text) {
  std::vector<std::int32_t> out;
  std::size_t pos = 0;
  while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) {
    const std::int32_t id = longest_prefix_token(vocab, std::string_view(text).substr(pos, 1));
    if (id < 0) return out;
    out.push_back(id);
    pos += 1;
  }
  const std::size_t end = whole_characters_end(text, pos);
  std::vector<std::int32_t> encoded;
  try {
    encoded = tokenizer.encode(text.substr(pos, end - pos));
  } catch (const std::exception&) {
    encoded.clear();  // not valid UTF-8 inside (a grammar may force any bytes): the longest tokens below
  }
  for (const std::int32_t id : encoded) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab.n_tokens() || vocab.is_special(id)) break;
    const std::string& bytes = vocab.token_bytes(id);
    if (bytes.empty() || text.compare(pos, bytes.size(), bytes) != 0) break;
    out.push_back(id);
    pos += bytes.size();
  }
  while (pos < text.size()) {
    const std::int32_t id = longest_prefix_token(vocab, std::string_view(text).substr(pos));
    if (id < 0) break;
    out.push_back(id);
    pos += vocab.token_bytes(id).size();
  }
  return out;
}

// The first token of the latest span among the last tokens of `tokens` that spells exactly `text`, or -1:
// how the model spelled that text before, where the grammar forced it and jump-forward left its last
// token to the model (a JSON key's `":"`, which the model may spell `":` then `"`).
std::int32_t earlier_spelling(std::span<const std::int32_t> tokens, const pse::Vocabulary& vocab,
                              const std::string& text) {
  constexpr std::size_t kWindow = 1024;
  const std::size_t n = tokens.size(), from = n > kWindow ? n - kWindow : 0;
  const auto is_text = [&](std::int32_t t) {
    return t >= 0 && static_cast<std::size_t>(t) < vocab.n_tokens() && !vocab.is_special(t);
  };
  for (std::size_t j = n; j-- > from;) {
    std::size_t pos = 0;
    for (std::size_t t = j; t < n && pos < text.size() && is_text(tokens[t]); ++t) {
      const std::string& bytes = vocab.token_bytes(tokens[t]);
      if (bytes.empty() || bytes.size() > text.size() - pos || text.compare(pos, bytes.size(), bytes) != 0) break;
      pos += bytes.size();
    }
    if (pos == text.size() && !text.empty()) return tokens[j];
  }
  return -1;
}

}  // namespace pie::detail
