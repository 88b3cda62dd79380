// The token terminal syntax GBNF and Lark share (llama.cpp's and llguidance's): `<name>`, the token
// whose bytes are `<name>`, brackets included (`<think>`, `<|eot_id|>`), and `<[ids]>` by id, where ids is `*` (every token),
// or comma-separated ids and inclusive ranges `a-b`, optionally led by `^` (every token but those):
// `<[128010]>`, `<[128000-128255]>`, `<[^1,5-9]>`.
#pragma once

#include "pse/grammar.h"
#include "text_cursor.h"

namespace pse {

// Reads one token terminal at the cursor (on its '<') into `g`; `negated` (GBNF's `!` before it) reads
// every token but the ones named. Fails through the cursor (line, column and what was expected).
ExprId read_token_terminal(TextCursor& in, Grammar& g, bool negated);

}  // namespace pse
