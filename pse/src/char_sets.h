// Sets of code points as sorted range lists: union, complement, case closure, the ECMA-262 class
// escapes (\d \w \s) and Unicode properties (\p{..}). Shared by the regex, GBNF and Lark
// front-ends.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pse/grammar.h"

namespace pse::charset {

using Ranges = std::vector<CharRange>;

// Sorted, merged (overlapping or adjacent ranges joined); surrogates are kept.
Ranges normalize(Ranges ranges);
// Everything in [0, 0x10FFFF] not in `ranges` (which must be normalized).
Ranges complement(const Ranges& ranges);
// `ranges` plus every code point with the same simple case fold as a member (the regex `i` flag).
Ranges case_closure(const Ranges& ranges);
// The code points sharing cp's simple case fold, cp included; just {cp} when it has no case
// variants.
std::vector<std::uint32_t> case_variants(std::uint32_t cp);
bool contains(const Ranges& normalized, std::uint32_t cp);

// ECMA-262 class escapes.
Ranges digit();             // \d: [0-9]
Ranges word();              // \w: [A-Za-z0-9_]
Ranges space();             // \s: WhiteSpace and LineTerminator
Ranges line_terminators();  // \n \r U+2028 U+2029 (what `.` excludes without the s flag)

// The body of \p{...}: `Lu`, `Letter`, `gc=Lu`, `General_Category=Letter`, `sc=Grek`,
// `Script=Greek`, or the binary properties `Any`, `ASCII`, `Assigned`. nullopt with `error` set
// when unknown or unsupported (e.g. Script_Extensions).
std::optional<Ranges> unicode_property(std::string_view body, std::string& error);

// UTF-8 encoding of a code point (the caller ensures cp <= 0x10FFFF).
void append_utf8(std::string& out, std::uint32_t cp);
// Decodes one UTF-8 sequence at text[pos]; returns its length and sets cp, or 0 when malformed
// (overlong, surrogate, past U+10FFFF, truncated).
std::size_t decode_utf8(std::string_view text, std::size_t pos, std::uint32_t& cp);

}  // namespace pse::charset
