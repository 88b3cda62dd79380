// Internal state of the JSON Schema converter, shared by its files:
//   json_schema.cpp          driver, options, keyword table, collection of a conjunction into Constraints
//   json_schema_refs.cpp     resources ($id), anchors and $ref resolution
//   json_schema_emit.cpp     grammar of values: layout, combinators, objects, arrays, enums
//   json_schema_number.cpp   numbers: integer and decimal ranges digit by digit, multipleOf
//   json_schema_string.cpp   strings: JSON escapes, lengths, excluded values, `pattern`, `format`
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "pse/error.h"
#include "pse/grammar.h"
#include "pse/json_schema.h"
#include "code_point_dfa.h"

namespace pse::json_schema_detail {

using json = nlohmann::ordered_json;  // keeps "properties" in schema order

// One schema in its place: the JSON value, the base URI its references resolve against, its JSON pointer
// in the document (for errors), and the combinator keywords already expanded by a caller (`skip`).
struct Node {
  const json* schema = nullptr;
  std::string base;
  std::string pointer;
  std::vector<std::string> skip;
  // In-place ancestry inside a conjunction ("/3/7": derived from node 3 by $ref / allOf / a branch), and
  // whether it descends from a branch of an anyOf whose branches may overlap. Neither is part of key():
  // they only decide whether unevaluatedProperties / unevaluatedItems can be enforced exactly.
  std::string lineage;
  bool overlap = false;
  bool no_eval = false;  // inside a negation: its annotations are dropped
  bool skips(const std::string& what) const;
  std::string key() const;  // identity for rule memoization
};

using Conj = std::vector<Node>;  // a conjunction of schemas (allOf)

enum TypeBits : std::uint32_t {
  kNull = 1,
  kBoolean = 2,
  kObject = 4,
  kArray = 8,
  kString = 16,
  kInteger = 32,   // integers that are not written with a fraction
  kNumber = 64,    // numbers that are not integers
  kAllTypes = 127,
};

// An exact decimal: value = (negative ? -1 : 1) * 0.digits * 10^point... kept as integer digits and
// fraction digits without leading / trailing zeros, so comparisons are exact for any JSON number.
struct Decimal {
  bool negative = false;
  std::string int_digits;   // no leading zeros; "" for 0
  std::string frac_digits;  // no trailing zeros
  bool is_zero() const { return int_digits.empty() && frac_digits.empty(); }
  bool is_integer() const { return frac_digits.empty(); }
};
Decimal decimal_from_json(const json& number);      // exact decimal of the number as written / parsed
int compare(const Decimal& a, const Decimal& b);    // -1, 0, 1
std::string to_string(const Decimal& d);
// The TypeBits of one JSON value; a float with no fraction counts as kInteger
// (json_schema_emit.cpp).
std::uint32_t type_of_value(const json& v);

struct Bound {
  Decimal value;
  bool exclusive = false;
};

// A disjunction to expand: anyOf / oneOf / if / not / dependentRequired / dependentSchemas of one node.
struct Disjunction {
  std::size_t node_index = 0;        // index in the conjunction of the node that holds it
  std::string skip_token;            // marks it expanded in that node
  std::vector<Conj> branches;        // each branch is added to the conjunction
  std::size_t n_base = 0;            // after collect(): each branch is the base conjunction (this many) + own
  bool exclusive = false;            // oneOf: the branches must be provably disjoint
  std::string pointer;               // for errors
  std::string keyword;
};

// Object shape of one conjunct (properties + additionalProperties), merged at emission.
struct ObjectShape {
  std::vector<std::pair<std::string, Node>> properties;  // schema order
  std::optional<Node> additional;                        // absent: any value
  std::string pointer;
  std::string lineage;
  bool evaluates = true;  // false for synthesized negations (a failed "if" evaluates nothing)
  bool overlap = false;
};

struct ArrayShape {
  std::vector<Node> prefix;
  std::optional<Node> items;  // for positions past the prefix; absent: any value
  std::string pointer;
  std::string lineage;
  bool overlap = false;
  bool evaluates = true;
};

// Everything a conjunction requires, keyword by keyword.
struct Constraints {
  bool never = false;  // a `false` schema (or a contradiction) is in the conjunction
  std::string never_reason;
  std::uint32_t types = kAllTypes;
  std::optional<std::vector<json>> values;  // enum / const: the value must be one of these
  std::vector<json> excluded;               // not const / not enum: the value must be none of these
  std::string values_pointer;
  // numbers
  std::optional<Bound> lower;
  std::optional<Bound> upper;
  std::vector<std::pair<Decimal, std::string>> multiple_of;  // value, pointer
  // strings
  std::uint32_t min_length = 0;
  std::uint32_t max_length = kUnbounded;
  std::vector<std::pair<std::string, std::string>> patterns;  // pattern, pointer
  std::vector<std::pair<std::string, std::string>> formats;   // format, pointer
  std::vector<std::pair<std::string, std::string>> not_patterns;  // strings must not match these (from `not`)
  std::vector<std::pair<std::string, std::string>> not_formats;
  std::string length_pointer;
  // objects
  std::vector<ObjectShape> object_shapes;
  struct PatternProperty {
    std::string pattern;
    Node schema;
    std::string pointer;  // of the schema holding "patternProperties"
  };
  std::vector<PatternProperty> pattern_properties;
  std::vector<Node> property_names;
  std::vector<std::string> required;  // in order of appearance, unique
  std::uint32_t min_properties = 0;
  std::uint32_t max_properties = kUnbounded;
  std::string properties_count_pointer;
  // arrays
  std::vector<ArrayShape> array_shapes;
  std::uint32_t min_items = 0;
  std::uint32_t max_items = kUnbounded;
  std::vector<Node> contains;
  std::optional<std::uint32_t> min_contains;
  std::optional<std::uint32_t> max_contains;
  std::string contains_pointer;
  bool unique_items = false;
  std::string unique_pointer;
  // unevaluatedProperties / unevaluatedItems: the schema and the node that holds it
  std::vector<Node> unevaluated_properties;
  std::vector<Node> unevaluated_items;
  std::vector<std::string> contains_lineage;
  // combinators still to expand
  std::vector<Disjunction> disjunctions;
};

// Whether `name` is a format some JSON Schema draft (04 to 2020-12) defines; the defined format whose
// name equals `name` ignoring case, '-' and '_' ("datetime" -> "date-time"), nullptr when none.
bool is_defined_format(const std::string& name);
const std::string* defined_format_ignoring_case(const std::string& name);

// A set of JSON values under JSON Schema equality (1 and 1.0 are the same value), hashed: enum lists of
// many thousands of values are deduplicated and intersected in linear time.
class ValueSet {
 public:
  ValueSet() = default;
  explicit ValueSet(const std::vector<json>& values) {
    for (const json& v : values) insert(v);
  }
  // Whether `value` was not in the set yet (it is now). The set refers to `value`: keep it alive.
  bool insert(const json& value);
  bool contains(const json& value) const;

