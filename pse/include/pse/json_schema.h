// JSON Schema -> Grammar: the JSON texts whose value validates against the schema (draft 2020-12, also
// reading the draft-04/06/07 spellings). Every keyword is enforced exactly or rejected with a SchemaError
// naming the keyword and the JSON pointer of the schema at fault: never a silent widening or narrowing of
// the set of valid values. See docs/json-schema.md for the supported keywords and the text layouts.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "pse/grammar.h"

namespace pse {

enum class JsonLayout : std::uint8_t {
  kFlexible,  // whitespace wherever JSON allows it, each run at most max_whitespace_run bytes of " \t\n\r"
  kCompact,   // one line, the separators of the options between items and after keys: {"a":1,"b":[2,3]}
  kIndented,  // one member per line, indent_width spaces per level, ": " after keys (json.dumps(indent=n))
};

enum class JsonPropertyOrder : std::uint8_t {
  kSchemaOrder,  // declared properties in the order of `properties` (optional ones skippable), then others
  // Members in any order: each declared property at most once, the required ones present, other members
  // (when allowed) anywhere among them. Exact, by tracking which declared properties are present: objects
  // with more than 9 declared properties are a SchemaError in this mode.
  kAnyOrder,
};

struct JsonSchemaOptions {
  JsonLayout layout = JsonLayout::kFlexible;
  std::uint32_t max_whitespace_run = 4;  // kFlexible: the longest whitespace run between two tokens
  // kCompact: what goes between items and between a key and its value, as json.dumps's separators: "," and
  // ":" (the default: no whitespace at all), or ", " and ": " (json.dumps' own default). Each is its
  // punctuation with only spaces, tabs and newlines around it (json_schema_to_grammar throws InputError
  // otherwise).
  std::string item_separator = ",";
  std::string key_separator = ":";
  std::uint32_t indent_width = 2;        // kIndented
  // kIndented: members nested deeper than this many levels are written on one line with ", " and ": "
  // (exact indentation of unbounded nesting is not context-free; values are never restricted by it).
  std::uint32_t indent_levels = 16;
  JsonPropertyOrder property_order = JsonPropertyOrder::kSchemaOrder;
  // The draft when the schema has no (recognized) "$schema": 4, 6, 7, 2019 or 2020. It decides how "$ref"
  // with sibling keywords reads (draft <= 7: the siblings are ignored).
  int default_draft = 2020;
  // "format": kAssert enforces the formats listed in docs/json-schema.md (and rejects the others with a
  // SchemaError); kAnnotate ignores "format", as draft 2020-12 does by default (format-annotation).
  enum class Format : std::uint8_t { kAssert, kAnnotate } format = Format::kAssert;
  // Keywords of no JSON Schema draft ("faker", "_format", "javaType", ...). kIgnore (default): annotations,
  // as the specification says (they never change which instances are valid, so ignoring them neither
  // widens nor narrows); a different-case spelling of a validation keyword ("maxlength") is still a
  // SchemaError, since its author meant a constraint. kError: every such keyword is a SchemaError (strict
  // mode, for catching typos in one's own schemas). Vendor extensions "x-..." are always annotations.
  enum class UnknownKeywords : std::uint8_t { kError, kIgnore } unknown_keywords = UnknownKeywords::kIgnore;
  // Other schema documents that "$ref" may name, by absolute URI (e.g. "http://example.com/item.json"),
  // as JSON text. References to a URI that is neither here nor in the schema are a SchemaError.
  std::map<std::string, std::string> documents;
  // Bounds that keep conversion finite on hostile input (LimitError past them).
  std::uint32_t max_depth = 200;            // nesting of schemas and $ref chains being expanded
  // Nesting of arrays and objects anywhere in the schema document (the values of const, enum, default
  // and examples included), checked before anything else walks it.
  std::uint32_t max_nesting = 1000;
  std::uint32_t max_grammar_exprs = 2000000;  // size of the grammar produced
  std::uint64_t max_expansion_work = 1000000;  // schemas visited or copied while merging and distributing combinators
};

// Converts a schema (an object or a boolean) to a Grammar whose root rule is the JSON text of a valid value.
// Throws SchemaError (pointer + keyword) for a malformed schema or a feature that cannot be enforced exactly,
// LimitError past a bound of `options`. Nothing is kept from a failed call. The nlohmann::json overload sees
// object members sorted by name (nlohmann::json stores them so): property order is alphabetical there; the
// ordered_json and text overloads keep the order of "properties".
Grammar json_schema_to_grammar(const nlohmann::json& schema, const JsonSchemaOptions& options = {});
Grammar json_schema_to_grammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {});

// The same from schema text. Throws SchemaError (pointer "", keyword "") when the text is not JSON.
Grammar json_schema_to_grammar(std::string_view schema_text, const JsonSchemaOptions& options = {});

}  // namespace pse
