// libFuzzer target: load a Hugging Face tokenizer.json from arbitrary bytes, then encode and decode a few
// texts with whatever loaded. Loading must either succeed or throw a tokenizers::Error (never crash, hang
// or allocate without bound); a loaded tokenizer must encode valid UTF-8 and decode its own ids.
// Inputs that do not start (after white space) with '{' are left out: Tokenizer::parse would read them as
// a llama2.c .bin, which is not this target's concern.
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
    "     ",
    "",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view view(reinterpret_cast<const char*>(data), size);
  const std::size_t first = view.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || view[first] != '{') return 0;
  try {
    const tokenizers::Tokenizer tok =
        tokenizers::Tokenizer::parse(std::span<const std::uint8_t>(data, size), "fuzz.tokenizer.json");
    for (std::string_view text : kTexts) {
      for (bool special : {false, true}) {
        tokenizers::EncodeOptions options;
        options.parse_special = special;
        options.add_bos = special;
        const auto ids = tok.encode(text, options);
        for (auto id : ids) {
          if (id < 0 || static_cast<std::size_t>(id) >= tok.vocab_size()) __builtin_trap();
        }
        (void)tok.decode(ids);
      }
    }
  } catch (const tokenizers::Error&) {
  }
  return 0;
}
