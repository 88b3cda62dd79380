// JSON Schema -> grammar of values: one rule per conjunction of schemas (so recursion through $ref works),
// disjunctions distributed over the rest of the conjunction (oneOf only when its branches are provably
// disjoint), then one alternative per JSON type that the constraints leave. Objects list the declared
// properties in schema order (optional ones skippable), then the other members; arrays follow prefixItems,
// then items. Whitespace follows the layout option.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "json_schema_internal.h"

namespace pse::json_schema_detail {

std::uint32_t type_of_value(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return kNull;
    case json::value_t::boolean: return kBoolean;
    case json::value_t::object: return kObject;
    case json::value_t::array: return kArray;
    case json::value_t::string: return kString;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return kInteger;
    case json::value_t::number_float: return decimal_from_json(v).is_integer() ? kInteger : kNumber;
    default: return 0;
  }
}

namespace {

// Whether a schema of `lineage` lies at or under the schema of lineage `holder` (lineages are
// "/"-joined paths).
bool lineage_within(const std::string& lineage, const std::string& holder) {
  return lineage == holder || lineage.rfind(holder + "/", 0) == 0;
}

std::uint32_t code_points(const std::string& s) {
  std::uint32_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

bool has_object_constraints(const Constraints& c) {
  return !c.object_shapes.empty() || !c.pattern_properties.empty() || !c.property_names.empty() ||
         !c.required.empty() || c.min_properties > 0 || c.max_properties != kUnbounded ||
         !c.unevaluated_properties.empty();
}

bool has_array_constraints(const Constraints& c) {
  return !c.array_shapes.empty() || c.min_items > 0 || c.max_items != kUnbounded || !c.contains.empty() ||
         c.unique_items || !c.unevaluated_items.empty();
}

}  // namespace

ExprId Converter::ws() {
  auto it = cache_.find("ws");
  if (it != cache_.end()) return it->second;
  ExprId e = g_.add_repeat(g_.add_char_class({{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}}), 0, options_.max_whitespace_run);
  cache_["ws"] = e;
  return e;
}

ExprId Converter::open_ws(std::uint32_t d) {
  switch (options_.layout) {
    case JsonLayout::kFlexible: return ws();
    case JsonLayout::kCompact: return g_.add_empty();
    case JsonLayout::kIndented:
      if (d >= options_.indent_levels) return g_.add_empty();
      return g_.add_bytes("\n" + std::string((d + 1) * options_.indent_width, ' '));
  }
  return g_.add_empty();
}

ExprId Converter::sep(std::uint32_t d) {
  switch (options_.layout) {
    case JsonLayout::kFlexible: return g_.add_sequence({ws(), g_.add_bytes(","), ws()});
    case JsonLayout::kCompact: return g_.add_bytes(options_.item_separator);
    case JsonLayout::kIndented:
      if (d >= options_.indent_levels) return g_.add_bytes(", ");
      return g_.add_bytes(",\n" + std::string((d + 1) * options_.indent_width, ' '));
  }
  return g_.add_empty();
}

ExprId Converter::close_ws(std::uint32_t d) {
  switch (options_.layout) {
    case JsonLayout::kFlexible: return ws();
    case JsonLayout::kCompact: return g_.add_empty();
    case JsonLayout::kIndented:
      if (d >= options_.indent_levels) return g_.add_empty();
      return g_.add_bytes("\n" + std::string(d * options_.indent_width, ' '));
  }
  return g_.add_empty();
}

ExprId Converter::colon() {
  switch (options_.layout) {
    case JsonLayout::kFlexible: return g_.add_sequence({ws(), g_.add_bytes(":"), ws()});
    case JsonLayout::kCompact: return g_.add_bytes(options_.key_separator);
    case JsonLayout::kIndented: return g_.add_bytes(": ");
  }
  return g_.add_empty();
}

ExprId Converter::empty_inner() { return options_.layout == JsonLayout::kFlexible ? ws() : g_.add_empty(); }

// Any property order (JsonPropertyOrder::kAnyOrder) tracks which declared members are present: at most
// this many of them, and this many (presence, count) states.
constexpr std::size_t kMaxAnyOrderMembers = 9;
constexpr std::size_t kMaxAnyOrderStates = 4096;

// An overlapping oneOf written exactly (each branch and the complements of the branches it may overlap)
// multiplies out; past this many alternatives it is a SchemaError.
constexpr std::size_t kMaxOneOfAlternatives = 256;

ExprId Converter::value_expr(const Conj& conj, std::uint32_t indent_depth, int depth) {
  if (depth > static_cast<int>(options_.max_depth)) {
    throw LimitError(fmt::format("[json_schema] {}: schemas nested deeper than {} (or a $ref chain that long)",
                                 conj.empty() ? "" : conj[0].pointer, options_.max_depth));
  }
  const std::uint32_t d = options_.layout == JsonLayout::kIndented ? std::min(indent_depth, options_.indent_levels) : 0;
  indent_depth = d;
  std::string key = std::to_string(d);
  for (const auto& n : conj) key += "&" + rule_key(n);
  auto found = rules_.find(key);
  if (found != rules_.end()) return g_.add_rule_ref(found->second);
  const RuleId rule = g_.declare_rule(fmt::format("v{}", rules_.size()));
  rules_.emplace(key, rule);
  Constraints c = collect(conj, depth);
  ExprId body;
  if (!c.disjunctions.empty()) {
    Disjunction& dj = c.disjunctions.front();
    if (dj.exclusive) {
      // oneOf: exactly one branch matches. Provably disjoint branches are a plain union; a branch that may
      // overlap others becomes itself and not each of them (their complements, when expressible), which is
      // exact: the union of "B_i and no other B_j" is the values matching exactly one branch.
      std::vector<Constraints> branch_c;
      for (const auto& b : dj.branches) branch_c.push_back(collect(b, depth + 1));
      const std::size_t n = branch_c.size();
      std::vector<std::vector<std::size_t>> overlaps(n);
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = i + 1; j < n; ++j) {
          if (!provably_disjoint(branch_c[i], branch_c[j], depth + 1)) {
            overlaps[i].push_back(j);
            overlaps[j].push_back(i);
          }
        }
      }
      std::vector<Conj> exact;
      bool rewritten = false;
      for (std::size_t i = 0; i < n; ++i) {
        std::vector<Conj> alts{dj.branches[i]};
        for (std::size_t j : overlaps[i]) {
          rewritten = true;
          // not(B_j) for B_j's own nodes (after the base): the union of their complements.
          std::vector<Conj> not_j;
          for (std::size_t k = dj.n_base; k < dj.branches[j].size(); ++k) {
            auto neg = negate(dj.branches[j][k]);
            if (!neg) {
              fail(dj.pointer, dj.keyword,
                   fmt::format("oneOf branches {} and {} may both match a value, and branch {} has no exact "
                               "complement; oneOf is enforced when its branches are provably disjoint (distinct types, "
                               "constants or required discriminators) or their complements are expressible",
                               std::min(i, j), std::max(i, j), j));
            }
            for (auto& conj : *neg) {
              for (auto& node : conj) node.no_eval = true;
              not_j.push_back(std::move(conj));
            }
          }
          std::vector<Conj> next;
          for (const Conj& a : alts) {
            for (const Conj& b : not_j) {
              Conj both = a;
              both.insert(both.end(), b.begin(), b.end());
              next.push_back(std::move(both));
            }
          }
          alts = std::move(next);
          if (alts.size() > kMaxOneOfAlternatives) {
            fail(dj.pointer, dj.keyword,
                 fmt::format("oneOf branches overlap and their exact form needs over {} alternatives",
                             kMaxOneOfAlternatives));
          }
        }
        for (auto& a : alts) exact.push_back(std::move(a));
      }
      if (rewritten) {
        // Alternatives of one value may overlap now: their annotations count as anyOf branches' do.
        for (auto& b : exact) {
          for (std::size_t k = dj.n_base; k < b.size(); ++k) b[k].overlap = true;
        }
        dj.branches = std::move(exact);
      }
    }
    if (dj.keyword == "anyOf") {
      // Annotations of every matching branch count for unevaluated*: mark overlapping branches.
      bool disjoint = true;
      std::vector<Constraints> branch_c;
      for (const auto& b : dj.branches) branch_c.push_back(collect(b, depth + 1));
      for (std::size_t i = 0; i < branch_c.size() && disjoint; ++i) {
        for (std::size_t j = i + 1; j < branch_c.size() && disjoint; ++j) {
          disjoint = provably_disjoint(branch_c[i], branch_c[j], depth + 1);
        }
      }
      if (!disjoint) {
        for (auto& b : dj.branches) {
          for (std::size_t k = dj.n_base; k < b.size(); ++k) b[k].overlap = true;
        }
      }
    }
    std::vector<ExprId> alts;
    for (const auto& b : dj.branches) alts.push_back(value_expr(b, indent_depth, depth + 1));
    body = alts.empty() ? g_.add_char_class({}) : alts.size() == 1 ? alts[0] : g_.add_choice(alts);
  } else {
    body = emit_constraints(conj, c, indent_depth, depth);
  }
  g_.define_rule(rule, body);
  check_size();
  return g_.add_rule_ref(rule);
}

