// Small grammar building blocks shared by the tool-call and reasoning grammars (one Grammar is
// embedded in another with pse::Grammar::embed): whitespace, literals and "any text that does not contain a marker".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pse/grammar.h"

namespace pie::tools_detail {

// 0..max_run bytes of JSON whitespace.
pse::ExprId add_whitespace(pse::Grammar& g, std::uint32_t max_run);

// Any UTF-8 text (possibly empty) that does not contain `marker` (non-empty, valid UTF-8). Throws
// pse::GrammarError on an empty marker. Markers whose first character does not recur in them (every
// tool-call and reasoning marker) give one regular expression; others a small rule set (KMP
// automaton).
pse::ExprId add_text_without(pse::Grammar& g, std::string_view marker,
                             const std::string& rule_prefix);

// Any UTF-8 text that does not start with `prefix` (non-empty).
pse::ExprId add_text_not_starting_with(pse::Grammar& g, std::string_view prefix);

// Code points of a UTF-8 string (throws pse::GrammarError on invalid UTF-8).
std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view text);

}  // namespace pie::tools_detail
