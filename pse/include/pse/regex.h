// Regex front-end in ECMA-262 syntax (what JSON Schema `pattern` uses): classes, escapes (\d \w \s \D
// \W \S \b-less, \p{..} / \P{..} Unicode general categories and scripts where tabulated, \uXXXX,
// \u{...}, \xHH, \cX), quantifiers (greedy and lazy accept the same language), groups (capturing,
// non-capturing, named), alternation, ^ and $ anchors, `.` (any code point except line terminators,
// unless dotall). Backreferences and lookaround throw GrammarError: never a silent approximation.
#pragma once

#include <string_view>

#include "pse/grammar.h"

namespace pse {

struct RegexOptions {
  // true: the regex must match the whole text (every engine's regex mode).
  // false: JSON Schema semantics: the pattern may match anywhere (an unanchored search), so the
  //        expression is wrapped in .* on each side unless anchored by ^ / $.
  bool full_match = true;
  bool case_insensitive = false;  // the i flag
  bool dot_all = false;           // the s flag
};

// Adds the language of `pattern` to `grammar` and returns its expression (used by JSON Schema `pattern`
// and Lark regex terminals). Throws GrammarError with the column (1-based, in characters) in the
// pattern, LimitError past 1 MiB or 2^20 class ranges; `grammar` is unchanged after a throw.
// ^ and $ are accepted at the ends of the pattern or of a top-level alternative (also inside groups
// without | or a quantifier); elsewhere they are a GrammarError. docs/grammars.md has the details.
ExprId add_regex(Grammar& grammar, std::string_view pattern, const RegexOptions& options = {});

// A whole grammar whose root is the regex.
Grammar parse_regex(std::string_view pattern, const RegexOptions& options = {});

}  // namespace pse
