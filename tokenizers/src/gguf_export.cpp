// Tokenizer -> GGUF tokenizer.ggml.* metadata (the inverse of load_gguf.cpp).
#include "tokenizers/gguf_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tokenizer_impl.h"

namespace tokenizers {

namespace {

constexpr std::string_view kSpm = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    if (text.substr(at, from.size()) == from) {
      out.append(to);
      at += from.size();
    } else {
      out.push_back(text[at++]);
    }
  }
  return out;
}

// The text of a merge symbol: a vocabulary token, or a merge result the vocabulary lacks (extra_bytes
// holds its raw bytes).
std::string symbol_text(const Tokenizer::Impl& impl, TokenId id, bool byte_level) {
  const auto n = static_cast<TokenId>(impl.n_vocab());
  if (id < n) return impl.texts[static_cast<std::size_t>(id)];
  const std::string& raw = impl.extra_bytes.at(static_cast<std::size_t>(id - n));
  return byte_level ? detail::encode_byte_level(raw) : replace_all(raw, " ", kSpm);
}

// Merges in rank order: (rank, left text, right text).
std::vector<std::pair<std::string, std::string>> ranked_merges(const Tokenizer::Impl& impl, bool byte_level) {
  std::vector<std::tuple<std::uint32_t, TokenId, TokenId>> entries;
  entries.reserve(impl.merges.size());
  impl.merges.for_each([&](TokenId left, TokenId right, const detail::MergeMap::Entry& e) {
    entries.emplace_back(e.rank, left, right);
  });
  std::sort(entries.begin(), entries.end());
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(entries.size());
  for (const auto& [rank, left, right] : entries) {
    out.emplace_back(symbol_text(impl, left, byte_level), symbol_text(impl, right, byte_level));
  }
  return out;
}

void set_id(tensor::gguf::Writer& w, const char* key, const std::optional<TokenId>& id) {
  if (id) w.set(key, tensor::gguf::make_uint32(static_cast<std::uint32_t>(*id)));
}

// WordPiece as llama.cpp's "bert" vocabulary (convert_hf_to_gguf.py's phantom-space form): a word-initial
// piece gets U+2581 in front, a continuation piece loses its "##", bracketed tokens ([CLS], [unused0]) stay
// as they are. llama.cpp lowercases every text it tokenizes this way, so a cased vocabulary is refused.
void add_wordpiece_metadata(const Tokenizer::Impl& impl, tensor::gguf::Writer& w, std::size_t n_vocab) {
  if (!impl.wp_llama_preprocess && !impl.normalizer.lowercases()) {
    throw InputError(fmt::format("[tokenizer] {}: a cased WordPiece vocabulary cannot be exported to GGUF "
                                 "(llama.cpp's bert tokenizer lowercases every text)",
                                 impl.source));
  }
  const std::size_t n = impl.n_vocab();
  std::vector<tensor::gguf::Value> tokens, types;
  tokens.reserve(n_vocab);
  types.reserve(n_vocab);
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& text = impl.texts[i];
    const std::string& key = impl.wp_keys[i];
    const auto id = static_cast<TokenId>(i);
    std::string out = text;
    const bool bracketed = text.size() >= 2 && text.front() == '[' && text.back() == ']';
    if (!bracketed && impl.types[i] == TokenType::kNormal && !key.empty()) {
      const TokenId* start = impl.wp_start.find(key);
      const TokenId* cont = impl.wp_cont.find(key);
      if (start != nullptr && *start == id) {
        out = std::string(kSpm) + key;
      } else if (cont != nullptr && *cont == id) {
        out = key;
      }
    }
    tokens.push_back(tensor::gguf::make_string(std::move(out)));
    types.push_back(tensor::gguf::make_int32(static_cast<std::int32_t>(impl.types[i])));
  }
  for (std::size_t i = n; i < n_vocab; ++i) {
    tokens.push_back(tensor::gguf::make_string(fmt::format("[PAD{}]", i)));
    types.push_back(tensor::gguf::make_int32(static_cast<std::int32_t>(TokenType::kUnused)));
  }
  w.set("tokenizer.ggml.model", tensor::gguf::make_string("bert"));
  w.set("tokenizer.ggml.pre", tensor::gguf::make_string("default"));
  w.set("tokenizer.ggml.tokens", tensor::gguf::make_array(tensor::gguf::ValueType::kString, std::move(tokens)));
  w.set("tokenizer.ggml.token_type", tensor::gguf::make_array(tensor::gguf::ValueType::kInt32, std::move(types)));
  const SpecialTokens& sp = impl.special;
  set_id(w, "tokenizer.ggml.unknown_token_id", sp.unk);
  set_id(w, "tokenizer.ggml.seperator_token_id", sp.sep ? sp.sep : sp.eos);  // llama.cpp's spelling
  set_id(w, "tokenizer.ggml.padding_token_id", sp.pad);
  set_id(w, "tokenizer.ggml.cls_token_id", sp.cls ? sp.cls : sp.bos);
  set_id(w, "tokenizer.ggml.mask_token_id", sp.mask);
  w.set("tokenizer.ggml.add_bos_token", tensor::gguf::make_bool(impl.add_bos));
  w.set("tokenizer.ggml.add_eos_token", tensor::gguf::make_bool(impl.add_eos));
}

}  // namespace

