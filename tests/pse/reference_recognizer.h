// A deliberately simple, obviously correct recognizer over the pse Grammar IR, for tests only: an Earley
// recognizer over bytes. Character classes consume one UTF-8 encoded Unicode scalar value (strict:
// no overlong forms, no surrogates, nothing above U+10FFFF); kBytes consume their bytes literally.
// Speed is not its point (inputs of a few KB are fine); every engine test compares against it.
#pragma once

#include <string_view>

#include "pse/grammar.h"

namespace pse::testing {

// True when `bytes` is a whole sentence of the grammar's root rule.
// Throws pse::GrammarError (from Grammar::validate) when the grammar has no root or an undefined rule.
bool accepts(const pse::Grammar& grammar, std::string_view bytes);

// True when some (possibly empty) continuation of `bytes` is accepted: the text may end in the middle
// of a UTF-8 character. An empty language has no viable prefix, not even "".
bool is_viable_prefix(const pse::Grammar& grammar, std::string_view bytes);

}  // namespace pse::testing
