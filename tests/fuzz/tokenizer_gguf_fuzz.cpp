// libFuzzer target: Tokenizer::parse on arbitrary bytes (GGUF images with tokenizer.ggml.* metadata, but
// also JSON and llama2.c images, since parse recognises the kind from the content). Loading must either
// succeed or throw a tokenizers::Error; a loaded tokenizer must encode and decode without going out of
// bounds. Seed it with the vocab-only GGUFs in ../shared/data/tokenizers/llama.cpp.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "tokenizers/tokenizer.h"

namespace {

constexpr std::string_view kTexts[] = {
    "Hello world",
    " leading space, tabs\tand\nnew lines\r\n",
    "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 12345 3.14",
    "<s> </s> <|endoftext|> <unk> [CLS] [SEP] <|eot_id|>",
    "",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const tokenizers::Tokenizer tok = tokenizers::Tokenizer::parse(std::span<const std::uint8_t>(data, size), "fuzz.gguf");
    for (std::string_view text : kTexts) {
      for (bool special : {false, true}) {
        tokenizers::EncodeOptions options;
        options.parse_special = special;
        options.add_bos = options.add_eos = special;
        const auto ids = tok.encode(text, options);
        for (auto id : ids) {
          if (id < 0 || static_cast<std::size_t>(id) >= tok.vocab_size()) __builtin_trap();
        }
        tokenizers::StreamingDetokenizer stream(tok);
        for (auto id : ids) (void)stream.push(id);
        (void)stream.finish();
        (void)tok.decode(ids);
      }
    }
    for (std::size_t i = 0; i < tok.vocab_size() && i < 4096; ++i) (void)tok.token_bytes(static_cast<tokenizers::TokenId>(i));
  } catch (const tokenizers::Error&) {
  }
  return 0;
}
