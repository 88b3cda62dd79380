// Text normalization before pre-tokenization: the Hugging Face normalizers (Prepend, Replace, NFC, NFD,
// Lowercase, StripAccents, Strip, BertNormalizer) and the SentencePiece whitespace escaping, as a list of
// steps applied in order to each text fragment between special tokens.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace tokenizers::detail {

struct NormalizerStep {
  enum class Kind : std::uint8_t {
    kPrepend,        // prepend `text` to non-empty input (only the input's first fragment when
                     // first_only; not when the input already starts with `pattern`, if set)
    kReplace,        // every occurrence of `pattern` -> `text`
    kReplaceRegex,   // every match of `regex` -> `text`
    kLowercase, kNfc, kNfd, kStripAccents, kStrip, kBert,
  };
  Kind kind = Kind::kReplace;
  std::string pattern, text;
  std::shared_ptr<const re2::RE2> regex;
  bool first_only = false;         // kPrepend
  bool left = true, right = true;  // kStrip
  // kBert
  bool clean_text = true, handle_chinese_chars = true, strip_accents = true, lowercase = true;
};

class Normalizer {
 public:
  void add(NormalizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  // Whether a step lowercases the text (Lowercase, or a BertNormalizer with lowercase on).
  bool lowercases() const;
  // Normalizes valid UTF-8; `first` says whether the fragment starts the input.
  std::string apply(std::string_view text, bool first) const;

 private:
  std::vector<NormalizerStep> steps_;
};

// llama.cpp's WordPiece preprocessing (unicode_cpts_normalize_nfd first code point, lowercase, split on
// whitespace, punctuation, ASCII symbols and CJK ideographs, drop controls).
std::vector<std::string> wordpiece_words_llama(std::string_view text);

}  // namespace tokenizers::detail