namespace {

// What a keyword's value holds: a schema, an array or an object of schemas, or a plain value.
enum class Holds { kValue, kSchema, kSchemaArray, kSchemaMap };

Holds holds(const std::string& keyword, const json& value) {
  auto in = [&](const auto& list) { return std::find(std::begin(list), std::end(list), keyword) != std::end(list); };
  if (value.is_array()) return in(kSchemaArrays) ? Holds::kSchemaArray : Holds::kValue;
  if ((value.is_object() || value.is_boolean()) && in(kSchemaValued)) return Holds::kSchema;
  if (value.is_object() && in(kSchemaMaps)) return Holds::kSchemaMap;
  return Holds::kValue;
}

bool is_schema_shaped(const json& v) { return v.is_object() || v.is_boolean(); }

// Schemas equal up to annotation keywords, at any depth of subschemas (never inside plain values:
// a property named "description" or a const holding one is compared whole).
bool same_schema(const json& a, const json& b);

bool same_keyword_value(const std::string& keyword, const json& x, const json& y) {
  switch (holds(keyword, x)) {
    case Holds::kSchema:
      return same_schema(x, y);
    case Holds::kSchemaArray:
      if (!y.is_array() || x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!same_schema(x[i], y[i])) return false;
      }
      return true;
    case Holds::kSchemaMap:
      if (!y.is_object() || x.size() != y.size()) return false;
      for (auto it = x.begin(); it != x.end(); ++it) {
        auto other = y.find(it.key());
        if (other == y.end()) return false;
        if (is_schema_shaped(*it) ? !same_schema(*it, *other) : *it != *other) return false;
      }
      return true;
    case Holds::kValue:
      return x == y;
  }
  return false;
}

bool same_schema(const json& a, const json& b) {
  if (!a.is_object() || !b.is_object()) return a == b;
  std::size_t n = 0;
  for (auto it = a.begin(); it != a.end(); ++it) {
    if (is_description_only(it.key())) continue;
    ++n;
    auto other = b.find(it.key());
    if (other == b.end() || !same_keyword_value(it.key(), *it, *other)) return false;
  }
  for (auto it = b.begin(); it != b.end(); ++it) n -= is_description_only(it.key()) ? 0 : 1;
  return n == 0;
}

}  // namespace

const Converter::Content& Converter::content_of(const json& schema) {
  if (auto it = content_.find(&schema); it != content_.end()) return it->second;
  Content c;
  auto mix = [&](std::uint64_t v) { c.hash = (c.hash ^ v) * 0x100000001B3ULL + 0x9e3779b97f4a7c15ULL; };
  auto mix_schema = [&](const json& sub) {
    const Content& v = content_of(sub);
    mix(v.hash);
    c.position_free = c.position_free && v.position_free;
  };
  mix(static_cast<std::uint64_t>(schema.type()));
  if (schema.is_object()) {
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (is_description_only(it.key())) continue;  // as same_schema
      // Their meaning depends on the path that reached the schema (dynamic scope, sibling annotations).
      static const std::set<std::string> kPositional = {"$dynamicRef", "$recursiveRef", "$dynamicAnchor",
                                                        "$recursiveAnchor", "unevaluatedProperties",
                                                        "unevaluatedItems"};
      if (kPositional.count(it.key())) c.position_free = false;
      mix(std::hash<std::string>{}(it.key()));
      switch (holds(it.key(), *it)) {
        case Holds::kSchema:
          mix_schema(*it);
          break;
        case Holds::kSchemaArray:
          for (const json& e : *it) mix_schema(e);
          break;
        case Holds::kSchemaMap:
          for (auto m = it->begin(); m != it->end(); ++m) {
            mix(std::hash<std::string>{}(m.key()));
            if (is_schema_shaped(*m)) {
              mix_schema(*m);
            } else {
              mix(std::hash<json>{}(*m));
            }
          }
          break;
        case Holds::kValue:
          mix(std::hash<json>{}(*it));
          break;
      }
    }
  } else {
    mix(std::hash<json>{}(schema));
  }
  return content_.emplace(&schema, c).first->second;
}

std::string Converter::rule_key(const Node& node) {
  // Equal schemas in different places (the same {"type": "string"} under every property, whatever its
  // description) get one rule: fewer rules and automaton states, and the same tables for all of them.
  if (node.schema == nullptr) return node.key();
  const Content& content = content_of(*node.schema);
  if (!content.position_free) return node.key();
  auto [it, fresh] = content_class_.emplace(node.schema, 0);
  if (fresh) {
    auto& bucket = content_classes_[content.hash];
    auto same = std::find_if(bucket.begin(), bucket.end(), [&](const auto& p) { return same_schema(*p.first, *node.schema); });
    it->second = same != bucket.end() ? same->second : content_class_.size();
    if (same == bucket.end()) bucket.emplace_back(node.schema, it->second);
  }
  std::string k = node.base + "|=" + std::to_string(it->second);
  for (const auto& s : node.skip) k += "|-" + s;
  return k;
}

