// Pre-tokenization: splits text into pieces before the model runs. A PreTokenizer is a sequence of steps,
// each refining the pieces of the previous one, as llama.cpp's unicode_regex_split and Hugging Face's
// pre_tokenizers.Sequence do. Steps are hand-written splitters for the most common patterns (GPT-2,
// Llama 3 / Qwen2), or a general regex (RE2 over a category-collapsed text, with the lookahead
// `\s+(?!\S)` emulated), or a character-class split (punctuation, BERT whitespace + punctuation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tokenizers::detail {

// What happens to the matches of a step (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior : std::uint8_t { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

class RegexStep;

struct PreTokenizerStep {
  enum class Kind : std::uint8_t { kGpt2, kLlama3, kRegex, kPunctuation, kBertSplit, kMetaspaceSplit };
  Kind kind = Kind::kRegex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;          // matches become the gaps and gaps the matches
  int max_digits = 3;           // kLlama3: \p{N}{1,max_digits}
  std::shared_ptr<const RegexStep> regex;  // kRegex
};

// A piece: byte range [begin, end) of the (normalized) text.
struct Piece {
  std::uint32_t begin, end;
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  // Builds the steps of a GGUF tokenizer.ggml.pre name; throws FormatError for an unknown name.
  static PreTokenizer for_gguf_pre(std::string_view pre, std::string_view key_for_errors);
  // One regex step (llama.cpp / Hugging Face syntax); recognises the GPT-2 and Llama 3 patterns and uses
  // the hand-written splitters for them. Throws FormatError naming `where` on an unsupported construct.
  void add_regex(std::string_view pattern, SplitBehavior behavior, bool invert, std::string_view where);
  void add_step(PreTokenizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  const std::vector<PreTokenizerStep>& steps() const { return steps_; }

  // Splits valid UTF-8 `text` into pieces (appended to `out`, cleared first).
  void split(std::string_view text, std::vector<Piece>& out) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

// Compiles a regex for the general path. Throws FormatError naming `where`.
std::shared_ptr<const RegexStep> compile_regex(std::string_view pattern, std::string_view where);
// Appends the match ranges (byte offsets relative to `text`) of the regex in `text`.
void regex_matches(const RegexStep& step, std::string_view text, std::vector<Piece>& out);

// Splitters exposed for tests: each appends the pieces of `text` (offsets relative to text).
void split_gpt2(std::string_view text, std::uint32_t base, std::vector<Piece>& out);
void split_llama3(std::string_view text, std::uint32_t base, int max_digits, std::vector<Piece>& out);

// The regexes of llama.cpp's pre-tokenizer types, as strings (for tests and the general path).
std::vector<std::string> gguf_pre_regexes(std::string_view pre, bool* ok);

extern const char* const kGpt2Regex;
extern const char* const kLlama3Regex;

}  // namespace tokenizers::detail