void add_gguf_metadata(const Tokenizer& tokenizer, tensor::gguf::Writer& writer, std::size_t n_vocab) {
  const Tokenizer::Impl& impl = tokenizer.impl();
  const std::size_t n = impl.n_vocab();
  if (n_vocab == 0) n_vocab = n;
  if (n_vocab < n) {
    throw InputError(fmt::format("[tokenizer] {}: the vocabulary has {} tokens, more than the model's {} rows",
                                 impl.source, n, n_vocab));
  }
  if (impl.kind == ModelKind::kWordPiece) {
    tensor::gguf::Writer w = writer;  // all or nothing
    add_wordpiece_metadata(impl, w, n_vocab);
    writer = std::move(w);
    return;
  }
  const bool spm = impl.kind == ModelKind::kSentencePiece;

  std::vector<tensor::gguf::Value> tokens, scores, types;
  tokens.reserve(n_vocab);
  types.reserve(n_vocab);
  if (spm) scores.reserve(n_vocab);

  // SentencePiece scores: the tokenizer's own when it merges by score; ranks of the merge producing
  // each token otherwise (a Hugging Face BPE with byte fallback), higher rank = lower score, so that
  // llama.cpp's best-score-first merging follows the merge order.
  std::vector<float> spm_score;
  if (spm) {
    if (impl.spm_scores) {
      spm_score = impl.scores;
    } else {
      const auto n_merges = static_cast<float>(impl.merges.size());
      spm_score.assign(n, 0.0f);
      for (std::size_t i = 0; i < n; ++i) spm_score[i] = -n_merges - static_cast<float>(i);
      impl.merges.for_each([&](TokenId, TokenId, const detail::MergeMap::Entry& e) {
        if (e.result >= 0 && static_cast<std::size_t>(e.result) < n) {
          float& s = spm_score[static_cast<std::size_t>(e.result)];
          s = std::max(s, -static_cast<float>(e.rank));
        }
      });
    }
  }

  for (std::size_t i = 0; i < n; ++i) {
    std::string text = impl.texts[i];
    if (spm && impl.spm_space != kSpm) text = replace_all(text, impl.spm_space, kSpm);  // llama2.c: ' '
    TokenType type = impl.types[i];
    if (spm && detail::parse_byte_token(text) >= 0 && type == TokenType::kNormal) type = TokenType::kByte;
    tokens.push_back(tensor::gguf::make_string(std::move(text)));
    types.push_back(tensor::gguf::make_int32(static_cast<std::int32_t>(type)));
    if (spm) scores.push_back(tensor::gguf::make_float32(spm_score[i]));
  }
  for (std::size_t i = n; i < n_vocab; ++i) {
    tokens.push_back(tensor::gguf::make_string(fmt::format("[PAD{}]", i)));
    types.push_back(tensor::gguf::make_int32(static_cast<std::int32_t>(TokenType::kUnused)));
    if (spm) scores.push_back(tensor::gguf::make_float32(-1e9f));
  }

  tensor::gguf::Writer w = writer;  // all or nothing
  w.set("tokenizer.ggml.model", tensor::gguf::make_string(spm ? "llama" : "gpt2"));
  w.set("tokenizer.ggml.pre", tensor::gguf::make_string(spm ? "default" : impl.pre_name));
  w.set("tokenizer.ggml.tokens", tensor::gguf::make_array(tensor::gguf::ValueType::kString, std::move(tokens)));
  if (spm) w.set("tokenizer.ggml.scores", tensor::gguf::make_array(tensor::gguf::ValueType::kFloat32, std::move(scores)));
  w.set("tokenizer.ggml.token_type", tensor::gguf::make_array(tensor::gguf::ValueType::kInt32, std::move(types)));
  if (!spm) {
    std::vector<tensor::gguf::Value> merges;
    for (auto& [a, b] : ranked_merges(impl, true)) merges.push_back(tensor::gguf::make_string(a + " " + b));
    w.set("tokenizer.ggml.merges", tensor::gguf::make_array(tensor::gguf::ValueType::kString, std::move(merges)));
  }
  const SpecialTokens& sp = impl.special;
  set_id(w, "tokenizer.ggml.bos_token_id", sp.bos);
  set_id(w, "tokenizer.ggml.eos_token_id", sp.eos);
  set_id(w, "tokenizer.ggml.unknown_token_id", sp.unk);
  set_id(w, "tokenizer.ggml.padding_token_id", sp.pad);
  set_id(w, "tokenizer.ggml.eot_token_id", sp.eot);
  w.set("tokenizer.ggml.add_bos_token", tensor::gguf::make_bool(impl.add_bos));
  w.set("tokenizer.ggml.add_eos_token", tensor::gguf::make_bool(impl.add_eos));
  if (spm) w.set("tokenizer.ggml.add_space_prefix", tensor::gguf::make_bool(impl.strip_leading_space));
  writer = std::move(w);
}

}  // namespace tokenizers
