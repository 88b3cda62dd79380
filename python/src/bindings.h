// The pieces of the native module orchard._orchard, one file each (python/src/*.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace orchard::python {

namespace nb = nanobind;

// orchard's exception classes (GrammarError, SchemaError, ...) and the translator that raises them for
// the C++ errors of pse, pie and tokenizers (errors.cpp).
void bind_errors(nb::module_& m);
// A matcher used after it accepted an end-of-sequence token (MatcherTerminatedError).
[[noreturn]] void throw_terminated(const char* operation);

void bind_vocabulary(nb::module_& m);  // Vocabulary, Tokenizer
void bind_grammar(nb::module_& m);     // Compiler, CompiledGrammar, GrammarMatcher
void bind_bitmask(nb::module_& m);     // apply_token_bitmask_inplace (CPU), bitmask checks
void bind_engine(nb::module_& m);      // Engine, CompletionStream

}  // namespace orchard::python
