// libFuzzer target for the GBNF parser and the grammar compiler: any input either parses into a valid
// Grammar or throws a pse::Error; a parsed grammar either compiles (against the 256 one-byte tokens, a few
// longer ones and a control token, within small bounds) into a matcher whose first mask and a few forced steps work, or throws a pse::Error.
// Never a crash, a hang on deep nesting, or another exception type.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pse/compiler.h"
#include "pse/gbnf.h"
#include "pse/matcher.h"

namespace {

std::shared_ptr<const pse::Vocabulary> byte_vocabulary() {
  static const auto vocabulary = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"ab", "a\"", "\":", "  ", "\xCE\xB1", "\xE4\xB8\x80x", "12", "true"}) tokens.push_back(t);
    tokens.push_back("<think>");  // a control token, for token terminals (<think>, <[264]>, !<...>)
    tokens.push_back("<eos>");
    const auto n = static_cast<pse::TokenId>(tokens.size());
    return std::make_shared<const pse::Vocabulary>(tokens, std::vector<pse::TokenId>{n - 2},
                                                    std::vector<pse::TokenId>{n - 1});
  }();
  return vocabulary;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  pse::Grammar g;
  try {
    g = pse::parse_gbnf(text);
    g.validate();  // a parsed grammar must be well-formed
    (void)g.hash();
    (void)g.to_string();
  } catch (const pse::Error&) {
    return 0;
  }
  try {
    pse::CompileOptions options;
    options.max_states = 20'000;
    options.max_compile_ms = 500;
    pse::Matcher m(pse::compile_grammar(g, byte_vocabulary(), options));
    std::vector<std::uint32_t> mask(m.mask_words());
    // A few steps along the lowest allowed token: a token in the mask must be accepted.
    for (int step = 0; step < 8; ++step) {
      m.fill_next_token_bitmask(mask);
      std::size_t id = 0;
      while (id < 32 * mask.size() && !((mask[id / 32] >> (id % 32)) & 1)) ++id;
      if (id >= byte_vocabulary()->n_tokens()) break;
      if (!m.accept_token(static_cast<pse::TokenId>(id))) __builtin_trap();
    }
  } catch (const pse::Error&) {
  }
  return 0;
}
