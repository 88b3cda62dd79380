// libFuzzer target for the GBNF parser: any input either parses into a valid Grammar or throws a
// pse::Error; never a crash, a hang on deep nesting, or another exception type.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "pse/gbnf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    pse::Grammar g = pse::parse_gbnf(text);
    g.validate();  // a parsed grammar must be well-formed
    (void)g.hash();
    (void)g.to_string();
  } catch (const pse::Error&) {
  }
  return 0;
}
