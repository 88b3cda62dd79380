// Tokenizer: load dispatch, special-token partitioning, encode / decode, streaming detokenization.
#include "tokenizers/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>

#include "tokenizer_impl.h"
#include "tensor/error.h"
#include "tensor/gguf.h"
#include "unicode.h"

namespace tokenizers {

// ---------------------------------------------------------------------------------------------------
// Impl::finish

void Tokenizer::Impl::finish() {
  const std::size_t n = texts.size();
  if (n == 0) throw FormatError(fmt::format("[tokenizer] {}: the vocabulary is empty", source));
  if (n > 0x7FFFFFF0) throw FormatError(fmt::format("[tokenizer] {}: vocabulary of {} tokens is too large", source, n));
  if (types.empty()) types.assign(n, TokenType::kNormal);
  if (types.size() != n) {
    throw FormatError(fmt::format("[tokenizer] {}: {} token types for {} tokens", source, types.size(), n));
  }
  if (scores.empty()) scores.assign(n, 0.0f);
  if (scores.size() != n) {
    throw FormatError(fmt::format("[tokenizer] {}: {} scores for {} tokens", source, scores.size(), n));
  }
  attrs.resize(n);
  for (std::size_t i = 0; i < n; ++i) text_to_id.insert(texts[i], static_cast<TokenId>(i));
  if (kind == ModelKind::kSentencePiece) {
    byte_token.fill(-1);
    for (std::size_t i = 0; i < n; ++i) {
      const int b = detail::parse_byte_token(texts[i]);
      if (b >= 0 && (types[i] == TokenType::kByte || types[i] == TokenType::kNormal ||
                     types[i] == TokenType::kUndefined)) {
        if (byte_token[static_cast<std::size_t>(b)] < 0) byte_token[static_cast<std::size_t>(b)] = static_cast<TokenId>(i);
        types[i] = TokenType::kByte;
      }
    }
    // Merging by score is merging by rank with ranks in descending score order, when every character of
    // every token is itself a token (so unknown characters never merge) and every byte has a <0xXX>
    // token: the pairs (a, b) whose concatenation is a token become merges by id, without string lookups.
    if (spm_scores && merges.size() == 0) {
      bool ok = std::all_of(byte_token.begin(), byte_token.end(), [](TokenId t) { return t >= 0; });
      for (std::size_t i = 0; i < n && ok; ++i) {
        const std::string& t = texts[i];
        if (t.size() > 1024 || unicode::find_invalid_utf8(t) != std::string_view::npos) {
          ok = false;
          break;
        }
        const std::size_t first_len = t.empty() ? 0 : unicode::utf8_length(static_cast<unsigned char>(t[0]));
        if (first_len >= t.size()) continue;  // one character
        for (std::size_t at = 0; at < t.size();) {
          const std::size_t len = unicode::utf8_length(static_cast<unsigned char>(t[at]));
          if (text_to_id.find(std::string_view(t).substr(at, len)) == nullptr) {
            ok = false;
            break;
          }
          at += len;
        }
      }
      if (ok) {
        std::vector<float> order(scores);
        std::sort(order.begin(), order.end(), std::greater<>());
        order.erase(std::unique(order.begin(), order.end()), order.end());
        struct Cand {
          std::uint32_t rank;
          TokenId a, b, result;
        };
        std::vector<Cand> cands;
        for (std::size_t i = 0; i < n; ++i) {
          const std::string_view t = texts[i];
          const TokenId* self = text_to_id.find(t);
          if (self == nullptr || *self != static_cast<TokenId>(i)) continue;  // a duplicate text
          const auto rank = static_cast<std::uint32_t>(
              std::lower_bound(order.begin(), order.end(), scores[i], std::greater<>()) - order.begin());
          for (std::size_t k = unicode::utf8_length(static_cast<unsigned char>(t[0])); k < t.size();
               k += unicode::utf8_length(static_cast<unsigned char>(t[k]))) {
            const TokenId* a = text_to_id.find(t.substr(0, k));
            const TokenId* b = text_to_id.find(t.substr(k));
            if (a && b) cands.push_back({rank, *a, *b, static_cast<TokenId>(i)});
          }
        }
        for (const Cand& c : cands) merges.insert(c.a, c.b, c.rank, c.result);
        spm_scores_as_ranks = true;
        byte_fallback = true;
      }
    }
    // Merges never cross the start of a ▁ run when no token holds ▁ right after another character.
    const std::string_view space = spm_space;
    const std::size_t w = space.size();
    spm_split_at_space = !space.empty() && extra_bytes.empty() && !ignore_merges;
    for (std::size_t i = 0; i < n && spm_split_at_space; ++i) {
      const std::string& t = texts[i];
      for (std::size_t at = t.find(space, 1); at != std::string::npos; at = t.find(space, at + 1)) {
        if (!(at >= w && std::string_view(t).substr(at - w, w) == space)) {
          spm_split_at_space = false;
          break;
        }
      }
    }
  }
  if (bytes.empty()) {
    bytes.resize(n);
    std::string decoded;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& t = texts[i];
      const TokenType ty = types[i];
      if (ty == TokenType::kControl || ty == TokenType::kUserDefined || ty == TokenType::kUnknown) {
        bytes[i] = t;
        continue;
      }
      switch (kind) {
        case ModelKind::kBytePairByteLevel:
          bytes[i] = detail::decode_byte_level(t, decoded) ? decoded : t;
          break;
        case ModelKind::kSentencePiece: {
          if (ty == TokenType::kByte) {
            bytes[i] = std::string(1, static_cast<char>(detail::parse_byte_token(t)));
            break;
          }
          std::string s;
          for (std::size_t at = 0; at < t.size();) {
            if (!spm_space.empty() && t.compare(at, spm_space.size(), spm_space) == 0) {
              s.push_back(' ');
              at += spm_space.size();
            } else {
              s.push_back(t[at++]);
            }
          }
          bytes[i] = std::move(s);
          break;
        }
        case ModelKind::kWordPiece:
          bytes[i] = t;
          break;
      }
    }
  }
  // Special-token ids must be in range.
  auto check = [&](const std::optional<TokenId>& id, const char* what) {
    if (id && (*id < 0 || static_cast<std::size_t>(*id) >= n)) {
      throw FormatError(fmt::format("[tokenizer] {}: {} token id {} is outside the vocabulary of {}", source, what, *id, n));
    }
  };
  check(special.bos, "bos");
  check(special.eos, "eos");
  check(special.eot, "eot");
  check(special.unk, "unk");
  check(special.pad, "pad");
  check(special.sep, "sep");
  check(special.cls, "cls");
  check(special.mask, "mask");
  for (TokenId id : special.end_of_generation) check(std::optional<TokenId>(id), "end-of-generation");
  if (add_bos && !special.bos) add_bos = false;
  if (add_eos && !special.eos) add_eos = false;
  // End of generation: eos, eot, and the end-of-turn tokens of the common chat formats.
  auto& eog = special.end_of_generation;
  if (special.eos) eog.push_back(*special.eos);
  if (special.eot) eog.push_back(*special.eot);
  static const char* const kEogTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "<|eom_id|>", "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>",
                                          "<|end_of_text|>", "<end_of_utterance>", "<|return|>", "<|call|>"};
  const auto special_id = [&](const char* t) -> std::optional<TokenId> {
    const TokenId* id = text_to_id.find(t);
    if (id == nullptr) return std::nullopt;
    const TokenType ty = types[static_cast<std::size_t>(*id)];
    if (ty != TokenType::kControl && ty != TokenType::kUserDefined) return std::nullopt;
    return *id;
  };
  for (const char* t : kEogTexts) {
    if (const auto id = special_id(t)) eog.push_back(*id);
  }
  // As llama.cpp: the fill-in-the-middle padding, repository and file separators (the first of each
  // family's spellings) also end generation; a code model that writes one has left the file it was in.
  static const std::vector<std::vector<const char*>> kFimEogTexts = {
      {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"},
      {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
      {"<|file_sep|>"}};
  for (const auto& family : kFimEogTexts) {
    for (const char* t : family) {
      if (const auto id = special_id(t)) {
        eog.push_back(*id);
        break;
      }
    }
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  if (!special.eot) {
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<EOT>"}) {
      if (const TokenId* id = text_to_id.find(t); id && types[static_cast<std::size_t>(*id)] == TokenType::kControl) {
        special.eot = *id;
        break;
      }
    }
  }
  // Tokens matched in text before the model runs, longest first.
  matchable.clear();
  for (std::size_t i = 0; i < n; ++i) {
    const TokenType ty = types[i];
    if ((ty == TokenType::kControl || ty == TokenType::kUserDefined || ty == TokenType::kUnknown) && !texts[i].empty()) {
      matchable.push_back(static_cast<TokenId>(i));
    }
  }
  std::stable_sort(matchable.begin(), matchable.end(), [&](TokenId a, TokenId b) {
    return texts[static_cast<std::size_t>(a)].size() > texts[static_cast<std::size_t>(b)].size();
  });
}

// ---------------------------------------------------------------------------------------------------
// Loading

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

namespace {

// The GGUF container belongs to the tensor layer; its errors become this layer's, message unchanged, so a
// caller of the tokenizer API sees only tokenizers::Error.
template <class OpenFile>
std::shared_ptr<Tokenizer::Impl> load_gguf_translating(OpenFile open_file) {
  try {
    return load_gguf(open_file());
  } catch (const tensor::IoError& e) {
    throw FileError(e.what());
  } catch (const tensor::Error& e) {
    throw FormatError(e.what());
  }
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::is_regular_file(path / "tokenizer.json", ec)) {
      return Tokenizer(load_hf_json(detail::read_file(path / "tokenizer.json"), (path / "tokenizer.json").string()));
    }
    if (std::filesystem::is_regular_file(path / "encoder.json", ec) && std::filesystem::is_regular_file(path / "vocab.bpe", ec)) {
      return Tokenizer(load_tiktoken_folder(path));
    }
    throw FileError(fmt::format("[tokenizer] {}: folder holds neither tokenizer.json nor encoder.json + vocab.bpe",
                                path.string()));
  }
  if (!std::filesystem::exists(path, ec)) throw FileError(fmt::format("[tokenizer] {}: no such file", path.string()));
  std::string head;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(fmt::format("[tokenizer] {}: cannot open for reading", path.string()));
    head.resize(4);
    in.read(head.data(), 4);
    head.resize(static_cast<std::size_t>(in.gcount()));
  }
  if (head == "GGUF") return Tokenizer(load_gguf_translating([&] { return tensor::gguf::File::open(path); }));
  const std::string content = detail::read_file(path);
  const std::size_t first = content.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && content[first] == '{') return Tokenizer(load_hf_json(content, path.string()));
  return Tokenizer(load_llama2c(content, path.string()));
}