namespace {

// Consistent with nlohmann's ==: numbers hash by their value as a double (1, 1u and 1.0 alike), object
// members in any order. Recursion is bounded by JsonSchemaOptions::max_nesting, checked on entry.
std::size_t value_hash(const json& v) {
  switch (v.type()) {
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return std::hash<double>{}(v.get<double>());
    case json::value_t::string: return std::hash<std::string>{}(v.get_ref<const std::string&>());
    case json::value_t::array: {
      std::size_t h = 0x9E3779B97F4A7C15ull;
      for (const json& x : v) h = (h ^ value_hash(x)) * 0x100000001B3ull;
      return h;
    }
    case json::value_t::object: {
      std::size_t h = 0xC2B2AE3D27D4EB4Full;
      for (const auto& [k, x] : v.items()) h += std::hash<std::string>{}(k) * 31 + value_hash(x);
      return h;
    }
    default: return std::hash<int>{}(static_cast<int>(v.type())) ^ (v.is_boolean() && v.get<bool>() ? 1 : 0);
  }
}

}  // namespace

bool ValueSet::insert(const json& value) {
  if (contains(value)) return false;
  index_.emplace(value_hash(value), &value);
  return true;
}

bool ValueSet::contains(const json& value) const {
  auto [begin, end] = index_.equal_range(value_hash(value));
  return std::any_of(begin, end, [&](const auto& entry) { return *entry.second == value; });
}

bool Converter::value_satisfies(const json& v, const Constraints& c, const std::string& pointer) {
  for (const auto& e : c.excluded) {
    if (e == v) return false;
  }
  if (c.values) {
    if (std::none_of(c.values->begin(), c.values->end(), [&](const json& x) { return x == v; })) return false;
  }
  return value_satisfies_besides_values(v, c, pointer);
}

bool Converter::value_satisfies_besides_values(const json& v, const Constraints& c, const std::string& pointer) {
  const std::uint32_t t = type_of_value(v);
  if (!(c.types & t)) return false;
  if (t & (kInteger | kNumber)) {
    Decimal x = decimal_from_json(v);
    if (c.lower) {
      int cmp = compare(x, c.lower->value);
      if (cmp < 0 || (cmp == 0 && c.lower->exclusive)) return false;
    }
    if (c.upper) {
      int cmp = compare(x, c.upper->value);
      if (cmp > 0 || (cmp == 0 && c.upper->exclusive)) return false;
    }
    if (!c.multiple_of.empty()) {
      for (const auto& [m, p] : c.multiple_of) {
        double q = v.get<double>() / std::stod(to_string(m));
        if (q != static_cast<double>(static_cast<long long>(q))) return false;
        (void)p;
      }
    }
  }
  if (t == kString) {
    const std::string& s = v.get_ref<const std::string&>();
    std::uint32_t n = code_points(s);
    if (n < c.min_length || n > c.max_length) return false;
    if (needs_string_dfa(c) || !c.patterns.empty() || !c.formats.empty()) return string_satisfies(s, c);
  }
  if (t == kObject && has_object_constraints(c)) {
    if (!c.unevaluated_properties.empty()) {
      fail(pointer, "enum", "enum / const objects together with \"unevaluatedProperties\": not supported");
    }
    for (const auto& r : c.required)
      if (!v.contains(r)) return false;
    if (v.size() < c.min_properties || v.size() > c.max_properties) return false;
    std::vector<detail::CodePointDfa> dfas;
    for (const auto& pp : c.pattern_properties) dfas.push_back(key_pattern_dfa(pp.pattern, pp.pointer));
    for (const auto& [key, value] : v.items()) {
      if (!c.property_names.empty()) {
        Conj names = c.property_names;
        names.push_back(string_node());
        if (!conj_satisfies(json(key), names, 0)) return false;
      }
      const std::u32string text = detail::decode_utf8(key).value_or(std::u32string());
      std::vector<bool> matched(dfas.size());
      for (std::size_t i = 0; i < dfas.size(); ++i) matched[i] = dfas[i].accepts(text);
      if (!conj_satisfies(value, member_conj(c, &key, matched), 0)) return false;
    }
  }
  if (t == kArray && has_array_constraints(c)) {
    if (!c.unevaluated_items.empty()) fail(pointer, "enum", "enum / const arrays together with \"unevaluatedItems\": not supported");
    if (v.size() < c.min_items || v.size() > c.max_items) return false;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!conj_satisfies(v[i], item_conj(c, i), 0)) return false;
    for (const Node& n : c.contains) {
      std::uint32_t count = 0;
      for (const auto& item : v) count += conj_satisfies(item, {n}, 0) ? 1 : 0;
      if (count < c.min_contains.value_or(1) || count > c.max_contains.value_or(kUnbounded)) return false;
    }
    if (c.unique_items) {
      for (std::size_t i = 0; i < v.size(); ++i)
        for (std::size_t j = i + 1; j < v.size(); ++j)
          if (v[i] == v[j]) return false;
    }
  }
  return true;
}

bool Converter::conj_satisfies(const json& v, const Conj& conj, int depth) {
  if (depth > static_cast<int>(options_.max_depth)) {
    throw LimitError(fmt::format("[json_schema] {}: a value checked deeper than {}", conj.empty() ? "" : conj[0].pointer,
                                 options_.max_depth));
  }
  Constraints c = collect(conj, depth);
  if (c.never) return false;
  if (!c.disjunctions.empty()) {
    // Each branch is the whole conjunction with one alternative: any branch (anyOf, if/then/else, not,
    // dependencies), or exactly one (oneOf).
    const Disjunction& dj = c.disjunctions.front();
    std::size_t n = 0;
    for (const auto& b : dj.branches) {
      if (conj_satisfies(v, b, depth + 1) && (++n > 1 || !dj.exclusive)) break;
    }
    return dj.exclusive ? n == 1 : n >= 1;
  }
  return value_satisfies(v, c, conj.empty() ? std::string() : conj[0].pointer);
}

Conj Converter::member_conj(const Constraints& c, const std::string* name, const std::vector<bool>& matched) {
  const auto& patterns = c.pattern_properties;
  Conj conj;
  for (std::size_t i = 0; i < patterns.size(); ++i)
    if (matched[i]) conj.push_back(patterns[i].schema);
  for (const auto& shape : c.object_shapes) {
    auto it = name == nullptr ? shape.properties.end()
                              : std::find_if(shape.properties.begin(), shape.properties.end(), [&](const auto& p) { return p.first == *name; });
    // additionalProperties of a schema applies to keys that neither its properties nor its patterns match.
    bool by_pattern = false;
    for (std::size_t i = 0; i < patterns.size(); ++i) by_pattern = by_pattern || (matched[i] && patterns[i].pointer == shape.pointer);
    if (it != shape.properties.end()) {
      conj.push_back(it->second);
    } else if (!by_pattern && shape.additional) {
      conj.push_back(*shape.additional);
    }
  }
  if (conj.empty()) conj.push_back(true_node());
  return conj;
}

