// Adapter: a tokenizers::Tokenizer's vocabulary as the plain pse::Vocabulary the grammar engine compiles
// against (pse itself never links the tokenizers layer).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "pse/vocabulary.h"
#include "tokenizers/tokenizer.h"

namespace pie {

// token id -> the bytes it produces in the middle of a text; special tokens (is_special) are never text
// (their text is their name, for grammars that read them as whole tokens: `<|python_tag|>`), except
// those whose stored text is listed in `text_specials` (tool-call markers a grammar may require as text:
// they become text tokens with that text); end of sequence: special_tokens().end_of_generation (and eos).
// n_rows: the model's logits rows, 0 for the tokenizer's size. Throws pse::InputError when n_rows is
// smaller than the vocabulary, pie::RequestError (param "grammar_special_tokens") when a listed text is
// not a special token of the tokenizer.
std::shared_ptr<const pse::Vocabulary> grammar_vocabulary(const tokenizers::Tokenizer& tokenizer,
                                                          std::size_t n_rows = 0,
                                                          const std::vector<std::string>& text_specials = {});

}  // namespace pie