 private:
  std::unordered_multimap<std::size_t, const json*> index_;
};

class Converter {
 public:
  Converter(const json& root, const JsonSchemaOptions& options);
  Grammar run();

  // --- refs (json_schema_refs.cpp)
  void index_resources(const json& schema, const std::string& base, const std::string& pointer, int depth);
  Node resolve_ref(const Node& from, const std::string& ref, const std::string& keyword);
  std::string base_of(const json& schema, const std::string& parent_base) const;  // after its own "$id"
  int draft_of(const Node& node) const;

  // --- collection (json_schema.cpp)
  Constraints collect(const Conj& conj, int depth);
  void collect_node(const Conj& conj, std::size_t index, Constraints& c, Conj& extra, int depth);
  std::optional<std::vector<Conj>> negate(const Node& node);  // the complement as a union, when expressible
  bool provably_disjoint(const Constraints& a, const Constraints& b, int depth);
  bool value_satisfies(const json& value, const Constraints& c, const std::string& pointer);
  // value_satisfies but for "enum" / "const" and their exclusions (the caller checked those).
  bool value_satisfies_besides_values(const json& value, const Constraints& c, const std::string& pointer);
  bool conj_satisfies(const json& value, const Conj& conj, int depth);  // value valid under every node
  // The schemas a member's value must satisfy: per object shape its property schema, or its additional
  // schema where neither a property nor one of its patterns matches; plus the matching patterns' schemas
  // (`matched`, per c.pattern_properties). name == nullptr: a key that no shape declares.
  Conj member_conj(const Constraints& c, const std::string* name, const std::vector<bool>& matched);
  Conj item_conj(const Constraints& c, std::size_t index);  // the schemas of an array's item `index`
  Node child(const Node& parent, const json& schema, const std::string& suffix) const;
  json* own(json value);  // keeps a synthesized schema alive
  // Canonical synthesized schemas (one address each, so rules keyed by them are shared).
  Node true_node();
  Node false_node();
  Node string_node();

