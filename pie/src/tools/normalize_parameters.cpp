// normalize_tool_parameters: the schema spellings of function-calling datasets (BFCL's "dict",
// "float", "tuple", "any", the "optional" annotation) rewritten as JSON Schema.
#include <algorithm>
#include <string>

#include "pie/error.h"
#include "pie/tool_calls.h"

namespace pie {
namespace {

using Json = nlohmann::ordered_json;

// The JSON Schema type for a spelling; "" for "any" (no constraint). Throws on an unknown spelling.
std::string normalized_type(const std::string& type, const std::string& pointer) {
  static const std::pair<const char*, const char*> kSpellings[] = {
      {"object", "object"},   {"dict", "object"},   {"array", "array"},  {"list", "array"},
      {"tuple", "array"},     {"string", "string"}, {"str", "string"},   {"integer", "integer"},
      {"int", "integer"},     {"number", "number"}, {"float", "number"}, {"double", "number"},
      {"boolean", "boolean"}, {"bool", "boolean"},  {"null", "null"},    {"any", ""},
  };
  for (const auto& [from, to] : kSpellings) {
    if (type == from) return to;
  }
  throw RequestError("[tool_calls] parameters" + pointer + "/type: unknown type \"" + type + "\"",
                     "parameters");
}

void normalize(Json& schema, const std::string& pointer);

void normalize_map(Json& map, const std::string& pointer) {
  if (!map.is_object()) return;
  for (auto it = map.begin(); it != map.end(); ++it)
    normalize(it.value(), pointer + "/" + it.key());
}

void normalize_list(Json& list, const std::string& pointer) {
  if (!list.is_array()) return;
  for (std::size_t i = 0; i < list.size(); ++i)
    normalize(list[i], pointer + "/" + std::to_string(i));
}

void normalize(Json& schema, const std::string& pointer) {
  if (!schema.is_object()) return;
  if (auto type = schema.find("type"); type != schema.end()) {
    if (type->is_string()) {
      const std::string t = normalized_type(type->get<std::string>(), pointer);
      if (t.empty()) {
        schema.erase("type");
      } else {
        *type = t;
      }
    } else if (type->is_array()) {
      Json types = Json::array();
      bool any = false;
      for (const Json& t : *type) {
        if (!t.is_string()) continue;  // left for the schema converter to reject
        const std::string n = normalized_type(t.get<std::string>(), pointer);
        if (n.empty()) any = true;
        if (std::find(types.begin(), types.end(), n) == types.end()) types.push_back(n);
      }
      if (any) {
        schema.erase("type");
      } else {
        *type = std::move(types);
      }
    }
  }
  // BFCL marks optional parameters with "optional": true beside leaving them out of "required".
  if (auto opt = schema.find("optional"); opt != schema.end() && opt->is_boolean())
    schema.erase(opt);
  for (const char* key :
       {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}) {
    if (auto it = schema.find(key); it != schema.end()) normalize_map(*it, pointer + "/" + key);
  }
  for (const char* key : {"anyOf", "oneOf", "allOf", "prefixItems"}) {
    if (auto it = schema.find(key); it != schema.end()) normalize_list(*it, pointer + "/" + key);
  }
  for (const char* key :
       {"items", "additionalProperties", "additionalItems", "not", "contains", "propertyNames",
        "unevaluatedProperties", "unevaluatedItems", "if", "then", "else"}) {
    if (auto it = schema.find(key); it != schema.end()) {
      if (it->is_array()) {
        normalize_list(*it, pointer + "/" + key);  // draft-04 tuple "items"
      } else {
        normalize(*it, pointer + "/" + key);
      }
    }
  }
}

// Closes plain object schemas, descending through properties and items only: a schema that combines
// others (allOf, anyOf, oneOf, not, if, $ref, dependentSchemas) is left as written with everything
// under it, since closing one conjunct could reject members another one declares.
void close_objects(Json& schema) {
  if (!schema.is_object()) return;
  for (const char* key : {"allOf", "anyOf", "oneOf", "not", "if", "$ref", "$dynamicRef",
                          "dependentSchemas", "unevaluatedProperties", "unevaluatedItems"}) {
    if (schema.contains(key)) return;
  }
  if (auto props = schema.find("properties");
      props != schema.end() && props->is_object() && !props->empty() &&
      !schema.contains("additionalProperties") && !schema.contains("patternProperties")) {
    schema["additionalProperties"] = false;
  }
  for (const char* key : {"properties", "patternProperties"}) {
    if (auto it = schema.find(key); it != schema.end() && it->is_object()) {
      for (auto sub = it->begin(); sub != it->end(); ++sub) close_objects(sub.value());
    }
  }
  for (const char* key :
       {"items", "prefixItems", "additionalItems", "contains", "additionalProperties"}) {
    if (auto it = schema.find(key); it != schema.end()) {
      if (it->is_array()) {
        for (Json& sub : *it) close_objects(sub);
      } else {
        close_objects(*it);
      }
    }
  }
}

}  // namespace

nlohmann::ordered_json close_object_schemas(const nlohmann::ordered_json& schema) {
  Json out = schema;
  close_objects(out);
  return out;
}

nlohmann::ordered_json normalize_tool_parameters(const nlohmann::ordered_json& parameters) {
  if (parameters.is_null() || (parameters.is_object() && parameters.empty())) {
    return Json{{"type", "object"}};
  }
  Json out = parameters;
  normalize(out, "");
  return out;
}

}  // namespace pie