Conj Converter::item_conj(const Constraints& c, std::size_t i) {
  Conj conj;
  for (const auto& s : c.array_shapes) {
    if (i < s.prefix.size()) {
      conj.push_back(s.prefix[i]);
    } else if (s.items) {
      conj.push_back(*s.items);
    }
  }
  if (conj.empty()) conj.push_back(true_node());
  return conj;
}

ExprId Converter::emit_literal(const json& value, std::uint32_t d) {
  switch (value.type()) {
    case json::value_t::object: {
      if (value.empty()) return g_.add_sequence({g_.add_bytes("{"), empty_inner(), g_.add_bytes("}")});
      std::vector<ExprId> parts{g_.add_bytes("{"), open_ws(d)};
      bool first = true;
      for (auto& [k, v] : value.items()) {
        if (!first) parts.push_back(sep(d));
        first = false;
        parts.push_back(string_literal(k));
        parts.push_back(colon());
        parts.push_back(emit_literal(v, d + 1));
      }
      parts.push_back(close_ws(d));
      parts.push_back(g_.add_bytes("}"));
      return g_.add_sequence(parts);
    }
    case json::value_t::array: {
      if (value.empty()) return g_.add_sequence({g_.add_bytes("["), empty_inner(), g_.add_bytes("]")});
      std::vector<ExprId> parts{g_.add_bytes("["), open_ws(d)};
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (i) parts.push_back(sep(d));
        parts.push_back(emit_literal(value[i], d + 1));
      }
      parts.push_back(close_ws(d));
      parts.push_back(g_.add_bytes("]"));
      return g_.add_sequence(parts);
    }
    case json::value_t::string: return string_literal(value.get<std::string>());
    case json::value_t::number_float: {
      // The value, written as an integer (when it is one) or as its shortest decimal, with optional
      // trailing zeros; 1.0 and 1 are the same JSON Schema value.
      Decimal x = decimal_from_json(value);
      std::string head = (x.negative ? "-" : "") + (x.int_digits.empty() ? std::string("0") : x.int_digits);
      if (x.frac_digits.empty()) {
        ExprId zeros = g_.add_sequence({g_.add_bytes("."), g_.add_repeat(g_.add_bytes("0"), 1, kUnbounded)});
        return g_.add_sequence({g_.add_bytes(head), g_.add_repeat(zeros, 0, 1)});
      }
      return g_.add_sequence({g_.add_bytes(head + "." + x.frac_digits), g_.add_repeat(g_.add_bytes("0"), 0, kUnbounded)});
    }
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: {
      ExprId zeros = g_.add_sequence({g_.add_bytes("."), g_.add_repeat(g_.add_bytes("0"), 1, kUnbounded)});
      return g_.add_sequence({g_.add_bytes(value.dump()), g_.add_repeat(zeros, 0, 1)});
    }
    default: return g_.add_bytes(value.dump());
  }
}

ExprId Converter::emit_constraints(const Conj& conj, Constraints& c, std::uint32_t d, int depth) {
  (void)conj;
  if (c.never) return g_.add_char_class({});
  std::vector<ExprId> alts;
  if (c.values) {
    const ValueSet excluded(c.excluded);
    ValueSet seen;
    for (const auto& v : *c.values) {
      if (!seen.insert(v) || excluded.contains(v)) continue;
      if (value_satisfies_besides_values(v, c, c.values_pointer)) alts.push_back(emit_literal(v, d));
    }
    return alts.empty() ? g_.add_char_class({}) : alts.size() == 1 ? alts[0] : g_.add_choice(alts);
  }
  for (const auto& e : c.excluded) {
    if ((type_of_value(e) & (kObject | kArray)) && (c.types & type_of_value(e))) {
      fail(c.values_pointer, "not", fmt::format("excluding the value {} cannot be enforced exactly", json_text(e)));
    }
  }
  auto excluded = [&](const json& v) {
    return std::any_of(c.excluded.begin(), c.excluded.end(), [&](const json& e) { return e == v; });
  };
  if ((c.types & kNull) && !excluded(json(nullptr))) alts.push_back(g_.add_bytes("null"));
  if (c.types & kBoolean) {
    if (!excluded(json(true))) alts.push_back(g_.add_bytes("true"));
    if (!excluded(json(false))) alts.push_back(g_.add_bytes("false"));
  }
  if (c.types & (kInteger | kNumber)) alts.push_back(emit_number(c, !(c.types & kNumber)));
  if (c.types & kString) alts.push_back(emit_string(c));
  if (c.types & kArray) alts.push_back(emit_array(c, d, depth));
  if (c.types & kObject) alts.push_back(emit_object(c, d, depth));
  return alts.empty() ? g_.add_char_class({}) : alts.size() == 1 ? alts[0] : g_.add_choice(alts);
}