  // --- emission (json_schema_emit.cpp)
  ExprId value_expr(const Conj& conj, std::uint32_t indent_depth, int depth);
  // A node's identity for rule memoization: its content when its meaning does not depend on where it
  // sits (equal schemas under one base, no dynamic references or unevaluated* in it), else Node::key().
  std::string rule_key(const Node& node);
  ExprId emit_constraints(const Conj& conj, Constraints& c, std::uint32_t indent_depth, int depth);
  ExprId emit_literal(const json& value, std::uint32_t indent_depth);
  ExprId emit_object(Constraints& c, std::uint32_t indent_depth, int depth);
  ExprId emit_array(Constraints& c, std::uint32_t indent_depth, int depth);
  // The members of an object with patternProperties whose keys are none of `declared`: one alternative
  // per region of keys matched by the same patterns, with the schemas schemas_for(nullptr, matched) says.
  std::optional<ExprId> pattern_members(const std::vector<std::string>& declared,
                                        const std::vector<detail::CodePointDfa>& pattern_dfa,
                                        const std::function<Conj(const std::string*, const std::vector<bool>&)>& schemas_for,
                                        const std::string& pointer, std::uint32_t indent_depth, int depth);
  ExprId ws();
  ExprId open_ws(std::uint32_t d);
  ExprId sep(std::uint32_t d);
  ExprId close_ws(std::uint32_t d);
  ExprId colon();
  ExprId empty_inner();

  // --- numbers (json_schema_number.cpp)
  ExprId emit_number(const Constraints& c, bool integer_only);

  // --- strings (json_schema_string.cpp)
  ExprId emit_string(const Constraints& c);  // one expression per string signature
  std::string string_signature(const Constraints& c);  // every string constraint of c, written out
  ExprId json_chars(const std::vector<CharRange>& ranges);  // one code point of `ranges` as JSON string text
  // The automaton of the keys an ECMA-262 `pattern` matches (a search), for patternProperties.
  detail::CodePointDfa key_pattern_dfa(const std::string& pattern, const std::string& pointer);
  bool needs_string_dfa(const Constraints& c);  // more than one string constraint, or a negated one
  detail::CodePointDfa string_dfa(const Constraints& c);  // every string constraint of c, as one DFA
  bool string_satisfies(const std::string& value, const Constraints& c);  // string_dfa(c) accepts value
  ExprId json_char();                                           // one code point of a JSON string body
  ExprId string_literal(const std::string& utf8);               // "..." with JSON escapes
  ExprId string_body_excluding(const std::vector<std::string>& excluded, const std::string& pointer,
                               const std::string& keyword);  // body != each of them
  ExprId format_expr(const std::string& format, const std::string& pointer);  // the body of a format
  ExprId pattern_expr(const std::string& pattern, const std::string& pointer);
  // add_regex into `scratch`; a regex the front-end refuses is a SchemaError at pointer / keyword.
  ExprId add_schema_regex(Grammar& scratch, const std::string& regex, bool full_match, const std::string& pointer,
                          const char* keyword);
  // Copies the expressions 0..root of a regex grammar into g_, re-encoding each character as JSON
  // string text; throws a SchemaError at pointer / keyword if the regex holds a rule reference.
  ExprId copy_regex_as_string_body(const Grammar& scratch, ExprId root, const std::string& pointer,
                                   const std::string& keyword);

