// JSON Schema -> Grammar: the driver and the collection of a conjunction of schemas (allOf, $ref, and the
// schema itself) into one set of Constraints: a real merge (types intersected, bounds tightened, required
// united, object and array shapes kept per conjunct and merged property by property at emission).
// Combinators that are unions (anyOf, oneOf, if/then/else, not, dependentRequired, dependentSchemas) are
// left as Disjunctions that the emitter distributes over the rest of the conjunction.
#include "pse/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "json_schema_internal.h"
#include "json_nesting.h"

namespace pse::json_schema_detail {
namespace {

// Keywords with no effect on validation: the descriptive ones, and those that identify or hold schemas
// for references.
const std::set<std::string> kAnnotations = [] {
  std::set<std::string> all = kDescriptionKeywords;
  all.insert({"$schema", "$id", "$anchor", "$dynamicAnchor", "$defs", "definitions", "contentMediaType",
              "contentEncoding", "contentSchema", "$vocabulary"});
  return all;
}();

// The keywords that validate, in every draft (what a differently-cased spelling of is a mistake).
const std::set<std::string> kValidationKeywords = {
    "$ref", "$dynamicRef", "$recursiveRef", "additionalItems", "additionalProperties", "allOf", "anyOf", "const",
    "contains", "dependencies", "dependentRequired", "dependentSchemas", "else", "enum", "exclusiveMaximum",
    "exclusiveMinimum", "format", "if", "items", "maxContains", "maxItems", "maxLength", "maxProperties", "maximum",
    "minContains", "minItems", "minLength", "minProperties", "minimum", "multipleOf", "not", "oneOf", "pattern",
    "patternProperties", "prefixItems", "properties", "propertyNames", "required", "then", "type",
    "unevaluatedItems", "unevaluatedProperties", "uniqueItems"};

const std::string* validation_keyword_ignoring_case(const std::string& k) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string lk = lower(k);
  for (const std::string& v : kValidationKeywords)
    if (lower(v) == lk) return &v;
  return nullptr;
}

std::uint32_t type_bit(const std::string& name) {
  if (name == "null") return kNull;
  if (name == "boolean") return kBoolean;
  if (name == "object") return kObject;
  if (name == "array") return kArray;
  if (name == "string") return kString;
  if (name == "integer") return kInteger;
  if (name == "number") return kInteger | kNumber;
  return 0;
}

}  // namespace

bool Node::skips(const std::string& what) const {
  return std::find(skip.begin(), skip.end(), what) != skip.end();
}

std::string Node::key() const {
  std::string k = base + "|" + pointer + "|" + std::to_string(reinterpret_cast<std::uintptr_t>(schema));
  for (const auto& s : skip) k += "|-" + s;
  return k;
}