ExprId Converter::emit_object(Constraints& c, std::uint32_t d, int depth) {
  // Merge the shapes: a key's schema is, per shape, its property schema or else the shape's additional one.
  std::vector<std::string> order;
  for (const auto& shape : c.object_shapes) {
    for (const auto& [name, node] : shape.properties) {
      if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
    }
  }
  for (const auto& r : c.required) {
    if (std::find(order.begin(), order.end(), r) == order.end()) order.push_back(r);
  }
  // patternProperties: each pattern's automaton (a search, as JSON Schema patterns are).
  const auto& patterns = c.pattern_properties;
  std::vector<detail::CodePointDfa> pattern_dfa;
  for (const auto& pp : patterns) pattern_dfa.push_back(key_pattern_dfa(pp.pattern, pp.pointer));
  auto member_schemas = [&](const std::string* name, const std::vector<bool>& matched) { return member_conj(c, name, matched); };
  std::map<std::string, Conj> prop_conj;
  for (const auto& name : order) {
    std::vector<bool> matched(patterns.size());
    const std::u32string key = detail::decode_utf8(name).value_or(std::u32string());
    for (std::size_t i = 0; i < patterns.size(); ++i) matched[i] = pattern_dfa[i].accepts(key);
    prop_conj[name] = member_conj(c, &name, matched);
  }
  Conj additional;
  for (const auto& shape : c.object_shapes) {
    if (shape.additional) additional.push_back(*shape.additional);
  }
  if (!c.unevaluated_properties.empty()) {
    // Exact when every evaluating shape lies under the holder (its own keywords, $ref, allOf, and
    // branches that cannot overlap): then the unevaluated members are those no such shape declares.
    if (c.unevaluated_properties.size() > 1) {
      fail(c.unevaluated_properties[1].pointer, "unevaluatedProperties", "two \"unevaluatedProperties\" in one allOf are not supported");
    }
    const Node& u = c.unevaluated_properties[0];
    auto under = [&](const std::string& lineage) { return lineage_within(lineage, u.lineage); };
    bool any_additional = false;
    std::set<std::string> evaluated;
    for (const auto& shape : c.object_shapes) {
      if (!under(shape.lineage) || shape.overlap) {
        fail(u.pointer, "", "\"unevaluatedProperties\" with properties from outside its schema or from overlapping anyOf branches is not supported");
      }
      if (!shape.evaluates) continue;
      if (shape.additional) any_additional = true;
      for (const auto& [name, node] : shape.properties) evaluated.insert(name);
    }
    if (!any_additional) {
      for (const auto& name : order) {
        if (!evaluated.count(name)) prop_conj[name].push_back(u);
      }
      additional.push_back(u);
    }
  }
  if (additional.empty()) additional.push_back(true_node());
  const bool additional_allowed = !collect(additional, depth + 1).never;
  // propertyNames: checked on declared names; it is the key grammar of the other members.
  std::optional<ExprId> names_expr;
  if (!c.property_names.empty()) {
    Conj names = c.property_names;
    names.push_back(string_node());
    Constraints nc = collect(names, depth + 1);
    if (!nc.disjunctions.empty()) fail(c.property_names[0].pointer, "propertyNames", "combinators inside \"propertyNames\" are not supported");
    for (auto it = order.begin(); it != order.end();) {
      const bool ok = !nc.never && value_satisfies(json(*it), nc, c.property_names[0].pointer);
      if (!ok) {
        // A declared name that propertyNames forbids can never be present.
        if (std::find(c.required.begin(), c.required.end(), *it) != c.required.end()) return g_.add_char_class({});
        prop_conj[*it].push_back(false_node());
      }
      ++it;
    }
    if (additional_allowed) {
      if (!order.empty()) {
        fail(c.property_names[0].pointer, "propertyNames",
             "\"propertyNames\" together with declared properties and other members allowed is not supported");
      }
      names_expr = emit_constraints(names, nc, d, depth + 1);
    }
  }
  // Members: declared keys (present or skipped) in order, then other members.
  struct Member {
    std::string name;
    bool required = false;
    bool forbidden = false;
    ExprId expr = 0;
  };
  std::vector<Member> members;
  for (const auto& name : order) {
    Member m;
    m.name = name;
    m.required = std::find(c.required.begin(), c.required.end(), name) != c.required.end();
    m.forbidden = collect(prop_conj[name], depth + 1).never;
    if (m.forbidden && m.required) return g_.add_char_class({});
    if (!m.forbidden) {
      m.expr = g_.add_sequence({string_literal(name), colon(), value_expr(prop_conj[name], d + 1, depth + 1)});
    }
    members.push_back(std::move(m));
  }
  std::optional<ExprId> other;
  if (!patterns.empty()) {
    if (!c.property_names.empty() || !c.unevaluated_properties.empty()) {
      fail(patterns[0].pointer, "patternProperties",
           "\"patternProperties\" together with \"propertyNames\" or \"unevaluatedProperties\" is not supported");
    }
    other = pattern_members(order, pattern_dfa, member_schemas, patterns[0].pointer, d, depth);
  } else if (additional_allowed) {
    const std::string& at = c.object_shapes.empty() ? c.properties_count_pointer : c.object_shapes[0].pointer;
    ExprId key = names_expr ? *names_expr
                            : g_.add_sequence({g_.add_bytes("\""), order.empty() ? g_.add_repeat(json_char(), 0, kUnbounded) : string_body_excluding(order, at, "properties"), g_.add_bytes("\"")});
    other = g_.add_sequence({key, colon(), value_expr(additional, d + 1, depth + 1)});
  }
  const std::uint32_t min_p = c.min_properties;
  const std::uint32_t max_p = c.max_properties;
  if (min_p > max_p) return g_.add_char_class({});
  // Count states: how many members so far, capped where the bounds stop caring.
  const std::uint32_t cap = max_p != kUnbounded ? max_p : min_p;
  if (cap > 64 && members.size() * (cap + 1) > 20000) {
    fail(c.properties_count_pointer, "maxProperties", "minProperties / maxProperties too large to enforce here");
  }
  bool empty_ok = min_p == 0 && std::none_of(members.begin(), members.end(), [](const Member& m) { return m.required; });
  if (options_.property_order == JsonPropertyOrder::kAnyOrder) {
    // A finite automaton over (which declared members are present, how many members so far, counted
    // exactly up to where the bounds stop caring), written as one graph: each declared member at most once,
    // other members anywhere, accepting when the required ones are present and the count is in range.
    std::vector<std::size_t> live;
    for (std::size_t i = 0; i < members.size(); ++i)
      if (!members[i].forbidden) live.push_back(i);
    const std::string& where = c.object_shapes.empty() ? c.properties_count_pointer : c.object_shapes[0].pointer;
    if (live.size() > kMaxAnyOrderMembers) {
      fail(where, "properties",
           fmt::format("any property order is enforced for at most {} declared properties, not {}", kMaxAnyOrderMembers,
                       live.size()));
    }
    std::uint32_t required = 0;
    for (std::size_t j = 0; j < live.size(); ++j)
      if (members[live[j]].required) required |= 1u << j;
    const std::uint32_t top = max_p != kUnbounded ? max_p : std::max<std::uint32_t>(min_p, 1);
    std::vector<ExprId> labels;  // per live member, then other: [first, later] pairs
    for (std::size_t j : live) {
      labels.push_back(members[j].expr);
      labels.push_back(g_.add_sequence({sep(d), members[j].expr}));
    }
    if (other) {
      labels.push_back(*other);
      labels.push_back(g_.add_sequence({sep(d), *other}));
    }
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> ids{{{0, 0}, 0}};
    std::vector<std::pair<std::uint32_t, std::uint32_t>> states{{0, 0}};
    std::vector<GraphEdge> edges;
    std::vector<std::uint32_t> accepting;
    for (std::uint32_t s = 0; s < states.size(); ++s) {
      // (Not a structured binding: the lambda below captures k, which clang 14 refuses.)
      const std::uint32_t mask = states[s].first, k = states[s].second;
      if ((mask & required) == required && k >= std::max<std::uint32_t>(min_p, 1)) accepting.push_back(s);
      if (max_p != kUnbounded && k >= max_p) continue;
      const std::uint32_t nk = std::min(k + 1, top);
      auto go = [&](std::uint32_t next_mask, std::uint32_t label) {
        auto [it, fresh] = ids.emplace(std::make_pair(next_mask, nk), static_cast<std::uint32_t>(states.size()));
        if (fresh) {
          if (states.size() >= kMaxAnyOrderStates) {
            fail(where, "properties",
                 fmt::format("any property order here needs more than {} states (declared properties times counts)",
                             kMaxAnyOrderStates));
          }
          states.emplace_back(next_mask, nk);
        }
        edges.push_back({s, it->second, label + (k == 0 ? 0u : 1u)});
      };
      for (std::uint32_t j = 0; j < live.size(); ++j)
        if (!(mask & (1u << j))) go(mask | (1u << j), 2 * j);
      if (other) go(mask, static_cast<std::uint32_t>(2 * live.size()));
    }
    std::vector<ExprId> shapes;
    if (!accepting.empty()) {
      const ExprId inner = g_.add_graph(static_cast<std::uint32_t>(states.size()), std::move(edges), std::move(accepting), labels);
      shapes.push_back(g_.add_sequence({g_.add_bytes("{"), open_ws(d), inner, close_ws(d), g_.add_bytes("}")}));
    }
    if (empty_ok) shapes.push_back(g_.add_sequence({g_.add_bytes("{"), empty_inner(), g_.add_bytes("}")}));
    return shapes.empty() ? g_.add_char_class({}) : shapes.size() == 1 ? shapes[0] : g_.add_choice(shapes);
  }
  // The members in order as one graph over (next declared member i, members so far k (capped where the
  // bounds stop caring), where: none emitted yet, some emitted, or a separator just read): an edge per
  // member present, an empty edge per optional one skipped, a separator edge from each state after a
  // member, then the other members. A member's edges from "none yet" and "separator read" share their
  // label and target, so the automaton holds one copy of it per (i, k). Separator states never accept
  // (no trailing comma). One graph, not a rule per tail of the list: a parse meets each member at the
  // same stack height instead of one frame deeper per member (objects of a hundred optional properties
  // nested a hundred frames deep).
  enum Where : std::uint8_t { kNoneYet, kAfterMember, kAfterSeparator };
  std::vector<ExprId> labels;  // per member; then the empty label, the separator, the other members' per k
  for (const Member& m : members) labels.push_back(m.forbidden ? g_.add_char_class({}) : m.expr);
  const auto empty_label = static_cast<std::uint32_t>(labels.size());
  labels.push_back(g_.add_empty());
  const auto sep_label = static_cast<std::uint32_t>(labels.size());
  labels.push_back(sep(d));
  std::map<std::uint32_t, std::uint32_t> other_label;  // by k
  std::map<std::tuple<std::size_t, std::uint32_t, Where>, std::uint32_t> ids;
  std::vector<std::tuple<std::size_t, std::uint32_t, Where>> graph_states;
  std::vector<GraphEdge> edges;
  std::vector<std::uint32_t> accepting;
  auto state_of = [&](std::size_t i, std::uint32_t k, Where w) {
    auto [it, fresh] = ids.emplace(std::make_tuple(i, k, w), static_cast<std::uint32_t>(graph_states.size()));
    if (fresh) graph_states.emplace_back(i, k, w);
    return it->second;
  };
  std::vector<std::uint8_t> required_from(members.size() + 1, 0);  // a required member at i or later
  for (std::size_t i = members.size(); i-- > 0;) required_from[i] = members[i].required || required_from[i + 1];
  state_of(0, 0, kNoneYet);
  std::optional<std::uint32_t> done;  // after the other members
  for (std::uint32_t s = 0; s < graph_states.size(); ++s) {
    const auto [i, k, where] = graph_states[s];
    if (i > members.size()) continue;  // done
    if (where == kAfterMember) {
      // The rest may all be skipped: accept here (the separator states never do).
      if (k >= min_p && !required_from[i]) accepting.push_back(s);
      edges.push_back({s, state_of(i, k, kAfterSeparator), sep_label});
      continue;
    }
    if (i == members.size()) {
      // Other members: a of them with k + a in [min, max].
      if (other && (max_p == kUnbounded || k < max_p)) {
        auto [it, fresh] = other_label.emplace(k, static_cast<std::uint32_t>(labels.size()));
        if (fresh) {
          const std::uint32_t a_min = std::max<std::uint32_t>(1, min_p > k ? min_p - k : 0);
          const std::uint32_t a_max = max_p == kUnbounded ? kUnbounded : max_p - k;
          ExprId rest = g_.add_repeat(g_.add_sequence({sep(d), *other}), a_min - 1, a_max == kUnbounded ? kUnbounded : a_max - 1);
          labels.push_back(g_.add_sequence({*other, rest}));
        }
        if (!done) {
          done = static_cast<std::uint32_t>(graph_states.size());
          graph_states.emplace_back(members.size() + 1, 0, kAfterMember);  // a state of its own, past the members
          accepting.push_back(*done);
        }
        edges.push_back({s, *done, it->second});
      }
      continue;
    }
    const Member& m = members[i];
    if (!m.forbidden && (max_p == kUnbounded || k < max_p)) {
      const std::uint32_t nk = max_p == kUnbounded ? std::min(k + 1, cap) : k + 1;
      edges.push_back({s, state_of(i + 1, nk, kAfterMember), static_cast<std::uint32_t>(i)});
    }
    if (!m.required) edges.push_back({s, state_of(i + 1, k, where), empty_label});
  }
  const ExprId body = g_.add_graph(static_cast<std::uint32_t>(graph_states.size()), std::move(edges), std::move(accepting), std::move(labels));
  std::vector<ExprId> shapes;
  shapes.push_back(g_.add_sequence({g_.add_bytes("{"), open_ws(d), body, close_ws(d), g_.add_bytes("}")}));
  if (empty_ok) shapes.push_back(g_.add_sequence({g_.add_bytes("{"), empty_inner(), g_.add_bytes("}")}));
  return shapes.size() == 1 ? shapes[0] : g_.add_choice(shapes);
}

