// The grammar IR: rules over byte-level terminals, and whole tokens matched by id. Every front-end
// (GBNF, Lark, regex, JSON Schema) produces a Grammar; the Compiler turns a Grammar plus a Vocabulary
// into a CompiledGrammar.
// Expressions live in one arena and are referred to by ExprId; rules may refer to each other (and
// to themselves) by RuleId. A Grammar is a plain value: copyable, comparable by content hash.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pse/error.h"

namespace pse {

using RuleId = std::uint32_t;
using ExprId = std::uint32_t;

enum class ExprKind : std::uint8_t {
  kEmpty,      // matches the empty string
  kBytes,      // a literal byte string (UTF-8 for text; any bytes allowed)
  kCharClass,  // one Unicode scalar value in (or, when negated, not in) `ranges`, matched as UTF-8
  kSequence,   // children one after another
  kChoice,     // exactly one of the children
  kRepeat,     // child repeated min..max times (max == kUnbounded: no upper bound)
  kRuleRef,    // the body of rule `rule`
  kGraph,      // a finite automaton whose edges read sub-expressions (see GraphEdge)
  kToken,      // one whole token of the vocabulary, matched by its id, not its bytes (see Expr)
};

// Inclusive range of Unicode code points.
struct CharRange {
  std::uint32_t lo = 0;
  std::uint32_t hi = 0;
  friend bool operator==(const CharRange&, const CharRange&) = default;
};

// kGraph: states 0..graph_states-1, state 0 the start; an edge from `from` to `to` reads one string of
// the language of children[label]. The expression matches the concatenations of the labels read along a
// path from state 0 to a state listed in `accepting`. It states regular languages whose expression form
// would repeat shared suffixes (the intersection of a pattern and a length bound, say): the automaton
// the compiler builds from it has one state per graph state.
struct GraphEdge {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  std::uint32_t label = 0;  // index into the expression's children
  friend bool operator==(const GraphEdge&, const GraphEdge&) = default;
};

// Inclusive range of token ids (kToken).
struct TokenIdRange {
  std::uint32_t lo = 0;
  std::uint32_t hi = 0;
  friend bool operator==(const TokenIdRange&, const TokenIdRange&) = default;
};
inline constexpr std::uint32_t kMaxTokenId = 0x7FFFFFFF;

inline constexpr std::uint32_t kUnbounded = std::numeric_limits<std::uint32_t>::max();
inline constexpr std::uint32_t kMaxCodePoint = 0x10FFFF;

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  std::string bytes;              // kBytes
  std::vector<CharRange> ranges;  // kCharClass: sorted, disjoint, non-adjacent (normalized)
  bool negated = false;           // kCharClass: complement within [0, 0x10FFFF] minus surrogates
  std::vector<ExprId> children;   // kSequence, kChoice; kRepeat has exactly one
  std::uint32_t min = 0;          // kRepeat
  std::uint32_t max = 0;          // kRepeat
  RuleId rule = 0;                // kRuleRef
  std::uint32_t graph_states = 0;       // kGraph
  std::vector<GraphEdge> edges;         // kGraph
  std::vector<std::uint32_t> accepting; // kGraph: sorted, distinct
  // kGraph: no two states accept the same strings (a minimal DFA's). A hint: the compiler then gives
  // each of their automaton states its own token table without comparing their futures.
  bool distinct_states = false;
  // kToken: a token whose id lies in `token_ids`, or, when `token_name` is not empty, the token whose
  // bytes are exactly `token_name` (llama.cpp's `<think>`, llguidance's `<|eot_id|>`), looked up in the
  // vocabulary at compile time. With `negated`: any other token (never an end-of-sequence id, which
  // only ends the output, nor a padded row). A special token (a control token such as `<|python_tag|>`)
  // is only ever matched this way; a text token either way.
  std::vector<TokenIdRange> token_ids;  // kToken: sorted, disjoint, non-adjacent
  std::string token_name;               // kToken
};

struct Rule {
  std::string name;
  ExprId body = 0;
  bool defined = false;
};

class Grammar {
 public:
  // Builders. Each returns the id of the new expression. Character-class ranges are normalized
  // (sorted, merged, surrogates U+D800..U+DFFF removed); an empty non-negated class matches nothing
  // (a valid but dead alternative); a range with lo > hi or past U+10FFFF throws GrammarError.
  // Child expressions and rules must already exist (GrammarError otherwise); the grammar is
  // unchanged on a throw.
  ExprId add_empty();
  ExprId add_bytes(std::string bytes);
  ExprId add_char_class(std::vector<CharRange> ranges, bool negated = false);
  ExprId add_sequence(std::vector<ExprId> children);
  ExprId add_choice(std::vector<ExprId> children);
  // Throws GrammarError when min > max.
  ExprId add_repeat(ExprId child, std::uint32_t min, std::uint32_t max);
  ExprId add_rule_ref(RuleId rule);
  // Throws GrammarError when n_states is 0, an edge names a state past n_states or a label past
  // `labels`, or an accepting state is past n_states. `accepting` is sorted and deduplicated.
  // `distinct_states`: see Expr::distinct_states.
  ExprId add_graph(std::uint32_t n_states, std::vector<GraphEdge> edges, std::vector<std::uint32_t> accepting,
                   std::vector<ExprId> labels, bool distinct_states = false);
  // One token by id (ranges sorted and merged; see Expr::token_ids) or by its bytes. Throws GrammarError
  // when a range has lo > hi or passes kMaxTokenId, when no id is given and not `negated` (a set of no
  // token), or when the name is empty.
  ExprId add_token(std::vector<TokenIdRange> ids, bool negated = false);
  ExprId add_token_named(std::string name, bool negated = false);
  // Copies every rule of `source` (a validated grammar) into this one, each renamed `prefix` + its name,
  // and returns a reference to the copy of its root. Throws GrammarError when a renamed rule is
  // already defined here, or when `source` does not validate; this grammar may then hold the rules
  // copied so far (unreferenced, or declared and undefined).
  ExprId embed(const Grammar& source, std::string_view prefix);

  // Rules: declare first (for forward references), define once. declare_rule of an existing name
  // returns its id. Throws GrammarError on a duplicate definition or an empty name. find_rule
  // returns kNoRule when absent.
  static constexpr RuleId kNoRule = std::numeric_limits<RuleId>::max();
  RuleId declare_rule(std::string_view name);
  void define_rule(RuleId rule, ExprId body);
  RuleId add_rule(std::string_view name, ExprId body) {
    RuleId r = declare_rule(name);
    define_rule(r, body);
    return r;
  }
  RuleId find_rule(std::string_view name) const;
  void set_root(RuleId rule);

  RuleId root() const { return root_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<Expr>& exprs() const { return exprs_; }
  const Expr& expr(ExprId id) const { return exprs_.at(id); }
  const Rule& rule(RuleId id) const { return rules_.at(id); }

  // Checks that the root is set and every referenced rule is defined; throws GrammarError naming
  // the first undefined rule. Does not reject empty languages (the compiler does, with a clear
  // error).
  void validate() const;
  // A GBNF-like rendering, for debugging and error messages (not a stable format); of one expression.
  std::string to_string() const;
  std::string to_string(ExprId id) const;
  // 64-bit content hash (rules, expressions, root), the compile cache's key.
  std::uint64_t hash() const;

 private:
  ExprId push(Expr e);  // appends a built expression
  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  RuleId root_ = kNoRule;
  // name -> id, for find_rule in O(1); transparent lookup by string_view.
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, RuleId, NameHash, std::equal_to<>> rule_index_;
};

}  // namespace pse