std::string json_text(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {

// A separator is its punctuation with only JSON whitespace around it.
void check_separator(const std::string& separator, char punctuation, const char* name) {
  const std::size_t at = separator.find(punctuation);
  const bool ok = at != std::string::npos && separator.find_first_not_of(" \t\n\r") == at &&
                  separator.find_first_not_of(" \t\n\r", at + 1) == std::string::npos;
  if (!ok) {
    throw InputError(fmt::format("[json_schema] {} must be '{}' with only whitespace around it, got \"{}\"", name,
                                 punctuation, separator));
  }
}

}  // namespace

Converter::Converter(const json& root, const JsonSchemaOptions& options) : root_(root), options_(options) {
  check_separator(options_.item_separator, ',', "item_separator");
  check_separator(options_.key_separator, ':', "key_separator");
}

void Converter::fail(const std::string& pointer, const std::string& keyword, const std::string& what) const {
  const std::string at = keyword.empty() ? pointer : pointer + "/" + escape_pointer_token(keyword);
  throw SchemaError(fmt::format("[json_schema] {}: {}", at.empty() ? "/" : at, what), pointer, keyword);
}

json* Converter::own(json value) {
  owned_.push_back(std::move(value));
  return &owned_.back();
}

static Node canonical(Converter& cv, std::map<std::string, json*>& table, const std::string& name, json value) {
  auto it = table.find(name);
  if (it == table.end()) it = table.emplace(name, cv.own(std::move(value))).first;
  return Node{it->second, "urn:orchard:synthesized", "/" + name, {}};
}

Node Converter::true_node() { return canonical(*this, canonical_, "true", json(true)); }
Node Converter::false_node() { return canonical(*this, canonical_, "false", json(false)); }
Node Converter::string_node() { return canonical(*this, canonical_, "string", json{{"type", "string"}}); }

Node Converter::child(const Node& parent, const json& schema, const std::string& suffix) const {
  return Node{&schema, base_of(schema, parent.base), parent.pointer + suffix, {}};
}

void Converter::check_size() {
  if (g_.exprs().size() > options_.max_grammar_exprs) {
    throw LimitError(fmt::format("[json_schema] the grammar grew past {} expressions", options_.max_grammar_exprs));
  }
}

void Converter::check_nesting(const json& document, const std::string& name) const {
  if (detail::json_nesting_exceeds(document, options_.max_nesting)) {
    throw LimitError(fmt::format("[json_schema] {}nests arrays and objects more than {} levels deep", name,
                                 options_.max_nesting));
  }
}

Grammar Converter::run() {
  check_nesting(root_, "the schema ");
  if (!root_.is_object() && !root_.is_boolean()) {
    fail("", "", fmt::format("a schema must be an object or a boolean, got {}", json_text(root_)));
  }
  root_base_ = "urn:orchard:schema";
  resources_.emplace(root_base_, Node{&root_, root_base_, "", {}});
  index_resources(root_, root_base_, "", 0);
  for (const auto& [uri, text] : options_.documents) {
    try {
      documents_.push_back(detail::parse_json_bounded<json>(
          text, options_.max_nesting, fmt::format("[json_schema] document \"{}\" ", uri)));
    } catch (const json::exception& e) {
      throw SchemaError(fmt::format("[json_schema] document \"{}\" is not JSON: {}", uri, e.what()), uri, "");
    }
    check_nesting(documents_.back(), fmt::format("document \"{}\" ", uri));
    const std::string base = base_of(documents_.back(), uri);
    resources_.emplace(uri, Node{&documents_.back(), uri, uri + "#", {}});
    index_resources(documents_.back(), uri, uri + "#", 0);
    (void)base;
  }
  Node root{&root_, base_of(root_, root_base_), "", {}};
  ExprId value = value_expr({root}, 0, 0);
  ExprId body = options_.layout == JsonLayout::kFlexible ? g_.add_sequence({ws(), value, ws()}) : value;
  RuleId r = g_.add_rule("root", body);
  g_.set_root(r);
  g_.validate();
  return std::move(g_);
}

void Converter::charge_work(std::size_t n, const Conj& where) {
  work_ += n;
  if (work_ > options_.max_expansion_work) {
    throw LimitError(fmt::format("[json_schema] {}: expanding the schema took more than {} steps (nested anyOf / "
                                 "oneOf / if that multiply out)", where.empty() ? "/" : where[0].pointer,
                                 options_.max_expansion_work));
  }
}

Constraints Converter::collect(const Conj& conj_in, int depth) {
  charge_work(conj_in.size() + 1, conj_in);
  Conj all = conj_in;
  Constraints c;
  std::set<std::string> seen;
  for (auto& n : all) {
    if (n.lineage.empty()) n.lineage = "/" + std::to_string(next_lineage_++);
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all.size() > 4096) throw LimitError("[json_schema] a conjunction of more than 4096 schemas");
    // Identity without the expanded-combinator marks: a node re-added by an allOf or $ref after one of its
    // combinators was expanded is the same node (the marked copy comes first in `all`).
    Node bare = all[i];
    bare.skip.clear();
    if (!seen.insert(bare.key()).second) continue;
    Conj extra;
    const std::size_t n_disjunctions = c.disjunctions.size();
    collect_node(all, i, c, extra, depth);
    for (auto& e : extra) {
      e.lineage = all[i].lineage + "/" + std::to_string(next_lineage_++);
      e.overlap = e.overlap || all[i].overlap;
      e.no_eval = e.no_eval || all[i].no_eval;
      all.push_back(std::move(e));
    }
    for (std::size_t k = n_disjunctions; k < c.disjunctions.size(); ++k) {
      for (auto& branch : c.disjunctions[k].branches) {
        for (auto& n : branch) {
          n.lineage = all[i].lineage + "/" + std::to_string(next_lineage_++);
          n.overlap = n.overlap || all[i].overlap;
          n.no_eval = n.no_eval || all[i].no_eval;
        }
      }
    }
  }
  // Disjunctions refer to nodes of `all` by index: the emitter needs `all`, kept in the first branch slot
  // of a pseudo-disjunction would be awkward, so store it in the constraints' carrier below.
  for (auto& d : c.disjunctions) {
    d.n_base = all.size();
    // Rebase each branch on the full conjunction, with the disjunction marked expanded. Each copy is
    // charged before it is made: ifs and anyOfs in one allOf multiply out here, and the copies, not the
    // visits, are what grows (a schema store entry with 125 ifs reached gigabytes before any bound).
    for (auto& branch : d.branches) {
      charge_work(all.size() + branch.size(), all);
      Conj full = all;
      full[d.node_index].skip.push_back(d.skip_token);
      for (auto& n : branch) full.push_back(std::move(n));
      branch = std::move(full);
    }
  }
  return c;
}