std::optional<ExprId> Converter::pattern_members(
    const std::vector<std::string>& declared, const std::vector<detail::CodePointDfa>& pattern_dfa,
    const std::function<Conj(const std::string*, const std::vector<bool>&)>& schemas_for, const std::string& pointer,
    std::uint32_t d, int depth) {
  constexpr std::size_t kMaxStates = 4096;
  constexpr std::size_t kMaxRegions = 32;
  auto too_big = [&] {
    fail(pointer, "patternProperties",
         fmt::format("these patternProperties split the keys into more than {} regions or {} automaton states", kMaxRegions,
                     kMaxStates));
  };
  std::optional<detail::CodePointDfa> keys =
      declared.empty() ? detail::dfa_of_length(0, kUnbounded, 1) : detail::dfa_excluding(declared, kMaxStates);
  if (!keys) too_big();
  std::vector<detail::CodePointDfa> negated;
  for (const auto& p : pattern_dfa) {
    auto n = detail::complement(p, kMaxStates);
    if (!n) too_big();
    negated.push_back(std::move(*n));
  }
  std::vector<ExprId> members;
  std::size_t regions = 0;
  std::vector<bool> matched(pattern_dfa.size());
  // Depth-first over the patterns, each matched or not, pruning empty regions.
  std::function<void(std::size_t, const detail::CodePointDfa&)> walk = [&](std::size_t i, const detail::CodePointDfa& region) {
    if (region.empty()) return;
    if (i == pattern_dfa.size()) {
      if (++regions > kMaxRegions) too_big();
      Conj conj = schemas_for(nullptr, matched);
      if (collect(conj, depth + 1).never) return;
      ExprId body = detail::dfa_to_expr(region, g_, [&](const std::vector<CharRange>& r) { return json_chars(r); });
      ExprId key = g_.add_sequence({g_.add_bytes("\""), body, g_.add_bytes("\"")});
      members.push_back(g_.add_sequence({key, colon(), value_expr(conj, d + 1, depth + 1)}));
      return;
    }
    for (bool m : {true, false}) {
      auto next = detail::intersect({region, m ? pattern_dfa[i] : negated[i]}, kMaxStates);
      if (!next) too_big();
      matched[i] = m;
      walk(i + 1, *next);
    }
    matched[i] = false;
  };
  walk(0, *keys);
  check_size();
  if (members.empty()) return std::nullopt;
  return members.size() == 1 ? members[0] : g_.add_choice(members);
}

