// The Python-side holders of a pse::Vocabulary and a tokenizers::Tokenizer, shared by the grammar and
// engine bindings.
#pragma once

#include <memory>

#include "pse/vocabulary.h"
#include "tokenizers/tokenizer.h"

namespace orchard::python {

// orchard._orchard.Vocabulary: what a grammar compiles against (token id -> bytes, specials, stop ids,
// logits rows). Immutable, shared by every grammar compiled against it.
struct PyVocabulary {
  std::shared_ptr<const pse::Vocabulary> vocab;
};

// orchard._orchard.Tokenizer: text <-> ids (a model's, or one loaded from a file).
struct PyTokenizer {
  std::shared_ptr<const tokenizers::Tokenizer> tokenizer;
};

}  // namespace orchard::python
