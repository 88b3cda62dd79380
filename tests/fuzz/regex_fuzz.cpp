// libFuzzer target for the ECMA-262 regex front-end. The first byte picks the options (full match
// or search, i, s); the rest is the pattern. A valid Grammar or a pse::Error, nothing else;
// add_regex must leave the grammar unchanged when it throws.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "pse/regex.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  pse::RegexOptions options;
  options.full_match = (data[0] & 1) == 0;
  options.case_insensitive = (data[0] & 2) != 0;
  options.dot_all = (data[0] & 4) != 0;
  std::string_view pattern(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    pse::Grammar g = pse::parse_regex(pattern, options);
    g.validate();
    (void)g.hash();
  } catch (const pse::Error&) {
  }
  pse::Grammar host;
  pse::ExprId keep = host.add_bytes("x");
  std::uint64_t before = host.hash();
  try {
    pse::ExprId e = pse::add_regex(host, pattern, options);
    if (e <= keep) std::abort();
  } catch (const pse::Error&) {
    if (host.hash() != before) std::abort();  // a throw must leave the grammar unchanged
  }
  return 0;
}
