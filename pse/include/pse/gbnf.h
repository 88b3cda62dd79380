// GBNF, llama.cpp's grammar format (grammars/README.md in llama.cpp): rules `name ::= ...`, literals
// "...", character classes [...] and [^...], `.` (any code point), groups, `|`, `*` `+` `?`, `{m}`
// `{m,}` `{m,n}`, `#` comments, the escapes \x \u \U \t \n \r \\ \" \[ \]; whole tokens by id
// `<[128010]>` or by name `<think>`, and any other token `!<...>` (resolved against the vocabulary at
// compile). The root rule is `root`.
#pragma once

#include <string_view>

#include "pse/grammar.h"

namespace pse {

// Throws GrammarError with line, column and what was expected; undefined rules are errors (at their
// first reference). LimitError for text over 8 MiB. See docs/grammars.md.
Grammar parse_gbnf(std::string_view text, std::string_view root_rule = "root");

}  // namespace pse