void Converter::collect_node(const Conj& conj, std::size_t index, Constraints& c, Conj& extra, int depth) {
  if (depth > static_cast<int>(options_.max_depth)) {
    throw LimitError(fmt::format("[json_schema] {}: schemas nested deeper than {}", conj[index].pointer,
                                 options_.max_depth));
  }
  const Node node = conj[index];
  const json& s = *node.schema;
  const std::string& ptr = node.pointer;
  if (s.is_boolean()) {
    if (!s.get<bool>()) {
      c.never = true;
      c.never_reason = ptr;
    }
    return;
  }
  if (!s.is_object()) fail(ptr, "", fmt::format("a schema must be an object or a boolean, got {}", json_text(s)));
  const int draft = draft_of(node);
  auto get = [&](const char* kw) -> const json* {
    auto it = s.find(kw);
    return it == s.end() ? nullptr : &*it;
  };
  auto need_count = [&](const char* kw, const json& v) -> std::uint32_t {
    if (v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
      return static_cast<std::uint32_t>(std::min<std::uint64_t>(v.get<std::uint64_t>(), kUnbounded - 1));
    }
    if (v.is_number_float() && v.get<double>() >= 0 && decimal_from_json(v).is_integer()) {
      double d = v.get<double>();
      return d >= static_cast<double>(kUnbounded - 1) ? kUnbounded - 1 : static_cast<std::uint32_t>(d);
    }
    fail(ptr, kw, fmt::format("\"{}\" must be a non-negative integer, got {}", kw, json_text(v)));
  };
  auto need_schema = [&](const char* kw, const json& v) {
    if (!v.is_object() && !v.is_boolean()) {
      fail(ptr, kw, fmt::format("\"{}\" must be a schema (object or boolean), got {}", kw, json_text(v)));
    }
  };
  auto need_schema_array = [&](const char* kw, const json& v) {
    if (!v.is_array() || v.empty()) fail(ptr, kw, fmt::format("\"{}\" must be a non-empty array of schemas", kw));
    for (const auto& e : v) need_schema(kw, e);
  };
  const bool old_ref = draft <= 7;
  if (const json* ref = get("$ref")) {
    if (!ref->is_string()) fail(ptr, "$ref", fmt::format("\"$ref\" must be a string, got {}", json_text(*ref)));
    extra.push_back(resolve_ref(node, ref->get<std::string>(), "$ref"));
    if (old_ref) return;  // draft <= 7: the siblings of $ref are ignored
  }
  for (auto& [kw, v] : s.items()) {
    if ((kw == "contentMediaType" || kw == "contentEncoding") && draft <= 7) {
      fail(ptr, kw, fmt::format("\"{}\" (an assertion in draft 7) is not supported", kw));
    }
    if (kAnnotations.count(kw) || kw == "$ref" || kw.rfind("x-", 0) == 0) continue;
    if (kw == "id" && draft <= 4) continue;
    const std::string k = kw;
    if (k == "type") {
      std::uint32_t bits = 0;
      auto add = [&](const json& t) {
        std::uint32_t b = t.is_string() ? type_bit(t.get<std::string>()) : 0;
        if (b == 0) fail(ptr, "type", fmt::format("unknown type {}", json_text(t)));
        bits |= b;
      };
      if (v.is_array()) {
        for (const auto& t : v) add(t);
      } else {
        add(v);
      }
      c.types &= bits;
    } else if (k == "enum" || k == "const") {
      std::vector<json> vals;
      if (k == "const") {
        vals.push_back(v);
      } else {
        if (!v.is_array()) fail(ptr, "enum", fmt::format("\"enum\" must be an array, got {}", json_text(v)));
        for (const auto& e : v) vals.push_back(e);
      }
      if (!c.values) {
        c.values = vals;
      } else {
        std::vector<json> kept;
        const ValueSet allowed(vals);
        for (const auto& a : *c.values) {
          if (allowed.contains(a)) kept.push_back(a);
        }
        c.values = kept;
      }
      c.values_pointer = ptr;
    } else if (k == "multipleOf") {
      if (!v.is_number() || !(v.get<double>() > 0)) {
        fail(ptr, k, fmt::format("\"multipleOf\" must be a number > 0, got {}", json_text(v)));
      }
      c.multiple_of.emplace_back(decimal_from_json(v), ptr);
    } else if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") {
      const bool lower = k == "minimum" || k == "exclusiveMinimum";
      Bound b;
      if (v.is_boolean()) {
        if (draft > 4) fail(ptr, k, fmt::format("\"{}\" must be a number, got {}", k, json_text(v)));
        continue;  // draft-04: read together with minimum / maximum below
      }
      if (!v.is_number()) fail(ptr, k, fmt::format("\"{}\" must be a number, got {}", k, json_text(v)));
      b.value = decimal_from_json(v);
      b.exclusive = k[0] == 'e';
      if (!b.exclusive) {
        const json* flag = get(lower ? "exclusiveMinimum" : "exclusiveMaximum");
        if (flag && flag->is_boolean()) b.exclusive = flag->get<bool>();
      }
      std::optional<Bound>& slot = lower ? c.lower : c.upper;
      if (!slot) {
        slot = b;
      } else {
        int cmp = compare(b.value, slot->value);
        bool tighter = lower ? cmp > 0 : cmp < 0;
        if (tighter || (cmp == 0 && b.exclusive)) slot = b;
      }
    } else if (k == "minLength") {
      c.min_length = std::max(c.min_length, need_count("minLength", v));
      c.length_pointer = ptr;
    } else if (k == "maxLength") {
      c.max_length = std::min(c.max_length, need_count("maxLength", v));
      c.length_pointer = ptr;
    } else if (k == "pattern") {
      if (!v.is_string()) fail(ptr, k, fmt::format("\"pattern\" must be a string, got {}", json_text(v)));
      c.patterns.emplace_back(v.get<std::string>(), ptr);
    } else if (k == "format") {
      if (!v.is_string()) fail(ptr, k, fmt::format("\"format\" must be a string, got {}", json_text(v)));
      if (options_.format == JsonSchemaOptions::Format::kAnnotate) continue;
      const std::string name = v.get<std::string>();
      if (is_defined_format(name)) {
        c.formats.emplace_back(name, ptr);
      } else if (options_.unknown_keywords == JsonSchemaOptions::UnknownKeywords::kError) {
        fail(ptr, k, fmt::format("unknown format \"{}\"", name));
      } else if (const std::string* meant = defined_format_ignoring_case(name)) {
        // "datetime" is no format, so a validator ignores it, but its author meant "date-time".
        fail(ptr, k, fmt::format("unknown format \"{}\" (did you mean \"{}\"?)", name, *meant));
      }
      // Any other name is a custom format: an annotation, as the specification says of unknown formats.
    } else if (k == "properties" || k == "additionalProperties") {
      if (k == "additionalProperties" && get("properties")) continue;  // read with "properties"
      ObjectShape shape;
      shape.pointer = ptr;
      shape.lineage = node.lineage;
      shape.overlap = node.overlap;
      shape.evaluates = !s.contains("$orchard:no_eval") && !node.no_eval;
      if (const json* props = get("properties")) {
        if (!props->is_object()) fail(ptr, "properties", "\"properties\" must be an object");
        for (auto& [name, sub] : props->items()) {
          need_schema("properties", sub);
          shape.properties.emplace_back(name, child(node, sub, "/properties/" + escape_pointer_token(name)));
        }
      }
      if (const json* add = get("additionalProperties")) {
        need_schema("additionalProperties", *add);
        shape.additional = child(node, *add, "/additionalProperties");
      }
      c.object_shapes.push_back(std::move(shape));
    } else if (k == "patternProperties") {
      if (!v.is_object()) fail(ptr, k, "\"patternProperties\" must be an object");
      for (auto& [pattern, sub] : v.items()) {
        need_schema("patternProperties", sub);
        // A pattern whose schema is true (or {}) constrains nothing, unless a sibling
        // "additionalProperties" constrains the keys that match no pattern: then it exempts its keys.
        auto is_true_schema = [](const json& x) {
          if (x.is_boolean()) return x.get<bool>();
          return x.is_object() && std::all_of(x.items().begin(), x.items().end(),
                                              [](const auto& kv) { return kAnnotations.count(kv.key()) > 0; });
        };
        const json* add = get("additionalProperties");
        if (is_true_schema(sub) && (add == nullptr || is_true_schema(*add))) continue;
        c.pattern_properties.push_back(
            {pattern, child(node, sub, "/patternProperties/" + escape_pointer_token(pattern)), ptr});
      }
    } else if (k == "propertyNames") {
      need_schema("propertyNames", v);
      c.property_names.push_back(child(node, v, "/propertyNames"));
    } else if (k == "required") {
      if (!v.is_array()) fail(ptr, k, fmt::format("\"required\" must be an array of strings, got {}", json_text(v)));
      for (const auto& r : v) {
        if (!r.is_string()) fail(ptr, k, fmt::format("\"required\" must hold strings, got {}", json_text(r)));
        if (std::find(c.required.begin(), c.required.end(), r.get<std::string>()) == c.required.end()) {
          c.required.push_back(r.get<std::string>());
        }
      }
    } else if (k == "minProperties") {
      c.min_properties = std::max(c.min_properties, need_count("minProperties", v));
      c.properties_count_pointer = ptr;
    } else if (k == "maxProperties") {
      c.max_properties = std::min(c.max_properties, need_count("maxProperties", v));
      c.properties_count_pointer = ptr;
    } else if (k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies") {
      if (!v.is_object()) fail(ptr, k, fmt::format("\"{}\" must be an object", k));
      for (auto& [trigger, dep] : v.items()) {
        const std::string token = k + "/" + trigger;
        if (node.skips(token)) continue;
        Disjunction d;
        d.node_index = index;
        d.skip_token = token;
        d.pointer = ptr;
        d.keyword = k;
        // Either the trigger is absent, or it is present and the dependency holds.
        json absent = {{"properties", {{trigger, false}}}, {"$orchard:no_eval", true}};
        json present = {{"required", json::array({trigger})}};
        Conj with;
        with.push_back(Node{own(present), node.base, ptr + "/" + k, {}});
        if (dep.is_array() && k != "dependentSchemas") {
          for (const auto& r : dep) {
            if (!r.is_string()) fail(ptr, k, fmt::format("\"{}\" lists must hold strings", k));
          }
          with.push_back(Node{own(json{{"required", dep}}), node.base, ptr + "/" + k, {}});
        } else if (k != "dependentRequired") {
          need_schema(k.c_str(), dep);
          with.push_back(child(node, dep, "/" + k + "/" + escape_pointer_token(trigger)));
        } else {
          fail(ptr, k, "\"dependentRequired\" values must be arrays of strings");
        }
        d.branches.push_back({Node{own(absent), node.base, ptr + "/" + k, {}}});
        d.branches.push_back(std::move(with));
        c.disjunctions.push_back(std::move(d));
      }
    } else if (k == "items" || k == "prefixItems" || k == "additionalItems") {
      const json* items = get("items");
      const json* prefix = get("prefixItems");
      if (k != "items" && (items || (k == "additionalItems" && prefix))) continue;  // read with the others
      if (k == "additionalItems" && !(items && items->is_array())) continue;  // no effect without array items
      ArrayShape shape;
      shape.pointer = ptr;
      shape.lineage = node.lineage;
      shape.overlap = node.overlap;
      shape.evaluates = !node.no_eval;
      if (prefix) {
        if (!prefix->is_array()) fail(ptr, "prefixItems", "\"prefixItems\" must be an array of schemas");
        for (std::size_t i = 0; i < prefix->size(); ++i) {
          need_schema("prefixItems", (*prefix)[i]);
          shape.prefix.push_back(child(node, (*prefix)[i], "/prefixItems/" + std::to_string(i)));
        }
      }
      if (items && items->is_array()) {
        if (prefix) fail(ptr, "items", "array-form \"items\" beside \"prefixItems\"");
        for (std::size_t i = 0; i < items->size(); ++i) {
          need_schema("items", (*items)[i]);
          shape.prefix.push_back(child(node, (*items)[i], "/items/" + std::to_string(i)));
        }
        if (const json* add = get("additionalItems")) {
          need_schema("additionalItems", *add);
          shape.items = child(node, *add, "/additionalItems");
        }
      } else if (items) {
        need_schema("items", *items);
        shape.items = child(node, *items, "/items");
      }
      c.array_shapes.push_back(std::move(shape));
    } else if (k == "minItems") {
      c.min_items = std::max(c.min_items, need_count("minItems", v));
    } else if (k == "maxItems") {
      c.max_items = std::min(c.max_items, need_count("maxItems", v));
    } else if (k == "contains") {
      need_schema("contains", v);
      c.contains.push_back(child(node, v, "/contains"));
      c.contains_lineage.push_back(node.lineage);
      c.contains_pointer = ptr;
      if (c.contains.size() > 1) fail(ptr, k, "two \"contains\" in one allOf are not supported");
      if (const json* mn = get("minContains")) c.min_contains = need_count("minContains", *mn);
      if (const json* mx = get("maxContains")) c.max_contains = need_count("maxContains", *mx);
    } else if (k == "minContains" || k == "maxContains") {
      need_count(k.c_str(), v);  // read with "contains"; alone they have no effect
    } else if (k == "uniqueItems") {
      if (!v.is_boolean()) fail(ptr, k, fmt::format("\"uniqueItems\" must be a boolean, got {}", json_text(v)));
      if (v.get<bool>()) {
        c.unique_items = true;
        c.unique_pointer = ptr;
      }
    } else if (k == "allOf") {
      need_schema_array("allOf", v);
      for (std::size_t i = 0; i < v.size(); ++i) extra.push_back(child(node, v[i], "/allOf/" + std::to_string(i)));
    } else if (k == "anyOf" || k == "oneOf") {
      need_schema_array(k.c_str(), v);
      if (node.skips(k)) continue;
      Disjunction d;
      d.node_index = index;
      d.skip_token = k;
      d.exclusive = k == "oneOf";
      d.pointer = ptr;
      d.keyword = k;
      for (std::size_t i = 0; i < v.size(); ++i) d.branches.push_back({child(node, v[i], "/" + k + "/" + std::to_string(i))});
      c.disjunctions.push_back(std::move(d));
    } else if (k == "not") {
      need_schema("not", v);
      if (node.skips(k)) continue;
      auto neg = negate(child(node, v, "/not"));
      if (!neg) fail(ptr, "not", fmt::format("\"not\" of {} cannot be enforced exactly", json_text(v)));
      Disjunction d;
      d.node_index = index;
      d.skip_token = k;
      d.pointer = ptr;
      d.keyword = k;
      d.branches = std::move(*neg);
      for (auto& b : d.branches) {
        for (auto& n : b) n.no_eval = true;
      }
      c.disjunctions.push_back(std::move(d));
    } else if (k == "if" || k == "then" || k == "else") {
      if (k != "if") {
        need_schema(k.c_str(), v);
        continue;  // read with "if"; alone they have no effect
      }
      need_schema("if", v);
      if (node.skips(k)) continue;
      Disjunction d;
      d.node_index = index;
      d.skip_token = k;
      d.pointer = ptr;
      d.keyword = k;
      Conj yes{child(node, v, "/if")};
      if (const json* then = get("then")) yes.push_back(child(node, *then, "/then"));
      const json* els = get("else");
      auto neg = negate(child(node, v, "/if"));
      if (!neg) fail(ptr, "if", fmt::format("the negation of \"if\" {} cannot be enforced exactly", json_text(v)));
      d.branches.push_back(std::move(yes));
      for (auto& n : *neg) {
        for (auto& x : n) x.no_eval = true;
        if (els) n.push_back(child(node, *els, "/else"));
        d.branches.push_back(std::move(n));
      }
      c.disjunctions.push_back(std::move(d));
    } else if (k == "unevaluatedProperties" || k == "unevaluatedItems") {
      need_schema(k.c_str(), v);
      Node u = child(node, v, "/" + k);
      u.lineage = node.lineage;  // the holder's lineage: what it may see
      u.overlap = node.overlap;
      (k == "unevaluatedProperties" ? c.unevaluated_properties : c.unevaluated_items).push_back(u);
    } else if (k == "$orchard:no_eval") {
      continue;
    } else if (k == "$dynamicRef" || k == "$recursiveRef") {
      fail(ptr, k, fmt::format("\"{}\" is not supported", k));
    } else if (k == "$recursiveAnchor") {
      continue;
    } else if (k == "$orchard:node") {
      if (!v.is_number_unsigned() || v.get<std::size_t>() >= nodes_.size()) fail(ptr, k, "unknown keyword");
      extra.push_back(nodes_[v.get<std::size_t>()]);
    } else if (k == "$orchard:exclude" && v.is_array()) {
      for (const auto& e : v) c.excluded.push_back(e);
    } else if ((k == "$orchard:not_pattern" || k == "$orchard:not_format") && v.is_string()) {
      (k == "$orchard:not_pattern" ? c.not_patterns : c.not_formats).emplace_back(v.get<std::string>(), ptr);
    } else if (k == "$orchard:non_integer") {
      c.types &= ~static_cast<std::uint32_t>(kInteger);
    } else if (options_.unknown_keywords == JsonSchemaOptions::UnknownKeywords::kError) {
      fail(ptr, k, fmt::format("unknown keyword \"{}\"", k));
    } else if (const std::string* meant = validation_keyword_ignoring_case(k)) {
      // "maxlength" is no keyword, so a validator ignores it, but its author meant "maxLength": say so
      // rather than silently accept what the author meant to forbid.
      fail(ptr, k, fmt::format("unknown keyword \"{}\" (did you mean \"{}\"?)", k, *meant));
    }
  }
}

