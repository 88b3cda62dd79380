// Deterministic automata over Unicode scalar values, for string constraints whose conjunction no single
// expression states: a JSON Schema `pattern` with `maxLength`, two patterns, a format with excluded values.
// Each constraint becomes a DFA; their product is exactly the strings all of them accept; the product is
// written back into a Grammar as one kGraph expression whose edges read code points in the caller's
// encoding (JSON string text for the schema converter). Every builder is bounded and says so by
// returning nullopt, so a caller can fall back to a clear error instead of running away.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pse/grammar.h"

namespace pse::detail {

struct CodePointDfa {
  struct Edge {
    std::uint32_t lo = 0;  // inclusive code point range, scalar values only
    std::uint32_t hi = 0;
    std::uint32_t target = 0;
  };
  std::vector<std::vector<Edge>> edges;  // per state: sorted by lo, disjoint
  std::vector<std::uint8_t> accepting;   // per state
  // State 0 is the start. No states at all: the empty language.
  std::size_t n_states() const { return accepting.size(); }
  bool empty() const { return accepting.empty(); }
  bool accepts(const std::u32string& text) const;
};

// `ranges` (negated within the code space when `negated`) as sorted, merged scalar-value ranges: the
// surrogates U+D800..U+DFFF removed.
std::vector<CharRange> scalar_ranges(const std::vector<CharRange>& ranges, bool negated);

// Code points of UTF-8 text; nullopt when it is not valid UTF-8 (surrogates included).
std::optional<std::u32string> decode_utf8(const std::string& text);

// The DFA of expression `root` of `g` (empty, literal bytes as UTF-8, character classes, sequences,
// choices and repetitions); nullopt when it holds a rule reference or a graph, invalid UTF-8, or would
// need more than max_states states (of the NFA or of the DFA).
std::optional<CodePointDfa> dfa_from_expr(const Grammar& g, ExprId root, std::size_t max_states);

// Strings of min..max code points (max == kUnbounded: no upper bound). nullopt when that needs more than
// max_states states.
std::optional<CodePointDfa> dfa_of_length(std::uint32_t min, std::uint32_t max, std::size_t max_states);

// Every string but the listed ones (UTF-8; nullopt when one is not valid UTF-8 or past max_states).
std::optional<CodePointDfa> dfa_excluding(const std::vector<std::string>& excluded, std::size_t max_states);

// The strings every DFA accepts (at least one DFA), with only the states that can still reach acceptance
// (no states when none is left). nullopt past max_states.
std::optional<CodePointDfa> intersect(const std::vector<CodePointDfa>& dfas, std::size_t max_states);

// The strings `dfa` rejects (scalar values only), trimmed; nullopt past max_states.
std::optional<CodePointDfa> complement(const CodePointDfa& dfa, std::size_t max_states);

// The minimal DFA of the same language (Moore's partition refinement, each state's moves compared as
// code point ranges and the classes they lead to). `dfa` must be trimmed, as every builder here leaves it.
CodePointDfa minimize(const CodePointDfa& dfa);

// The shortest and longest accepted length (longest == kUnbounded when a cycle can be taken on the way
// to acceptance); nullopt for the empty language. `dfa` must be trimmed (as intersect leaves it).
std::optional<std::pair<std::uint32_t, std::uint32_t>> length_range(const CodePointDfa& dfa);

// Adds the language of a trimmed, non-empty `dfa` to `g` as one kGraph expression, each edge's label
// `chars(ranges)`: the caller's encoding of one code point of the edge's ranges (edges to the same target
// share one label). `minimal`: `dfa` is minimal (Expr::distinct_states).
ExprId dfa_to_expr(const CodePointDfa& dfa, Grammar& g,
                   const std::function<ExprId(const std::vector<CharRange>&)>& chars, bool minimal = false);

}  // namespace pse::detail
