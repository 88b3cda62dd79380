// Text <-> token ids, exactly as the models were trained. Byte-level BPE (GPT-2, Llama 3, Qwen2, ...),
// SentencePiece-style BPE (Llama 2, Mistral, Phi-3, llama2.c) and WordPiece (BERT).
// A Tokenizer is immutable after load and safe to share across threads (copies share one state).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizers/error.h"

namespace tokenizers {

using TokenId = std::int32_t;

// Token types, numbered as GGUF's tokenizer.ggml.token_type (and llama.cpp's llama_token_type).
enum class TokenType : std::uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special tokens: BOS, EOS, <|eot_id|>, ...
  kUserDefined = 4,  // added tokens matched in text before the model runs
  kUnused = 5,
  kByte = 6,         // SentencePiece byte fallback <0xXX>
};

enum class ModelKind : std::uint8_t { kBytePairByteLevel, kSentencePiece, kWordPiece };

// Bytes [begin, end) of a text.
struct TextRange {
  std::size_t begin = 0, end = 0;
};

struct EncodeOptions {
  // Prepend BOS / append EOS (only when the tokenizer has them). Callers that want the model's own default
  // use Tokenizer::add_bos_by_default().
  bool add_bos = false;
  bool add_eos = false;
  // When true, special-token text in the input ("<|eot_id|>") becomes the special token; when false
  // (default) it is plain text, as llama.cpp's parse_special=false. User-defined (non-special added)
  // tokens are matched either way, as llama.cpp and Hugging Face do.
  bool parse_special = false;
  // With parse_special: ranges of the text (sorted, disjoint) whose special-token text is plain text all
  // the same (no special token overlapping one is matched), e.g. the parts of a rendered chat prompt
  // that came from users, while the template's markup around them becomes control tokens.
  std::span<const TextRange> plain_text = {};
};

struct DecodeOptions {
  // Drop control tokens (BOS, EOS, ...) from the output instead of writing their text.
  bool skip_special = false;
};

// Ids of the tokens with a role; absent when the vocabulary has none.
struct SpecialTokens {
  std::optional<TokenId> bos, eos, eot, unk, pad, sep, cls, mask;
  // Every id that ends generation (eos, eot, <|eom_id|>, <|im_end|>, ...), sorted, no duplicates.
  std::vector<TokenId> end_of_generation;
};

class Tokenizer {
 public:
  // Loads any supported kind, recognised from the content: a .gguf (vocab-only or full model), a
  // Hugging Face tokenizer.json, a llama2.c tokenizer .bin, or a folder holding encoder.json + vocab.bpe
  // (Llama 3 rules and its 256 special tokens) or tokenizer.json. Throws FileError / FormatError.
  static Tokenizer load(const std::filesystem::path& path);
  // Same as load, from a file image in memory (GGUF, tokenizer.json text or llama2.c tokenizer.bin);
  // `name` appears in error messages. Throws FileError (no recognised kind) / FormatError.
  static Tokenizer parse(std::span<const std::uint8_t> bytes, const std::string& name = "<memory>");

  // Encodes UTF-8 text. Throws InputError when `text` is not valid UTF-8 (naming the byte offset).
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Decodes ids to the raw bytes they stand for (which may be invalid UTF-8 when a character is split
  // across ids); applies the SentencePiece leading-space rule once, at the start. Throws InputError on an
  // id outside [0, vocab_size()).
  std::string decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;

  std::size_t vocab_size() const;
  ModelKind model_kind() const;
  // The token as stored in the vocabulary ("Ġthe", "▁the", "<0x0A>", "##ing", "<|eot_id|>").
  const std::string& token_text(TokenId id) const;
  // The raw bytes the token produces in the middle of a text ("Ġthe" -> " the", "<0x0A>" -> "\n");
  // control tokens give their text. Throws InputError on a bad id.
  const std::string& token_bytes(TokenId id) const;
  TokenType token_type(TokenId id) const;
  // Control or user-defined special token (never produced by plain text when parse_special is false).
  bool is_special(TokenId id) const;
  // The id of a token by its stored text, when present.
  std::optional<TokenId> find(std::string_view token_text) const;
  const SpecialTokens& special_tokens() const;
  bool add_bos_by_default() const;
  bool add_eos_by_default() const;
  // The GGUF tokenizer.ggml.pre name (or the closest equivalent for other sources): "llama-bpe", "gpt-2".
  const std::string& pre_tokenizer_name() const;
  // Whether decoding drops one leading space of the first non-control piece (the SentencePiece dummy
  // prefix, WordPiece's word-initial space).
  bool strips_leading_space() const;

  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  // The internals, for the tokenizers layer's own code (gguf_export.cpp); Impl is private to src/.
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

// Turns a stream of ids into text without ever emitting part of a UTF-8 character: bytes of an
// incomplete character are held back until the ids that complete it arrive. One per sequence.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(Tokenizer tokenizer, DecodeOptions options = {});
  // Returns the newly complete text (possibly empty). Throws InputError on a bad id.
  std::string push(TokenId id);
  // Flushes what is held back: invalid trailing bytes become U+FFFD.
  std::string finish();

 private:
  Tokenizer tokenizer_;
  DecodeOptions options_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace tokenizers
