// Forced text as tokens: how jump-forward and the speculative drafts spell the text a grammar forces.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pse/vocabulary.h"
#include "tokenizers/tokenizer.h"

namespace pie::detail {

// Tokens that spell a prefix of `text`: the tokenizer's own tokenization as far as its tokens spell the
// text byte for byte (SentencePiece's dummy prefix, for one, does not), then the longest vocabulary
// token at each position. The tokenizer sees whole characters only: bytes that finish a character the
// last token began, and a character the text leaves unfinished, are spelled by the longest tokens.
std::vector<std::int32_t> spell(const tokenizers::Tokenizer& tokenizer, const pse::Vocabulary& vocab,
                                const std::string& text);

// The first token of the latest span among the last tokens of `tokens` that spells exactly `text`, or -1:
// how the model spelled that text before, where the grammar forced it and jump-forward left its last
// token to the model (a JSON key's `":"`, which the model may spell `":` then `"`).
std::int32_t earlier_spelling(std::span<const std::int32_t> tokens, const pse::Vocabulary& vocab,
                              const std::string& text);

}  // namespace pie::detail
