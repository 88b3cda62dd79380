// Test helpers: a byte-level vocabulary (one token per byte, plus a few multi-byte tokens and an
// end-of-sequence id) and "does this grammar accept exactly this text" through pse::Matcher.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pse/compiler.h"
#include "pse/matcher.h"
#include "pse/vocabulary.h"

namespace pie::testing {

inline std::shared_ptr<const pse::Vocabulary> byte_vocabulary() {
  static const std::shared_ptr<const pse::Vocabulary> vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    for (const char* t :
         {"<tool_call>", "</tool_call>", "{\"name\": \"", "\", \"arguments\": ", "<think>",
          "</think>", "[TOOL_CALLS]", "<|python_tag|>", "true", "null", "  "}) {
      tokens.emplace_back(t);
    }
    tokens.emplace_back("<eos>");
    const auto eos = static_cast<pse::TokenId>(tokens.size() - 1);
    return std::make_shared<const pse::Vocabulary>(
        std::move(tokens), std::vector<pse::TokenId>{eos}, std::vector<pse::TokenId>{eos});
  }();
  return vocab;
}

// The grammar accepts `text` as a whole output.
inline bool accepts(const pse::CompiledGrammar& compiled, std::string_view text) {
  pse::Matcher m(compiled);
  return m.accept_bytes(text) && m.can_stop();
}

// Token tables built lazily: a test visits few of the states, so eager tables would dominate its
// time.
inline pse::CompiledGrammar compile(const pse::Grammar& g) {
  pse::CompileOptions options;
  options.tables = pse::TableBuild::kAtFirstUse;
  return pse::compile_grammar(g, byte_vocabulary(), options);
}

}  // namespace pie::testing
