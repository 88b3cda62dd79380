// The shared, immutable state behind a Tokenizer, filled by the loaders (load_*.cpp) and read by the
// models (bpe_model.cpp, spm_model.cpp, wordpiece_model.cpp) and tokenizer.cpp.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "normalizer.h"
#include "piece_cache.h"
#include "pre_tokenizer.h"
#include "string_map.h"
#include "tensor/gguf.h"
#include "tokenizers/tokenizer.h"

namespace tokenizers {

struct AddedTokenAttrs {
  bool lstrip = false, rstrip = false, single_word = false;
};

struct Tokenizer::Impl {
  ModelKind kind = ModelKind::kBytePairByteLevel;
  std::string source;    // file name, for messages
  std::string pre_name;  // GGUF tokenizer.ggml.pre or its equivalent

  // Vocabulary: [n_vocab] each.
  std::vector<std::string> texts;  // as stored
  std::vector<std::string> bytes;  // raw bytes produced in the middle of a text
  std::vector<TokenType> types;
  std::vector<float> scores;       // SentencePiece scores (empty when merges rank)
  std::vector<AddedTokenAttrs> attrs;
  detail::StringMap text_to_id;    // stored text -> id

  // BPE (byte-level and character-level): merges by rank over symbol ids. Merge results that are not in
  // the vocabulary get ids from n_vocab up, whose bytes are in extra_bytes.
  detail::MergeMap merges;
  std::vector<std::string> extra_bytes;
  detail::StringMap bytes_to_id;   // byte-level: raw bytes -> id (whole-word lookup)
  std::array<TokenId, 256> byte_token{};  // byte-level: single-byte token; SentencePiece: <0xXX>; -1 none
  bool ignore_merges = false;      // whole pre-token lookup first (Llama 3, tiktoken)
  bool byte_fallback = true;       // character-level: unknown characters become <0xXX>
  bool fuse_unk = true;            // character-level: unknown characters in a row give one <unk>
  bool spm_scores = false;         // SentencePiece: merge by score (llama.cpp) instead of by rank
  bool spm_scores_as_ranks = false;  // the scores were turned into merges by rank (same result, faster)
  bool spm_split_at_space = false; // no token has ▁ after another character: merges never cross "x▁"
  std::string spm_space = "\xE2\x96\x81";  // the space marker in SentencePiece texts (" " in llama2.c)

  // WordPiece.
  detail::StringMap wp_start, wp_cont;  // word-initial pieces and continuation pieces (without ## / ▁)
  std::vector<std::string> wp_keys;     // storage of the keys above
  std::size_t wp_max_piece_bytes = 0;
  std::size_t wp_max_word_chars = 0;    // 0 = no limit (llama.cpp); Hugging Face's default is 100
  bool wp_llama_preprocess = false;     // llama.cpp's preprocessing instead of normalizer + pre

  detail::Normalizer normalizer;
  detail::PreTokenizer pre;

  // Special and added tokens matched in text, longest first.
  std::vector<TokenId> matchable;
  SpecialTokens special;
  bool add_bos = false, add_eos = false;
  bool strip_leading_space = false;  // decode: drop one leading space of the first piece (SentencePiece)

  const std::uint64_t instance_id = detail::next_instance_id();  // keys the per-thread piece caches

  std::size_t n_vocab() const { return texts.size(); }

  // Called by the loaders once texts/types/... are filled: fills bytes, matchable, end_of_generation and
  // checks ids. Throws FormatError.
  void finish();

  // Model steps (one pre-token or fragment each), appending ids.
  void encode_bpe_word(std::string_view word, std::vector<TokenId>& out) const;
  void encode_char_bpe(std::string_view piece, std::vector<TokenId>& out) const;
  void encode_spm(std::string_view text, std::vector<TokenId>& out) const;
  void encode_wordpiece_word(std::string_view word, std::vector<TokenId>& out) const;
  void push_unknown_bytes(std::string_view bytes, std::vector<TokenId>& out) const;
};

// Loaders. Each throws FileError / FormatError.
std::shared_ptr<Tokenizer::Impl> load_gguf(const tensor::gguf::File& file);
std::shared_ptr<Tokenizer::Impl> load_hf_json(const std::string& content, const std::string& name);
std::shared_ptr<Tokenizer::Impl> load_llama2c(const std::string& content, const std::string& name);
std::shared_ptr<Tokenizer::Impl> load_tiktoken_folder(const std::filesystem::path& folder);

namespace detail {
// GPT-2's byte <-> unicode mapping.
const std::array<std::uint32_t, 256>& byte_to_unicode();
// -1 when the code point is not one of the 256.
int unicode_to_byte(std::uint32_t cp);
// "Ġthe" -> " the"; false when a character is not in the mapping.
bool decode_byte_level(std::string_view text, std::string& out);
std::string encode_byte_level(std::string_view bytes);
// Parses "<0xXX>", returns -1 otherwise.
int parse_byte_token(std::string_view text);
// Byte-level BPE: fills impl.bytes (decoded), bytes_to_id, byte_token and merges from `merges` (pairs of
// byte-level texts, in rank order). Texts and types must be final.
void setup_byte_level_bpe(Tokenizer::Impl& impl, const std::vector<std::pair<std::string, std::string>>& merges);
// Character-level BPE with byte fallback (tokenizer.json SentencePiece-style): merges over stored texts.
void setup_char_bpe(Tokenizer::Impl& impl, const std::vector<std::pair<std::string, std::string>>& merges);
// Reads a whole file; throws FileError.
std::string read_file(const std::filesystem::path& path);
}  // namespace detail

}  // namespace tokenizers
