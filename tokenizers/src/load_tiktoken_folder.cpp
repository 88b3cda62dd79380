// Loads a folder with encoder.json (byte-level token -> id) and vocab.bpe (merges, one "a b" per line) as
// the Llama 3 tokenizer: its pre-tokenizer, whole-word lookup first, and its 256 special tokens.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tokenizer_impl.h"

namespace tokenizers {

std::shared_ptr<Tokenizer::Impl> load_tiktoken_folder(const std::filesystem::path& folder) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  const std::string enc_name = (folder / "encoder.json").string();
  const std::string bpe_name = (folder / "vocab.bpe").string();
  impl->source = folder.string();
  // encoder.json is one flat object of 128,000 entries: read it with the SAX interface straight into
  // (text, id) pairs, without building a document tree (several times faster, which tests under ASan feel).
  struct Handler : nlohmann::json_sax<nlohmann::json> {
    std::vector<std::pair<std::string, std::int64_t>> entries;
    std::string key_;
    std::string error;
    int depth = 0;
    bool bad(const std::string& what) {
      if (error.empty()) error = what;
      return false;
    }
    bool null() override { return bad("/" + key_ + ": expected an integer id"); }
    bool boolean(bool) override { return null(); }
    bool number_integer(number_integer_t v) override {
      if (depth != 1) return bad("expected a flat object");
      entries.emplace_back(std::move(key_), v);
      return true;
    }
    bool number_unsigned(number_unsigned_t v) override {
      return number_integer(static_cast<number_integer_t>(std::min<number_unsigned_t>(v, 1ull << 62)));
    }
    bool number_float(number_float_t, const string_t&) override { return null(); }
    bool string(string_t&) override { return null(); }
    bool binary(binary_t&) override { return null(); }
    bool start_object(std::size_t) override { return ++depth == 1 ? true : bad("expected a flat object"); }
    bool key(string_t& k) override {
      key_ = std::move(k);
      return true;
    }
    bool end_object() override {
      --depth;
      return true;
    }
    bool start_array(std::size_t) override { return bad("/: expected an object"); }
    bool end_array() override { return true; }
    bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
      return bad(fmt::format("malformed JSON at byte {}: {}", position, ex.what()));
    }
  } handler;
  const std::string enc_text = detail::read_file(folder / "encoder.json");
  const bool parsed = nlohmann::json::sax_parse(enc_text, &handler, nlohmann::json::input_format_t::json, false);
  if (!parsed || !handler.error.empty()) {
    throw FormatError(fmt::format("[tokenizer] {}: {}", enc_name, handler.error.empty() ? "malformed JSON" : handler.error));
  }
  if (handler.entries.empty()) throw FormatError(fmt::format("[tokenizer] {}: /: expected a non-empty object", enc_name));
  const std::size_t n_base = handler.entries.size();
  constexpr std::size_t kNumSpecial = 256;
  impl->texts.assign(n_base + kNumSpecial, std::string());
  std::vector<bool> seen(n_base, false);
  for (auto& [text, id] : handler.entries) {
    if (id < 0 || static_cast<std::size_t>(id) >= n_base || seen[static_cast<std::size_t>(id)]) {
      throw FormatError(fmt::format("[tokenizer] {}: /{}: id {} is out of [0, {}) or repeated", enc_name, text, id, n_base));
    }
    seen[static_cast<std::size_t>(id)] = true;
    impl->texts[static_cast<std::size_t>(id)] = std::move(text);
  }
  impl->types.assign(n_base + kNumSpecial, TokenType::kNormal);
  const char* const named[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                               "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                               "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
  for (std::size_t k = 0; k < kNumSpecial; ++k) {
    impl->texts[n_base + k] = k < std::size(named) ? named[k] : fmt::format("<|reserved_special_token_{}|>", k - 8);
    impl->types[n_base + k] = TokenType::kControl;
  }
  const std::string bpe = detail::read_file(folder / "vocab.bpe");
  std::vector<std::pair<std::string, std::string>> merges;
  std::size_t line_no = 0;
  for (std::size_t at = 0; at < bpe.size();) {
    std::size_t end = bpe.find('\n', at);
    if (end == std::string::npos) end = bpe.size();
    std::string_view line(bpe.data() + at, end - at);
    ++line_no;
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const std::size_t sp = line.find(' ', 1);
    if (sp == std::string_view::npos) {
      throw FormatError(fmt::format("[tokenizer] {}: line {}: merge \"{}\" has no space", bpe_name, line_no, line));
    }
    merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  }
  impl->kind = ModelKind::kBytePairByteLevel;
  impl->pre_name = "llama-bpe";
  impl->pre = detail::PreTokenizer::for_gguf_pre("llama-bpe", impl->source);
  impl->ignore_merges = true;
  impl->add_bos = true;
  const auto base = static_cast<TokenId>(n_base);
  impl->special.bos = base;
  impl->special.eos = base + 1;
  impl->special.pad = base + 4;
  impl->special.eot = base + 9;
  impl->special.end_of_generation = {base + 1, base + 8, base + 9};
  detail::setup_byte_level_bpe(*impl, merges);
  impl->finish();
  return impl;
}

}  // namespace tokenizers