ExprId Converter::emit_array(Constraints& c, std::uint32_t d, int depth) {
  std::size_t n_prefix = 0;
  for (const auto& s : c.array_shapes) n_prefix = std::max(n_prefix, s.prefix.size());
  auto conj_at = [&](std::size_t i) { return item_conj(c, i); };
  if (!c.unevaluated_items.empty()) {
    if (c.unevaluated_items.size() > 1) {
      fail(c.unevaluated_items[1].pointer, "unevaluatedItems", "two \"unevaluatedItems\" in one allOf are not supported");
    }
    const Node& u = c.unevaluated_items[0];
    auto under = [&](const std::string& lineage) { return lineage_within(lineage, u.lineage); };
    if (!c.contains.empty()) fail(u.pointer, "", "\"unevaluatedItems\" beside \"contains\" is not supported");
    bool any_items = false;
    std::size_t evaluated = 0;
    for (const auto& shape : c.array_shapes) {
      if (!under(shape.lineage) || shape.overlap) {
        fail(u.pointer, "", "\"unevaluatedItems\" with items from outside its schema or from overlapping anyOf branches is not supported");
      }
      if (!shape.evaluates) continue;
      if (shape.items) any_items = true;
      evaluated = std::max(evaluated, shape.prefix.size());
    }
    if (!any_items) {
      // Positions from `evaluated` on must also satisfy the unevaluatedItems schema.
      ArrayShape extra;
      extra.prefix.assign(evaluated, true_node());
      extra.items = u;
      extra.lineage = u.lineage;
      c.array_shapes.push_back(extra);
      n_prefix = std::max(n_prefix, evaluated);
    }
  }
  Conj rest = conj_at(n_prefix);
  std::uint32_t min_i = c.min_items;
  std::uint32_t max_i = c.max_items;
  if (collect(rest, depth + 1).never) max_i = std::min<std::uint32_t>(max_i, static_cast<std::uint32_t>(n_prefix));
  for (std::size_t i = 0; i < n_prefix && i < max_i; ++i) {
    if (collect(conj_at(i), depth + 1).never) {
      max_i = static_cast<std::uint32_t>(i);
      break;
    }
  }
  if (min_i > max_i) return g_.add_char_class({});
  auto wrap = [&](ExprId body, bool empty_ok) {
    std::vector<ExprId> shapes{g_.add_sequence({g_.add_bytes("["), open_ws(d), body, close_ws(d), g_.add_bytes("]")})};
    if (empty_ok) shapes.push_back(g_.add_sequence({g_.add_bytes("["), empty_inner(), g_.add_bytes("]")}));
    return shapes.size() == 1 ? shapes[0] : g_.add_choice(shapes);
  };
  // contains: only on homogeneous, unbounded arrays.
  std::uint32_t min_c = c.min_contains.value_or(1);
  if (!c.contains.empty() && min_c > 0) {
    if (n_prefix > 0 || c.min_items > 0 || c.max_items != kUnbounded || c.unique_items) {
      fail(c.contains_pointer, "contains", "\"contains\" with prefixItems, minItems, maxItems or uniqueItems is not supported");
    }
    if (c.max_contains) {
      fail(c.contains_pointer, "maxContains", "\"maxContains\" cannot be enforced exactly (it needs the complement of \"contains\")");
    }
    if (min_c > 64) fail(c.contains_pointer, "minContains", "\"minContains\" over 64 is not supported");
    Conj with = rest;
    for (const auto& n : c.contains) with.push_back(n);
    ExprId el = value_expr(rest, d + 1, depth + 1);
    ExprId hit = value_expr(with, d + 1, depth + 1);
    ExprId before = g_.add_repeat(g_.add_sequence({el, sep(d)}), 0, kUnbounded);
    ExprId after = g_.add_repeat(g_.add_sequence({sep(d), el}), 0, kUnbounded);
    ExprId more = g_.add_repeat(g_.add_sequence({after, sep(d), hit}), min_c - 1, min_c - 1);
    return wrap(g_.add_sequence({before, hit, more, after}), false);
  }
  if (!c.contains.empty() && c.max_contains && !(c.max_contains >= max_i)) {
    fail(c.contains_pointer, "maxContains", "\"maxContains\" cannot be enforced exactly (it needs the complement of \"contains\")");
  }
  if (c.unique_items && max_i > 1) {
    // Exact only over a small finite domain: arrays of distinct values, one rule per set of values used.
    Constraints rc = collect(rest, depth + 1);
    std::vector<json> domain;
    if (n_prefix == 0 && rc.disjunctions.empty() && !rc.never) {
      if (rc.values) {
        for (const auto& v : *rc.values) {
          if (value_satisfies(v, rc, c.unique_pointer) &&
              std::none_of(domain.begin(), domain.end(), [&](const json& x) { return x == v; })) {
            domain.push_back(v);
          }
        }
      } else if ((rc.types & ~static_cast<std::uint32_t>(kNull | kBoolean)) == 0) {
        if (rc.types & kNull) domain.push_back(nullptr);
        if (rc.types & kBoolean) {
          domain.push_back(true);
          domain.push_back(false);
        }
        std::vector<json> kept;
        for (const auto& v : domain) {
          if (std::none_of(rc.excluded.begin(), rc.excluded.end(), [&](const json& e) { return e == v; })) kept.push_back(v);
        }
        domain = kept;
      } else {
        fail(c.unique_pointer, "uniqueItems", "\"uniqueItems\" is enforced only for items from a small enum, booleans or null");
      }
    } else {
      fail(c.unique_pointer, "uniqueItems", "\"uniqueItems\" is enforced only for items from a small enum, booleans or null");
    }
    if (domain.size() > 8) fail(c.unique_pointer, "uniqueItems", "\"uniqueItems\" over more than 8 possible values is not supported");
    std::vector<ExprId> lit;
    for (const auto& v : domain) lit.push_back(emit_literal(v, d + 1));
    std::map<std::uint32_t, ExprId> memo;
    std::function<ExprId(std::uint32_t, std::uint32_t)> tail = [&](std::uint32_t used, std::uint32_t count) -> ExprId {
      if (auto it = memo.find(used); it != memo.end()) return it->second;
      std::vector<ExprId> alts;
      if (count >= min_i) alts.push_back(g_.add_empty());
      if (count < max_i) {
        for (std::size_t k = 0; k < domain.size(); ++k) {
          if (used & (1u << k)) continue;
          alts.push_back(g_.add_sequence({count == 0 ? g_.add_empty() : sep(d), lit[k], tail(used | (1u << k), count + 1)}));
        }
      }
      ExprId e = alts.empty() ? g_.add_char_class({}) : alts.size() == 1 ? alts[0] : g_.add_choice(alts);
      memo[used] = e;
      return e;
    };
    // The empty array is wrapped separately (tail(0) may be empty).
    std::vector<ExprId> nonempty;
    for (std::size_t k = 0; k < domain.size() && max_i > 0; ++k) {
      nonempty.push_back(g_.add_sequence({lit[k], tail(1u << k, 1)}));
    }
    ExprId body = nonempty.empty() ? g_.add_char_class({}) : g_.add_choice(nonempty);
    return wrap(body, min_i == 0);
  }
  // Elements 0..n_prefix-1 from their own schemas, then `rest`; T(i) follows element i-1.
  std::vector<ExprId> el;
  const std::size_t n_fixed = std::min<std::size_t>(n_prefix, max_i);
  for (std::size_t i = 0; i < n_fixed; ++i) el.push_back(value_expr(conj_at(i), d + 1, depth + 1));
  ExprId rest_el = max_i > n_prefix ? value_expr(rest, d + 1, depth + 1) : g_.add_char_class({});
  // Tail after the fixed part: (sep rest){a, b}.
  const std::uint32_t fixed = static_cast<std::uint32_t>(n_fixed);
  auto tail_from = [&](std::uint32_t i) -> ExprId {  // i elements written, i >= fixed
    const std::uint32_t a = min_i > i ? min_i - i : 0;
    const std::uint32_t b = max_i == kUnbounded ? kUnbounded : max_i - i;
    if (b == 0) return g_.add_empty();
    return g_.add_repeat(g_.add_sequence({sep(d), rest_el}), a, b);
  };
  ExprId body;
  if (fixed == 0) {
    if (max_i == 0) return wrap(g_.add_char_class({}), true);
    body = g_.add_sequence({rest_el, tail_from(1)});
  } else {
    // Build from the back: after element i-1 (i elements written).
    ExprId after = tail_from(fixed);
    for (std::uint32_t i = fixed - 1; i >= 1; --i) {
      ExprId cont = g_.add_sequence({sep(d), el[i], after});
      after = i >= min_i ? g_.add_choice({g_.add_empty(), cont}) : cont;
    }
    body = g_.add_sequence({el[0], after});
  }
  return wrap(body, min_i == 0);
}

