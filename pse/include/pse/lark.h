// A Lark-style EBNF, the subset documented in docs/grammars.md: rules `name: a b | c`, terminals
// `NAME: ...` (uppercase, may be regexes /.../flags or strings "..."i), `?`, `*`, `+`, `[...]` optional,
// `~ n` and `~ n..m` repetition, `%ignore` is rejected (constrained output must say where whitespace goes),
// `%import common.X` for the common terminals. llguidance's extensions in rules: whole tokens `<name>`,
// `<[ids]>` (resolved against the vocabulary at compile) and inline JSON Schemas `%json {...}`. The start
// rule is `start`.
#pragma once

#include <string_view>

#include "pse/grammar.h"

namespace pse {

// Throws GrammarError with line, column and what was expected (unsupported constructs name
// themselves; a %json schema's errors carry its JSON pointer); LimitError for text over 8 MiB, and for a
// %json schema or the regexes past their bounds. See docs/grammars.md for the subset.
Grammar parse_lark(std::string_view text, std::string_view start_rule = "start");

}  // namespace pse