Tokenizer Tokenizer::parse(std::span<const std::uint8_t> bytes, const std::string& name) {
  const std::string_view view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (view.starts_with("GGUF")) {
    return Tokenizer(load_gguf_translating([&] { return tensor::gguf::File::parse(bytes, name); }));
  }
  const std::size_t first = view.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && view[first] == '{') return Tokenizer(load_hf_json(std::string(view), name));
  return Tokenizer(load_llama2c(std::string(view), name));
}

// ---------------------------------------------------------------------------------------------------
// Encoding

namespace {

struct Fragment {
  bool is_token;
  TokenId id;
  std::uint32_t begin, end;  // raw text range
};

bool is_word_byte(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }
bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Whether [begin, end) meets one of the sorted, disjoint `ranges`.
bool meets(std::span<const TextRange> ranges, std::size_t begin, std::size_t end) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                             [](std::size_t b, const TextRange& r) { return b < r.end; });
  return it != ranges.end() && it->begin < end;
}

void partition(const Tokenizer::Impl& impl, std::string_view text, bool parse_special,
               std::span<const TextRange> plain_text, std::vector<Fragment>& frags) {
  frags.clear();
  frags.push_back({false, -1, 0, static_cast<std::uint32_t>(text.size())});
  std::vector<Fragment> next;
  for (TokenId id : impl.matchable) {
    const TokenType ty = impl.types[static_cast<std::size_t>(id)];
    if (!parse_special && ty != TokenType::kUserDefined) continue;
    const std::string& tok = impl.texts[static_cast<std::size_t>(id)];
    if (text.find(tok) == std::string_view::npos) continue;
    const AddedTokenAttrs& attr = impl.attrs[static_cast<std::size_t>(id)];
    next.clear();
    for (const Fragment& f : frags) {
      if (f.is_token) {
        next.push_back(f);
        continue;
      }
      std::uint32_t at = f.begin;
      std::uint32_t search = f.begin;
      while (true) {
        const std::string_view region = text.substr(search, f.end - search);
        const std::size_t hit = region.find(tok);
        if (hit == std::string_view::npos) break;
        std::uint32_t mb = search + static_cast<std::uint32_t>(hit);
        std::uint32_t me = mb + static_cast<std::uint32_t>(tok.size());
        if (attr.single_word && ((mb > f.begin && is_word_byte(static_cast<unsigned char>(text[mb - 1]))) ||
                                 (me < f.end && is_word_byte(static_cast<unsigned char>(text[me]))))) {
          search = mb + 1;
          continue;
        }
        if (ty != TokenType::kUserDefined && meets(plain_text, mb, me)) {
          search = mb + 1;  // special-token text inside plain text: read as text
          continue;
        }
        std::uint32_t left_end = mb;
        if (attr.lstrip) {
          while (left_end > at && is_space_byte(text[left_end - 1])) --left_end;
        }
        if (left_end > at) next.push_back({false, -1, at, left_end});
        next.push_back({true, id, mb, me});
        if (attr.rstrip) {
          while (me < f.end && is_space_byte(text[me])) ++me;
        }
        at = search = me;
      }
      if (at < f.end) next.push_back({false, -1, at, f.end});
    }
    frags.swap(next);
  }
}

}  // namespace

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& impl = *impl_;
  if (const std::size_t bad = unicode::find_invalid_utf8(text); bad != std::string_view::npos) {
    throw InputError(fmt::format("[tokenizer] encode: invalid UTF-8 at byte offset {} (byte 0x{:02X})", bad,
                                 static_cast<unsigned char>(text[bad])));
  }
  if (text.size() > 0xFFFFFFF0u) throw InputError(fmt::format("[tokenizer] encode: text of {} bytes is too long", text.size()));
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  if (options.add_bos && impl.special.bos) out.push_back(*impl.special.bos);
  thread_local std::vector<Fragment> frags;
  thread_local std::vector<detail::Piece> pieces;
  if (!options.plain_text.empty()) {
    for (std::size_t i = 0; i < options.plain_text.size(); ++i) {
      const TextRange& r = options.plain_text[i];
      if (r.begin > r.end || r.end > text.size() || (i > 0 && options.plain_text[i - 1].end > r.begin)) {
        throw InputError(fmt::format("[tokenizer] encode: plain_text[{}] = [{}, {}) is not a sorted range of the "
                                     "{}-byte text",
                                     i, r.begin, r.end, text.size()));
      }
    }
  }
  partition(impl, text, options.parse_special, options.plain_text, frags);
  bool first = true;
  for (const Fragment& f : frags) {
    if (f.is_token) {
      out.push_back(f.id);
      first = false;
      continue;
    }
    const std::string_view raw = text.substr(f.begin, f.end - f.begin);
    if (impl.kind == ModelKind::kWordPiece && impl.wp_llama_preprocess) {
      for (const std::string& w : detail::wordpiece_words_llama(raw)) impl.encode_wordpiece_word(w, out);
      first = false;
      continue;
    }
    std::string normalized;
    std::string_view norm = raw;
    if (!impl.normalizer.empty()) {
      normalized = impl.normalizer.apply(raw, first);
      norm = normalized;
    }
    first = false;
    if (impl.pre.empty()) {
      pieces.assign(1, {0, static_cast<std::uint32_t>(norm.size())});
    } else {
      impl.pre.split(norm, pieces);
    }
    for (const detail::Piece& p : pieces) {
      const std::string_view piece = norm.substr(p.begin, p.end - p.begin);
      switch (impl.kind) {
        case ModelKind::kBytePairByteLevel:
          impl.encode_bpe_word(piece, out);
          break;
        case ModelKind::kSentencePiece:
          impl.encode_spm(piece, out);
          break;
        case ModelKind::kWordPiece:
          impl.encode_wordpiece_word(piece, out);
          break;
      }
    }
  }
  if (options.add_eos && impl.special.eos) out.push_back(*impl.special.eos);
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Decoding and accessors

