// Loads a tokenizer from GGUF tokenizer.ggml.* metadata (llama.cpp's llama_vocab::load).
#include <fmt/format.h>

#include "tokenizer_impl.h"
#include "tensor/gguf.h"

namespace tokenizers {

namespace {

bool is_llama3_family(std::string_view pre) {
  for (std::string_view p : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                             "tekken"}) {
    if (pre == p) return true;
  }
  return false;
}

std::optional<TokenId> optional_id(const tensor::gguf::File& file, std::string_view key) {
  const tensor::gguf::Value* v = file.find(key);
  if (v == nullptr) return std::nullopt;
  const std::int64_t id = v->as_int(key);
  if (id < 0 || id > 0x7FFFFFFF) return std::nullopt;  // -1 / 0xFFFFFFFF: none
  return static_cast<TokenId>(id);
}

std::optional<bool> optional_bool(const tensor::gguf::File& file, std::string_view key) {
  const tensor::gguf::Value* v = file.find(key);
  if (v == nullptr) return std::nullopt;
  return v->as_bool(key);
}

}  // namespace

std::shared_ptr<Tokenizer::Impl> load_gguf(const tensor::gguf::File& file) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->source = file.name();
  const std::string where = file.name();
  auto err = [&](std::string_view key, const std::string& what) {
    return FormatError(fmt::format("[tokenizer] {}: {}: {}", where, key, what));
  };

  const std::string model = file.at("tokenizer.ggml.model").as_string("tokenizer.ggml.model");
  const tensor::gguf::Array& tokens = file.at("tokenizer.ggml.tokens").as_array("tokenizer.ggml.tokens");
  const std::size_t n = tokens.items.size();
  if (n == 0) throw err("tokenizer.ggml.tokens", "the vocabulary is empty");
  impl->texts.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    impl->texts.push_back(tokens.items[i].as_string(fmt::format("tokenizer.ggml.tokens[{}]", i)));
  }
  if (const tensor::gguf::Value* v = file.find("tokenizer.ggml.token_type")) {
    const tensor::gguf::Array& a = v->as_array("tokenizer.ggml.token_type");
    if (a.items.size() != n) throw err("tokenizer.ggml.token_type", fmt::format("{} entries for {} tokens", a.items.size(), n));
    impl->types.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string key = fmt::format("tokenizer.ggml.token_type[{}]", i);
      const std::int64_t t = a.items[i].as_int(key);
      if (t < 0 || t > 6) throw err(key, fmt::format("token type {} is not one of 0..6", t));
      impl->types.push_back(static_cast<TokenType>(t));
    }
  }
  if (const tensor::gguf::Value* v = file.find("tokenizer.ggml.scores")) {
    const tensor::gguf::Array& a = v->as_array("tokenizer.ggml.scores");
    if (a.items.size() != n) throw err("tokenizer.ggml.scores", fmt::format("{} entries for {} tokens", a.items.size(), n));
    impl->scores.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      impl->scores.push_back(static_cast<float>(a.items[i].as_float(fmt::format("tokenizer.ggml.scores[{}]", i))));
    }
  }
  impl->pre_name = "default";
  if (const tensor::gguf::Value* v = file.find("tokenizer.ggml.pre")) impl->pre_name = v->as_string("tokenizer.ggml.pre");

  SpecialTokens& sp = impl->special;
  auto ids = [&](std::string_view key, std::optional<TokenId>& slot) {
    if (auto id = optional_id(file, key)) slot = id;
  };
  const std::optional<bool> add_bos = optional_bool(file, "tokenizer.ggml.add_bos_token");
  const std::optional<bool> add_eos = optional_bool(file, "tokenizer.ggml.add_eos_token");
  const std::optional<bool> add_space_prefix = optional_bool(file, "tokenizer.ggml.add_space_prefix");

  if (model == "llama") {
    impl->kind = ModelKind::kSentencePiece;
    impl->spm_scores = true;
    sp.bos = 1, sp.eos = 2, sp.unk = 0;
    impl->add_bos = true;
    const bool prefix = add_space_prefix.value_or(true);
    if (prefix) {
      detail::NormalizerStep st;
      st.kind = detail::NormalizerStep::Kind::kPrepend;
      st.text = " ";
      impl->normalizer.add(st);
    }
    detail::NormalizerStep rep;
    rep.kind = detail::NormalizerStep::Kind::kReplace;
    rep.pattern = " ";
    rep.text = "\xE2\x96\x81";
    impl->normalizer.add(rep);
    impl->strip_leading_space = prefix;
  } else if (model == "gpt2") {
    impl->kind = ModelKind::kBytePairByteLevel;
    const tensor::gguf::Value* mv = file.find("tokenizer.ggml.merges");
    if (mv == nullptr) throw err("tokenizer.ggml.merges", "missing (required for a gpt2 tokenizer)");
    const tensor::gguf::Array& ma = mv->as_array("tokenizer.ggml.merges");
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(ma.items.size());
    for (std::size_t i = 0; i < ma.items.size(); ++i) {
      const std::string key = fmt::format("tokenizer.ggml.merges[{}]", i);
      const std::string& m = ma.items[i].as_string(key);
      const std::size_t sp_at = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp_at == std::string::npos) throw err(key, fmt::format("merge \"{}\" has no space separating its two parts", m));
      merges.emplace_back(m.substr(0, sp_at), m.substr(sp_at + 1));
    }
    impl->pre = detail::PreTokenizer::for_gguf_pre(impl->pre_name, where + ": tokenizer.ggml.pre");
    impl->ignore_merges = is_llama3_family(impl->pre_name);
    impl->add_bos = is_llama3_family(impl->pre_name);
    if (impl->types.empty()) impl->types.assign(n, TokenType::kNormal);
    detail::setup_byte_level_bpe(*impl, merges);
  } else if (model == "bert") {
    impl->kind = ModelKind::kWordPiece;
    impl->wp_llama_preprocess = true;
    sp.unk = 100, sp.sep = 102, sp.pad = 0, sp.cls = 101, sp.mask = 103;
    impl->add_bos = impl->add_eos = true;
    impl->strip_leading_space = true;
    impl->bytes.resize(n);
    if (impl->types.empty()) impl->types.assign(n, TokenType::kNormal);
    static constexpr std::string_view kSpace = "\xE2\x96\x81";
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& t = impl->texts[i];
      if (t.starts_with(kSpace)) {
        impl->bytes[i] = " " + t.substr(kSpace.size());
      } else {
        impl->bytes[i] = t;
      }
    }
    impl->wp_keys.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& t = impl->texts[i];
      impl->wp_keys.push_back(t.starts_with(kSpace) ? t.substr(kSpace.size()) : t);
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& t = impl->texts[i];
      const std::string& key = impl->wp_keys[i];
      if (key.empty()) continue;
      (t.starts_with(kSpace) ? impl->wp_start : impl->wp_cont).insert(key, static_cast<TokenId>(i));
      impl->wp_max_piece_bytes = std::max(impl->wp_max_piece_bytes, key.size());
    }
  } else {
    throw err("tokenizer.ggml.model", fmt::format("tokenizer model \"{}\" is not supported (llama, gpt2, bert are)", model));
  }
  ids("tokenizer.ggml.bos_token_id", sp.bos);
  ids("tokenizer.ggml.eos_token_id", sp.eos);
  ids("tokenizer.ggml.unknown_token_id", sp.unk);
  ids("tokenizer.ggml.seperator_token_id", sp.sep);
  ids("tokenizer.ggml.separator_token_id", sp.sep);
  ids("tokenizer.ggml.padding_token_id", sp.pad);
  ids("tokenizer.ggml.cls_token_id", sp.cls);
  ids("tokenizer.ggml.mask_token_id", sp.mask);
  ids("tokenizer.ggml.eot_token_id", sp.eot);
  std::optional<TokenId> eom;
  ids("tokenizer.ggml.eom_token_id", eom);
  if (eom) sp.end_of_generation.push_back(*eom);
  // Fill-in-the-middle separators end generation, as in llama.cpp (also found by their texts: finish()).
  for (const char* key : {"tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                          "tokenizer.ggml.fim_sep_token_id"}) {
    std::optional<TokenId> fim;
    ids(key, fim);
    if (fim) sp.end_of_generation.push_back(*fim);
  }
  if (impl->kind == ModelKind::kWordPiece) {
    if (sp.cls) sp.bos = sp.cls;
    if (sp.sep) sp.eos = sp.sep;
  }
  if (add_bos) impl->add_bos = *add_bos;
  if (add_eos) impl->add_eos = *add_eos;
  impl->finish();
  return impl;
}

}  // namespace tokenizers
