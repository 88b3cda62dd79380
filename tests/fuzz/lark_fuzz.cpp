// libFuzzer target for the Lark-style EBNF parser: a valid Grammar or a pse::Error, nothing else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "pse/lark.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    pse::Grammar g = pse::parse_lark(text);
    g.validate();
    (void)g.hash();
    (void)g.to_string();
  } catch (const pse::Error&) {
  }
  return 0;
}