namespace {

void check_id(const Tokenizer::Impl& impl, TokenId id, const char* op) {
  if (id < 0 || static_cast<std::size_t>(id) >= impl.n_vocab()) {
    throw InputError(fmt::format("[tokenizer] {}: token id {} is outside [0, {})", op, id, impl.n_vocab()));
  }
}

}  // namespace

std::string Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
  const Impl& impl = *impl_;
  std::string out;
  bool first = true;
  for (TokenId id : ids) {
    check_id(impl, id, "decode");
    const TokenType ty = impl.types[static_cast<std::size_t>(id)];
    if (options.skip_special && ty == TokenType::kControl) continue;
    std::string_view piece = impl.bytes[static_cast<std::size_t>(id)];
    if (first && ty != TokenType::kControl) {
      if (impl.strip_leading_space && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
      first = false;
    }
    out.append(piece);
  }
  return out;
}

std::size_t Tokenizer::vocab_size() const { return impl_->n_vocab(); }
ModelKind Tokenizer::model_kind() const { return impl_->kind; }

const std::string& Tokenizer::token_text(TokenId id) const {
  check_id(*impl_, id, "token_text");
  return impl_->texts[static_cast<std::size_t>(id)];
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
  check_id(*impl_, id, "token_bytes");
  return impl_->bytes[static_cast<std::size_t>(id)];
}

