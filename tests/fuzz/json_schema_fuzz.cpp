// libFuzzer target for pse::json_schema_to_grammar. The first byte picks the mode: even, the rest is schema
// text as is; odd, the rest drives a generator of schemas with deep nesting, $ref chains and cycles through
// $defs, combinators, and every keyword family. Any pse::Error is a correct answer; any other exception, a
// crash, a stack overflow or a hang (libFuzzer -timeout) is a bug. The grammar must also validate.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "pse/error.h"
#include "pse/json_schema.h"

namespace {

using ojson = nlohmann::ordered_json;

class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t next() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool empty() const { return pos_ >= size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

const char* const kTypes[] = {"null", "boolean", "object", "array", "string", "integer", "number"};
const char* const kFormats[] = {"date", "time", "date-time", "duration", "email", "ipv4", "ipv6", "uri",
                                "uri-reference", "uuid", "json-pointer", "hostname", "bogus"};
const char* const kPatterns[] = {"^a+$", "[0-9]{2,4}", "(x|y)*z", "\\d+\\.\\d", "^$", "(", "a{3,1}", "\\p{L}+"};

ojson scalar(Bytes& in) {
  switch (in.next() % 6) {
    case 0: return nullptr;
    case 1: return in.next() % 2 == 0;
    case 2: return static_cast<int>(in.next()) - 128;
    case 3: return (static_cast<int>(in.next()) - 128) / 8.0;
    case 4: return std::string(in.next() % 4, static_cast<char>('a' + in.next() % 3));
    default: return std::string("\"\\/\n");
  }
}

ojson gen(Bytes& in, int depth, int n_defs) {
  if (in.empty() || depth > 40) return in.next() % 2 == 0;
  const std::uint8_t op = in.next();
  ojson s = ojson::object();
  const int n_keywords = 1 + op % 3;
  for (int k = 0; k < n_keywords; ++k) {
    switch (in.next() % 26) {
      case 0: s["type"] = kTypes[in.next() % 7]; break;
      case 1: s["type"] = ojson::array({kTypes[in.next() % 7], kTypes[in.next() % 7]}); break;
      case 2: s["properties"][std::string(1, static_cast<char>('a' + in.next() % 4))] = gen(in, depth + 1, n_defs); break;
      case 3: s["required"] = ojson::array({std::string(1, static_cast<char>('a' + in.next() % 4))}); break;
      case 4: s["additionalProperties"] = gen(in, depth + 1, n_defs); break;
      case 5: s["items"] = gen(in, depth + 1, n_defs); break;
      case 6: s["prefixItems"] = ojson::array({gen(in, depth + 1, n_defs), gen(in, depth + 1, n_defs)}); break;
      case 7: s["anyOf"] = ojson::array({gen(in, depth + 1, n_defs), gen(in, depth + 1, n_defs)}); break;
      case 8: s["oneOf"] = ojson::array({gen(in, depth + 1, n_defs), gen(in, depth + 1, n_defs)}); break;
      case 9: s["allOf"] = ojson::array({gen(in, depth + 1, n_defs), gen(in, depth + 1, n_defs)}); break;
      case 10: s["not"] = gen(in, depth + 1, n_defs); break;
      case 11:
        s["if"] = gen(in, depth + 1, n_defs);
        s["then"] = gen(in, depth + 1, n_defs);
        if (in.next() % 2) s["else"] = gen(in, depth + 1, n_defs);
        break;
      case 12: s["$ref"] = n_defs > 0 ? "#/$defs/d" + std::to_string(in.next() % n_defs) : "#"; break;
      case 13: s["enum"] = ojson::array({scalar(in), scalar(in), scalar(in)}); break;
      case 14: s["const"] = scalar(in); break;
      case 15: s[in.next() % 2 ? "minimum" : "exclusiveMaximum"] = scalar(in); break;
      case 16: s[in.next() % 2 ? "minLength" : "maxLength"] = static_cast<int>(in.next() % 8) - 1; break;
      case 17: s["pattern"] = kPatterns[in.next() % 8]; break;
      case 18: s["format"] = kFormats[in.next() % 13]; break;
      case 19: s[in.next() % 2 ? "minItems" : "maxItems"] = in.next() % 5; break;
      case 20: s["contains"] = gen(in, depth + 1, n_defs); s["minContains"] = in.next() % 3; break;
      case 21: s["uniqueItems"] = true; break;
      case 22: s["multipleOf"] = scalar(in); break;
      case 23: s["dependentRequired"] = {{"a", ojson::array({"b"})}}; break;
      case 24: s["unevaluatedProperties"] = gen(in, depth + 1, n_defs); break;
      default: s[in.next() % 2 ? "minProperties" : "maxProperties"] = in.next() % 4; break;
    }
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  pse::JsonSchemaOptions options;
  options.max_grammar_exprs = 200000;
  options.max_expansion_work = 100000;  // smaller bounds keep each input fast under ASan (1M steps: ~25 s)
  options.layout = static_cast<pse::JsonLayout>(data[0] / 2 % 3);
  try {
    pse::Grammar g;
    if (data[0] % 2 == 0) {
      g = pse::json_schema_to_grammar(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), options);
    } else {
      Bytes in(data + 1, size - 1);
      // $defs: d0 -> d1 -> ... chains (and cycles back) so refs are deep and recursive.
      const int n_defs = in.next() % 24;
      ojson schema = gen(in, 0, n_defs);
      if (!schema.is_object()) schema = ojson::object();
      for (int i = 0; i < n_defs; ++i) {
        const std::uint8_t kind = in.next() % 3;
        if (kind == 0) {
          schema["$defs"]["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string((i + 1) % n_defs)}};
        } else if (kind == 1) {
          schema["$defs"]["d" + std::to_string(i)] = {{"type", "array"}, {"items", {{"$ref", "#/$defs/d" + std::to_string((i + 1) % n_defs)}}}};
        } else {
          schema["$defs"]["d" + std::to_string(i)] = gen(in, 1, n_defs);
        }
      }
      g = pse::json_schema_to_grammar(schema, options);
    }
    g.validate();
  } catch (const pse::Error&) {
    // A typed rejection is a correct answer.
  } catch (const std::exception& e) {
    // Anything else escaping the library is a bug.
    __builtin_trap();
  }
  return 0;
}