// The complement of a schema as a union of conjunctions, for the forms where it is exact:
// not (A and B) = not A or not B, keyword by keyword, for keywords that do not read their siblings.
std::optional<std::vector<Conj>> Converter::negate(const Node& node) {
  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& depth) : d(++depth) {}
    ~DepthGuard() { --d; }
  } guard(negate_depth_);
  if (negate_depth_ > static_cast<int>(options_.max_depth)) {
    throw LimitError(fmt::format("[json_schema] {}: \"not\" nested deeper than {}", node.pointer, options_.max_depth));
  }
  const json& s = *node.schema;
  if (s.is_boolean()) {
    if (s.get<bool>()) return std::vector<Conj>{};  // not true: nothing
    return std::vector<Conj>{{Node{own(json::object()), node.base, node.pointer, {}}}};
  }
  if (!s.is_object()) return std::nullopt;
  auto make = [&](json schema) { return Node{own(std::move(schema)), node.base, node.pointer, {}}; };
  // Everything whose type is not one of `bits` (integer and number spelled apart).
  auto other_types = [&](std::uint32_t bits, std::vector<Conj>& out) {
    json names = json::array();
    for (auto [bit, name] : std::initializer_list<std::pair<std::uint32_t, const char*>>{
             {kNull, "null"}, {kBoolean, "boolean"}, {kObject, "object"}, {kArray, "array"}, {kString, "string"}}) {
      if (!(bits & bit)) names.push_back(name);
    }
    if (!(bits & kInteger) && !(bits & kNumber)) {
      names.push_back("number");
    } else if (!(bits & kInteger)) {
      out.push_back({make(json{{"type", "integer"}})});
    } else if (!(bits & kNumber)) {
      out.push_back({make(json{{"type", "number"}, {"$orchard:non_integer", true}})});
    }
    if (!names.empty()) out.push_back({make(json{{"type", names}})});
  };
  std::vector<std::string> keys;
  for (auto& [k, v] : s.items()) {
    // Annotations, and keywords of no draft where collect() ignores them, constrain nothing.
    const bool ignored_unknown = options_.unknown_keywords == JsonSchemaOptions::UnknownKeywords::kIgnore &&
                                 !kValidationKeywords.count(k) && k.rfind("$orchard:", 0) != 0 && k != "$recursiveAnchor" &&
                                 validation_keyword_ignoring_case(k) == nullptr;
    if (!kAnnotations.count(k) && !ignored_unknown && k.rfind("x-", 0) != 0) keys.push_back(k);
  }
  if (keys.empty()) return std::vector<Conj>{};  // not {}: nothing
  const int draft = draft_of(node);
  if (s.contains("$ref") && draft <= 7) keys = {"$ref"};
  static const std::set<std::string> kCoupled = {"additionalProperties", "additionalItems", "then", "else",
                                                 "minContains", "maxContains", "contains", "items", "prefixItems",
                                                 "patternProperties", "unevaluatedItems", "unevaluatedProperties"};
  if (keys.size() > 1) {
    std::vector<Conj> out;
    for (const auto& k : keys) {
      if (kCoupled.count(k)) return std::nullopt;
      if ((k == "exclusiveMinimum" || k == "exclusiveMaximum") && s[k].is_boolean()) return std::nullopt;
      auto part = negate(Node{own(json{{k, s[k]}}), node.base, node.pointer, {}});
      if (!part) return std::nullopt;
      for (auto& b : *part) out.push_back(std::move(b));
    }
    return out;
  }
  const std::string& k = keys[0];
  const json& v = s[k];
  std::vector<Conj> out;
  if (k == "not") {
    out.push_back({child(node, v, "/not")});
  } else if (k == "$ref") {
    if (!v.is_string()) return std::nullopt;
    return negate(resolve_ref(node, v.get<std::string>(), "$ref"));
  } else if (k == "allOf" && v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      auto part = negate(child(node, v[i], "/allOf/" + std::to_string(i)));
      if (!part) return std::nullopt;
      for (auto& b : *part) out.push_back(std::move(b));
    }
  } else if (k == "anyOf" && v.is_array()) {
    // not (A or B) = not A and not B: one conjunction per choice of a branch of each negation.
    std::vector<Conj> acc{{}};
    for (std::size_t i = 0; i < v.size(); ++i) {
      auto part = negate(child(node, v[i], "/anyOf/" + std::to_string(i)));
      if (!part) return std::nullopt;
      std::vector<Conj> next;
      for (const auto& a : acc) {
        for (const auto& b : *part) {
          Conj both = a;
          both.insert(both.end(), b.begin(), b.end());
          next.push_back(std::move(both));
        }
      }
      if (next.size() > 64) return std::nullopt;
      acc = std::move(next);
    }
    return acc;
  } else if (k == "type") {
    std::uint32_t bits = 0;
    for (const json& e : v.is_array() ? v : json::array({v})) {
      if (!e.is_string() || type_bit(e.get<std::string>()) == 0) return std::nullopt;
      bits |= type_bit(e.get<std::string>());
    }
    other_types(bits, out);
  } else if (k == "required" && v.is_array()) {
    for (const auto& r : v) {
      if (!r.is_string()) return std::nullopt;
      out.push_back({make(json{{"type", "object"}, {"properties", {{r.get<std::string>(), false}}}, {"$orchard:no_eval", true}})});
    }
  } else if (k == "const" || k == "enum") {
    std::vector<json> vals;
    if (k == "const") {
      vals.push_back(v);
    } else {
      if (!v.is_array()) return std::nullopt;
      for (const auto& e : v) vals.push_back(e);
    }
    // Any value but these (exact for scalars; objects and arrays are refused).
    for (const auto& e : vals) {
      if (type_of_value(e) & (kObject | kArray)) return std::nullopt;
    }
    out.push_back({make(json{{"$orchard:exclude", vals}})});
  } else if (k == "properties" && v.is_object()) {
    for (auto& [name, sub] : v.items()) {
      auto inner = negate(child(node, sub, "/properties/" + escape_pointer_token(name)));
      if (!inner) return std::nullopt;
      for (auto& branch : *inner) {
        json all = json::array();
        for (auto& n : branch) {
          nodes_.push_back(n);
          all.push_back(json{{"$orchard:node", nodes_.size() - 1}});
        }
        out.push_back({make(json{{"type", "object"},
                                 {"required", json::array({name})},
                                 {"properties", {{name, {{"allOf", all}}}}},
                                 {"$orchard:no_eval", true}})});
      }
    }
  } else if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") {
    if (!v.is_number()) return std::nullopt;
    static const std::map<std::string, std::string> kFlip = {{"minimum", "exclusiveMaximum"},
                                                             {"maximum", "exclusiveMinimum"},
                                                             {"exclusiveMinimum", "maximum"},
                                                             {"exclusiveMaximum", "minimum"}};
    other_types(kInteger | kNumber, out);
    out.push_back({make(json{{"type", "number"}, {kFlip.at(k), v}})});
  } else if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" ||
             k == "minProperties" || k == "maxProperties") {
    if (!v.is_number_integer() && !v.is_number_unsigned()) return std::nullopt;
    const std::int64_t n = v.get<std::int64_t>();
    const std::string base_kw = k.substr(3);  // Length / Items / Properties
    const char* type = base_kw == "Length" ? "string" : base_kw == "Items" ? "array" : "object";
    other_types(type_bit(type), out);
    if (k.rfind("min", 0) == 0) {
      if (n > 0) out.push_back({make(json{{"type", type}, {"max" + base_kw, n - 1}})});
    } else {
      out.push_back({make(json{{"type", type}, {"min" + base_kw, n + 1}})});
    }
  } else if (k == "pattern" && v.is_string()) {
    // Not a string, or a string with no match (the complement of the pattern's automaton).
    other_types(kString, out);
    out.push_back({make(json{{"type", "string"}, {"$orchard:not_pattern", v}})});
  } else if (k == "format" && v.is_string()) {
    if (options_.format == JsonSchemaOptions::Format::kAnnotate) return out;  // not {}: nothing
    const std::string name = v.get<std::string>();
    if (!is_defined_format(name)) {
      // An unknown format is an annotation (not {}: nothing), unless strict or misspelt (an error, as in collect).
      if (options_.unknown_keywords == JsonSchemaOptions::UnknownKeywords::kError || defined_format_ignoring_case(name)) {
        return std::nullopt;
      }
      return out;
    }
    other_types(kString, out);
    out.push_back({make(json{{"type", "string"}, {"$orchard:not_format", v}})});
  } else if (k == "$orchard:node" && v.is_number_unsigned() && v.get<std::size_t>() < nodes_.size()) {
    return negate(nodes_[v.get<std::size_t>()]);
  } else {
    return std::nullopt;
  }
  return out;
}

}  // namespace pse::json_schema_detail