// Whether no value can satisfy both: different types, disjoint constants, or a property that both require
// with provably disjoint schemas.
bool Converter::provably_disjoint(const Constraints& a, const Constraints& b, int depth) {
  if (a.never || b.never) return true;
  if (!a.disjunctions.empty() || !b.disjunctions.empty()) {
    // Disjoint when every pair of their branches is.
    const Constraints& x = !a.disjunctions.empty() ? a : b;
    const Constraints& y = !a.disjunctions.empty() ? b : a;
    for (const auto& branch : x.disjunctions.front().branches) {
      if (!provably_disjoint(collect(branch, depth + 1), y, depth + 1)) return false;
    }
    return true;
  }
  auto effective_types = [](const Constraints& c) {
    if (!c.values) return c.types;
    std::uint32_t t = 0;
    for (const auto& v : *c.values) t |= type_of_value(v);
    return t & c.types;
  };
  const std::uint32_t common = effective_types(a) & effective_types(b);
  if (common == 0) return true;
  if (a.values || b.values) {
    const Constraints& x = a.values ? a : b;
    const Constraints& y = a.values ? b : a;
    bool any = false;
    for (const auto& v : *x.values) {
      if (!(common & type_of_value(v))) continue;
      if (y.values && std::none_of(y.values->begin(), y.values->end(), [&](const json& w) { return w == v; })) continue;
      if (std::any_of(y.excluded.begin(), y.excluded.end(), [&](const json& w) { return w == v; })) continue;
      if (y.values || (type_of_value(v) & (kNull | kBoolean))) {
        any = true;
        break;
      }
      // Checked exactly against y's keywords.
      try {
        if (value_satisfies(v, y, y.values_pointer)) return false;
      } catch (const SchemaError&) {
        return false;  // y's keywords cannot be checked here: not provably disjoint
      }
    }
    if (!any) return true;
    return false;
  }
  // Only strings left in common: disjoint when no string satisfies both (their automata's product is empty).
  if (common == kString) {
    try {
      auto product = detail::intersect({string_dfa(a), string_dfa(b)}, 4096);
      if (product && product->empty()) return true;
    } catch (const SchemaError&) {
      return false;  // a constraint without an automaton here: not provably disjoint
    }
  }
  // Only objects left in common: a key both require whose schemas are disjoint, or one requires a key
  // the other forbids (a false property or pattern schema, or additionalProperties false).
  if (common == kObject) {
    try {
      auto schemas_of = [&](const Constraints& x, const std::string& name) {
        std::vector<bool> matched(x.pattern_properties.size());
        const std::u32string text = detail::decode_utf8(name).value_or(std::u32string());
        for (std::size_t i = 0; i < matched.size(); ++i) {
          matched[i] = key_pattern_dfa(x.pattern_properties[i].pattern, x.pattern_properties[i].pointer).accepts(text);
        }
        return member_conj(x, &name, matched);
      };
      for (int side = 0; side < 2; ++side) {
        const Constraints& x = side ? b : a;
        const Constraints& y = side ? a : b;
        for (const auto& name : y.required) {
          const Constraints cx = collect(schemas_of(x, name), depth + 1);
          if (cx.never) return true;
          if (side == 0 && std::find(x.required.begin(), x.required.end(), name) != x.required.end() &&
              provably_disjoint(cx, collect(schemas_of(y, name), depth + 1), depth + 1)) {
            return true;
          }
        }
      }
    } catch (const SchemaError&) {
      return false;  // a pattern without an automaton: not provably disjoint
    }
  }
  // Numbers: disjoint ranges.
  if ((common & ~static_cast<std::uint32_t>(kInteger | kNumber)) == 0) {
    auto below = [](const std::optional<Bound>& up, const std::optional<Bound>& lo) {
      if (!up || !lo) return false;
      int cmp = compare(up->value, lo->value);
      return cmp < 0 || (cmp == 0 && (up->exclusive || lo->exclusive));
    };
    if (below(a.upper, b.lower) || below(b.upper, a.lower)) return true;
  }
  return false;
}

}  // namespace pse::json_schema_detail
