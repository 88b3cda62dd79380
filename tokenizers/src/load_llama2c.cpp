// Loads llama2.c's tokenizer.bin: int32 max_token_length, then per token float32 score, int32 length and
// the bytes (spaces as ' ', byte tokens as "<0xXX>"); ids 0 <unk>, 1 <s> (BOS), 2 </s> (EOS).
#include <fmt/format.h>

#include <cstring>

#include "tokenizer_impl.h"

namespace tokenizers {

std::shared_ptr<Tokenizer::Impl> load_llama2c(const std::string& content, const std::string& name) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->source = name;
  auto read_i32 = [&](std::size_t at) {
    std::int32_t v;
    std::memcpy(&v, content.data() + at, 4);
    return v;
  };
  if (content.size() < 4) {
    throw FileError(fmt::format("[tokenizer] {}: not a GGUF, tokenizer.json or llama2.c tokenizer ({} bytes)", name, content.size()));
  }
  const std::int32_t max_len = read_i32(0);
  if (max_len <= 0 || max_len > 4096) {
    throw FileError(fmt::format("[tokenizer] {}: not a GGUF, tokenizer.json or llama2.c tokenizer (max_token_length {})", name, max_len));
  }
  std::size_t at = 4;
  while (at < content.size()) {
    if (content.size() - at < 8) {
      throw FormatError(fmt::format("[tokenizer] {} offset {}: token {} header runs past the end of the file", name, at,
                                    impl->texts.size()));
    }
    float score;
    std::memcpy(&score, content.data() + at, 4);
    const std::int32_t len = read_i32(at + 4);
    if (len < 0 || static_cast<std::size_t>(len) > content.size() - at - 8) {
      throw FormatError(fmt::format("[tokenizer] {} offset {}: token {} length {} runs past the end of the file", name,
                                    at + 4, impl->texts.size(), len));
    }
    impl->scores.push_back(score);
    impl->texts.emplace_back(content.data() + at + 8, static_cast<std::size_t>(len));
    at += 8 + static_cast<std::size_t>(len);
  }
  const std::size_t n = impl->texts.size();
  if (n < 3) throw FormatError(fmt::format("[tokenizer] {}: {} tokens; a llama2.c vocabulary has at least 3", name, n));
  impl->kind = ModelKind::kSentencePiece;
  impl->spm_scores = true;
  impl->spm_space.assign(1, ' ');
  impl->pre_name = "default";
  impl->types.assign(n, TokenType::kNormal);
  impl->types[0] = TokenType::kUnknown;
  impl->types[1] = TokenType::kControl;
  impl->types[2] = TokenType::kControl;
  impl->special.unk = 0;
  impl->special.bos = 1;
  impl->special.eos = 2;
  impl->add_bos = true;
  impl->strip_leading_space = true;
  detail::NormalizerStep st;
  st.kind = detail::NormalizerStep::Kind::kPrepend;
  st.text = " ";
  impl->normalizer.add(st);
  impl->finish();
  return impl;
}

}  // namespace tokenizers