namespace pse {

Grammar json_schema_to_grammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options) {
  json_schema_detail::Converter converter(schema, options);
  try {
    return converter.run();
  } catch (const nlohmann::ordered_json::exception& e) {
    // A value of an unexpected kind deep in the schema (never expected: each keyword checks its value).
    throw SchemaError(fmt::format("[json_schema] malformed schema: {}", e.what()), "", "");
  }
}

Grammar json_schema_to_grammar(const nlohmann::json& schema, const JsonSchemaOptions& options) {
  // nlohmann::json keeps object members sorted by name: "properties" order is alphabetical here.
  if (detail::json_nesting_exceeds(schema, options.max_nesting)) {
    throw LimitError(fmt::format("[json_schema] the schema nests arrays and objects more than {} levels deep",
                                 options.max_nesting));
  }
  std::string text;
  try {
    text = schema.dump();
  } catch (const nlohmann::json::exception& e) {
    throw SchemaError(fmt::format("[json_schema] the schema holds a string that is not UTF-8: {}", e.what()), "", "");
  }
  return json_schema_to_grammar(nlohmann::ordered_json::parse(text), options);
}

Grammar json_schema_to_grammar(std::string_view schema_text, const JsonSchemaOptions& options) {
  nlohmann::ordered_json schema;
  try {
    schema = detail::parse_json_bounded<nlohmann::ordered_json>(schema_text, options.max_nesting,
                                                                "[json_schema] the schema ");
  } catch (const nlohmann::ordered_json::exception& e) {
    throw SchemaError(fmt::format("[json_schema] the schema is not JSON: {}", e.what()), "", "");
  }
  return json_schema_to_grammar(schema, options);
}

}  // namespace pse