  void check_size();
  [[noreturn]] void fail(const std::string& pointer, const std::string& keyword, const std::string& what) const;
  // LimitError when `document` nests arrays and objects deeper than options.max_nesting.
  void check_nesting(const json& document, const std::string& name) const;

  Grammar g_;
  const json& root_;
  JsonSchemaOptions options_;
  std::unordered_map<std::string, Node> resources_;  // absolute URI (no fragment) -> resource root
  std::unordered_map<std::string, Node> anchors_;    // absolute URI + "#" + anchor -> schema
  std::string root_base_;
  std::deque<json> documents_;        // options_.documents, parsed
  std::deque<json> owned_;            // synthesized schemas (stable addresses)
  std::vector<Node> nodes_;           // targets of "$orchard:node" in synthesized schemas
  std::unordered_map<std::string, RuleId> rules_;  // conjunction key + indent depth -> rule
  // rule_key's content classes: per schema, its structural hash and whether it is free of
  // position-dependent keywords (memoized bottom-up); per hash, the schemas met with their class.
  struct Content {
    std::uint64_t hash = 0;
    bool position_free = true;
  };
  const Content& content_of(const json& schema);
  std::unordered_map<const json*, Content> content_;
  std::unordered_map<std::uint64_t, std::vector<std::pair<const json*, std::size_t>>> content_classes_;
  std::unordered_map<const json*, std::size_t> content_class_;
  std::map<std::string, ExprId> cache_;            // shared fragments (json_char, ws, ...)
  // json_chars by its ranges (8 bytes each): a trie of excluded keys asks for the same sets at many nodes.
  std::unordered_map<std::string, ExprId> chars_cache_;
  std::map<std::string, detail::CodePointDfa> string_dfas_;  // string_satisfies: by constraint signature
  int n_rules_ = 0;
  int negate_depth_ = 0;
  std::uint64_t next_lineage_ = 0;
  std::uint64_t work_ = 0;  // schemas visited and copied while collecting, against options_.max_expansion_work
  // Adds n to work_; LimitError (naming where's first schema) past options_.max_expansion_work.
  void charge_work(std::size_t n, const Conj& where);
  std::map<std::string, json*> canonical_;
};

// Keywords that only describe (no effect on validation, nothing refers to them): subschemas equal up to
// them are the same schema. `x-*` extensions are in the same case (is_description_only).
inline const std::set<std::string> kDescriptionKeywords = {"title",    "description", "examples", "example",
                                                           "default",  "$comment",    "deprecated", "readOnly",
                                                           "writeOnly"};
inline bool is_description_only(const std::string& keyword) {
  return kDescriptionKeywords.count(keyword) > 0 || keyword.rfind("x-", 0) == 0;
}

// Keywords whose value is a schema, an array of schemas, or an object of schemas (`items` is either of
// the first two; `dependencies` maps to schemas or to arrays of names).
inline constexpr const char* kSchemaValued[] = {"additionalProperties", "not", "if", "then", "else", "contains",
                                                "propertyNames", "additionalItems", "unevaluatedItems",
                                                "unevaluatedProperties", "items"};
inline constexpr const char* kSchemaArrays[] = {"allOf", "anyOf", "oneOf", "prefixItems", "items"};
inline constexpr const char* kSchemaMaps[] = {"properties", "patternProperties", "$defs", "definitions",
                                              "dependentSchemas", "dependencies"};

std::string escape_pointer_token(const std::string& token);
std::string json_text(const json& value);  // compact JSON of a value

}  // namespace pse::json_schema_detail