TokenType Tokenizer::token_type(TokenId id) const {
  check_id(*impl_, id, "token_type");
  return impl_->types[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(TokenId id) const {
  const TokenType ty = token_type(id);
  return ty == TokenType::kControl || ty == TokenType::kUserDefined;
}

std::optional<TokenId> Tokenizer::find(std::string_view text) const {
  if (const TokenId* id = impl_->text_to_id.find(text)) return *id;
  return std::nullopt;
}

const SpecialTokens& Tokenizer::special_tokens() const { return impl_->special; }
bool Tokenizer::add_bos_by_default() const { return impl_->add_bos; }
bool Tokenizer::add_eos_by_default() const { return impl_->add_eos; }
const std::string& Tokenizer::pre_tokenizer_name() const { return impl_->pre_name; }

// ---------------------------------------------------------------------------------------------------
// Streaming

StreamingDetokenizer::StreamingDetokenizer(Tokenizer tokenizer, DecodeOptions options)
    : tokenizer_(std::move(tokenizer)), options_(options) {}

namespace {

// Moves the complete UTF-8 prefix of `pending` to the result; bytes that can never start or continue a
// valid character become U+FFFD. An incomplete but valid tail stays in `pending`.
std::string take_complete(std::string& pending, bool final) {
  std::string out;
  std::size_t i = 0;
  const std::size_t n = pending.size();
  while (i < n) {
    const auto b0 = static_cast<unsigned char>(pending[i]);
    if (b0 < 0x80) {
      out.push_back(static_cast<char>(b0));
      ++i;
      continue;
    }
    std::size_t len = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4;
    }
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    const std::size_t avail = std::min(len, n - i);
    // How many bytes form a valid prefix of a character?
    const std::string_view seq(pending.data() + i, avail);
    bool valid_prefix = true;
    for (std::size_t k = 1; k < avail; ++k) {
      const auto c = static_cast<unsigned char>(seq[k]);
      if ((c & 0xC0) != 0x80) {
        valid_prefix = false;
        break;
      }
      if (k == 1) {
        if ((b0 == 0xE0 && c < 0xA0) || (b0 == 0xED && c > 0x9F) || (b0 == 0xF0 && c < 0x90) || (b0 == 0xF4 && c > 0x8F)) {
          valid_prefix = false;
          break;
        }
      }
    }
    if (!valid_prefix) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (avail < len) {
      if (final) {
        out += "\xEF\xBF\xBD";
        i = n;
      }
      break;
    }
    out.append(seq);
    i += len;
  }
  pending.erase(0, i);
  return out;
}

}  // namespace

std::string StreamingDetokenizer::push(TokenId id) {
  const TokenType ty = tokenizer_.token_type(id);  // validates the id
  if (options_.skip_special && ty == TokenType::kControl) return {};
  std::string_view piece = tokenizer_.token_bytes(id);
  if (first_ && ty != TokenType::kControl) {
    if (tokenizer_.strips_leading_space() && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    first_ = false;
  }
  pending_.append(piece);
  return take_complete(pending_, false);
}

std::string StreamingDetokenizer::finish() { return take_complete(pending_, true); }

bool Tokenizer::strips_leading_space() const { return impl_->strip_leading_space; }

}  // namespace tokenizers
