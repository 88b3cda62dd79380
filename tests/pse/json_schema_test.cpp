// Unit tests of json_schema_to_grammar: one or more per keyword (accepted and rejected texts, judged by the
// reference recognizer) and one per error path (SchemaError with its JSON pointer and keyword).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pse/error.h"
#include "pse/json_schema.h"
#include "reference_recognizer.h"

namespace pse {
namespace {

void expect_language(const std::string& schema, const std::vector<std::string>& yes,
                     const std::vector<std::string>& no, const JsonSchemaOptions& options = {}) {
  Grammar g = json_schema_to_grammar(std::string_view(schema), options);
  for (const auto& text : yes) EXPECT_TRUE(testing::accepts(g, text)) << schema << " should accept " << text;
  for (const auto& text : no) EXPECT_FALSE(testing::accepts(g, text)) << schema << " should reject " << text;
}

void expect_error(const std::string& schema, const std::string& pointer, const std::string& keyword) {
  try {
    (void)json_schema_to_grammar(std::string_view(schema));
    ADD_FAILURE() << schema << ": expected a SchemaError at " << pointer << " / " << keyword;
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.pointer(), pointer) << e.what();
    EXPECT_EQ(e.keyword(), keyword) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[json_schema] ", 0), 0u) << e.what();
  }
}

TEST(JsonSchema, TypesAndTypeArrays) {
  expect_language(R"({"type":"null"})", {"null"}, {"0", "\"\"", "nul"});
  expect_language(R"({"type":"boolean"})", {"true", "false"}, {"null", "1"});
  expect_language(R"({"type":["string","null"]})", {"null", "\"a\""}, {"1", "[]"});
  expect_language(R"({"type":"integer"})", {"0", "-7", "123456789012345678901234567890", "1.0"}, {"1.5", "01", "-0", "\"1\""});
  expect_language(R"({"type":"number"})", {"0", "-1.5", "1e10", "2.5E-3", "-0.5", "-0", "-0e2"},
                  {".5", "1.", "+1", "NaN", "-01", "--1", "-"});
  // Draft 4 counts 1.0 as a number but not as an integer.
  expect_language(R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"integer"})", {"0", "-7"}, {"1.0", "1.5"});
  expect_language(R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"integer","multipleOf":3})", {"3"}, {"3.0"});
  expect_language(R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"number"})", {"1.0", "2"}, {"1."});
  expect_language(R"(true)", {"null", "{\"a\":[1,{}]}", "\"x\""}, {"nul"});
  expect_language(R"(false)", {}, {"null", "1", "{}"});
}

TEST(JsonSchema, EnumAndConst) {
  expect_language(R"({"enum":["a",1,null,{"k":[true]}]})", {"\"a\"", "1", "1.0", "null", "{\"k\":[true]}", "{\"k\": [true]}"},
                  {"\"b\"", "2", "{\"k\":[false]}"});
  expect_language(R"({"const":"a\"b"})", {R"("a\"b")", R"("a\u0022b")"}, {R"("ab")"});
  expect_language(R"({"type":"string","enum":["a",1]})", {"\"a\""}, {"1"});
  // Objects and arrays among the values are checked against the sibling keywords, combinators included.
  expect_language(R"({"allOf":[{"enum":[{"a":1},{"a":"x"},{"b":2},{"a":1,"c":[1,1]}]},)"
                  R"({"properties":{"a":{"type":"integer"},"c":{"uniqueItems":true}},"required":["a"]}]})",
                  {R"({"a":1})"}, {R"({"a":"x"})", R"({"b":2})", R"({"a":1,"c":[1,1]})"});
  expect_language(R"({"enum":[[1,"a"],[2],[]],"minItems":1,"items":{"anyOf":[{"type":"integer"},{"const":"b"}]}})", {"[2]"},
                  {R"([1,"a"])", "[]"});
  expect_language(R"({"enum":[{"k":1},{"k":2},{"k":3}],"oneOf":[{"properties":{"k":{"minimum":2}}},{"properties":{"k":{"maximum":2}}}]})",
                  {R"({"k":1})", R"({"k":3})"}, {R"({"k":2})"});
  expect_language(R"({"enum":[{"x-1":"a"},{"x-2":3}],"patternProperties":{"^x-":{"type":"string"}},"propertyNames":{"maxLength":3}})",
                  {R"({"x-1":"a"})"}, {R"({"x-2":3})"});
}

TEST(JsonSchema, IntegerRangesAreExact) {
  std::vector<std::string> yes, no;
  for (int i = -3; i <= 15; ++i) ((i >= 1 && i <= 12) ? yes : no).push_back(std::to_string(i));
  expect_language(R"({"type":"integer","minimum":1,"maximum":12})", yes, no);
  expect_language(R"({"type":"integer","exclusiveMinimum":-1000,"exclusiveMaximum":-998})", {"-999"}, {"-1000", "-998", "0"});
  expect_language(R"({"type":"integer","minimum":9999999999999999999})", {"9999999999999999999", "10000000000000000000000"},
                  {"9999999999999999998", "5", "-9999999999999999999"});
  expect_language(R"({"type":"integer","minimum":-5.5,"maximum":2.5})", {"-5", "2", "0"}, {"-6", "3"});
}

TEST(JsonSchema, DecimalRangesAreExact) {
  expect_language(R"({"type":"number","minimum":-1.5,"exclusiveMaximum":2.25})",
                  {"-1.5", "-1.50", "0", "2.249", "2", "-0.1", "1.99999"}, {"-1.51", "2.25", "2.250", "3", "-2"});
  expect_language(R"({"type":"number","exclusiveMinimum":0,"maximum":0.5})", {"0.5", "0.001", "0.4999"}, {"0", "0.0", "0.51", "-0.1"});
}

TEST(JsonSchema, MultipleOf) {
  expect_language(R"({"type":"integer","multipleOf":3})", {"0", "3", "-12", "999"}, {"1", "10", "-4"});
  expect_language(R"({"type":"number","multipleOf":0.01})", {"1.25", "3", "0.1", "-0.25", "-7.5"}, {"1.255", "-0.255"});
  expect_error(R"({"type":"number","multipleOf":1.5})", "", "multipleOf");
  expect_error(R"({"type":"integer","multipleOf":2,"minimum":1})", "", "multipleOf");
}

TEST(JsonSchema, StringLengthInCodePoints) {
  expect_language(R"({"type":"string","minLength":2,"maxLength":3})",
                  {"\"ab\"", "\"\xC3\xA9\xC3\xA9\"", "\"a\\nb\"", "\"\\ud83d\\ude00x\""}, {"\"a\"", "\"abcd\"", "\"\xC3\xA9\""});
}

TEST(JsonSchema, PatternIsUnanchored) {
  expect_language(R"({"type":"string","pattern":"a[0-9]"})", {"\"a1\"", "\"xxa5yy\""}, {"\"a\"", "\"b1\""});
  expect_language(R"({"type":"string","pattern":"^\"$"})", {R"("\"")"}, {R"("x")"});
  expect_error(R"({"type":"string","pattern":"(a)\\1"})", "", "pattern");
}

// A leap second is 23:59:60 UTC, so a local time HH:MM:60 is valid with exactly the offsets that bring it
// to 23:59 UTC (two per local time, one of each sign; 23:59 itself with Z, +00:00 or -00:00). Every
// seventh minute of the day, with its right offsets and the offsets one minute off.
TEST(JsonSchema, LeapSecondsNeedTheirOffset) {
  std::vector<std::string> yes, no;
  auto text = [](int local, int sign, int offset) {
    return fmt::format("\"1998-12-31T{:02}:{:02}:60.5{}{:02}:{:02}\"", local / 60, local % 60, sign > 0 ? '+' : '-',
                       offset / 60, offset % 60);
  };
  for (int local = 0; local < 1440; local += 7) {
    for (int sign : {1, -1}) {
      const int offset = ((local - (23 * 60 + 59)) * sign % 1440 + 1440) % 1440;  // local = 23:59 + sign * offset
      yes.push_back(text(local, sign, offset));
      no.push_back(text(local, sign, (offset + 1) % 1440));
    }
  }
  yes.push_back("\"1998-12-31T23:59:60Z\"");
  no.push_back("\"1998-12-31T23:58:60Z\"");
  expect_language(R"({"type":"string","format":"date-time"})", yes, no);
  // Through the product of the format with an excluded value too.
  expect_language(R"({"type":"string","format":"time","not":{"const":"23:59:60Z"}})",
                  {"\"15:59:60-08:00\"", "\"00:29:60+00:30\"", "\"23:59:60+00:00\""},
                  {"\"15:59:60+08:00\"", "\"00:29:60-00:30\"", "\"23:59:60Z\""});
}

TEST(JsonSchema, Formats) {
  expect_language(R"({"type":"string","format":"date"})", {"\"2024-02-29\"", "\"2023-12-31\""}, {"\"2023-02-29\"", "\"2023-13-01\""});
  expect_language(R"({"type":"string","format":"date-time"})", {"\"1990-12-31T23:59:60Z\"", "\"2020-01-01t10:00:00.5+01:30\""},
                  {"\"1990-12-31T22:59:60Z\"", "\"2020-01-01 10:00:00Z\""});
  expect_language(R"({"type":"string","format":"uuid"})", {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567\""});
  expect_language(R"({"type":"string","format":"ipv4"})", {"\"192.168.0.1\""}, {"\"256.1.1.1\"", "\"01.1.1.1\""});
  expect_language(R"({"type":"string","format":"ipv6"})", {"\"::1\"", "\"2001:db8::8a2e:370:7334\""}, {"\"1:::2\""});
  expect_language(R"({"type":"string","format":"email"})", {"\"joe.bloggs@example.com\"", R"("\"a b\"@x.org")"}, {"\"a..b@x.org\"", "\"@x\""});
  expect_language(R"({"type":"string","format":"duration"})", {"\"P4DT12H30M5S\"", "\"P2W\""}, {"\"P\"", "\"PT\"", "\"P1D2W\""});
  expect_language(R"({"type":"string","format":"uri"})", {"\"http://a.b/c?d#e\"", "\"urn:isbn:0451450523\""}, {"\"//a.b\"", "\"a b:\""});
  expect_language(R"({"type":"string","format":"hostname"})", {"\"-not a host-\""}, {"1"}, [] {
    JsonSchemaOptions o;
    o.format = JsonSchemaOptions::Format::kAnnotate;
    return o;
  }());
  expect_error(R"({"type":"string","format":"hostname"})", "", "format");
}

// A format no draft defines is an annotation (the suite's optional/format/unknown.json: every string is
// valid); strict mode makes it an error, and so is a misspelling of a defined one ("datetime").
TEST(JsonSchema, UnknownFormatsAreAnnotationsUnlessStrict) {
  expect_language(R"({"type":"string","format":"no-such-format","maxLength":2})", {"\"ab\"", "\"\""}, {"\"abc\"", "1"});
  expect_error(R"({"type":"string","format":"DateTime"})", "", "format");
  expect_error(R"({"type":"string","format":"ip_v4"})", "", "format");
  JsonSchemaOptions strict;
  strict.unknown_keywords = JsonSchemaOptions::UnknownKeywords::kError;
  try {
    (void)json_schema_to_grammar(std::string_view(R"({"properties":{"a":{"format":"path"}}})"), strict);
    ADD_FAILURE() << "strict mode accepted an unknown format";
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.pointer(), "/properties/a");
    EXPECT_EQ(e.keyword(), "format");
    EXPECT_NE(std::string(e.what()).find("unknown format \"path\""), std::string::npos) << e.what();
  }
}

// Patterns, formats, lengths and excluded values on one string: their exact intersection.
TEST(JsonSchema, StringConstraintsIntersect) {
  expect_language(R"({"type":"string","pattern":"^[0-9a-z-]*$","minLength":2,"maxLength":4})",
                  {"\"ab\"", "\"a-9z\"", "\"--\""}, {"\"a\"", "\"abcde\"", "\"aB\"", "\"\""});
  // Unanchored: somewhere "ab", 3 code points in all (one of them two bytes in UTF-8).
  expect_language(R"({"type":"string","pattern":"ab","minLength":3,"maxLength":3})",
                  {"\"abx\"", "\"\xC3\xA9" "ab\"", "\"\\nab\""}, {"\"ab\"", "\"abab\"", "\"axb\""});
  // Two patterns (allOf), and a pattern with excluded values (not/enum).
  expect_language(R"({"allOf":[{"type":"string","pattern":"^a"},{"pattern":"z$"}]})", {"\"az\"", "\"abcz\""},
                  {"\"a\"", "\"bz\"", "\"za\""});
  expect_language(R"({"type":"string","pattern":"^[a-c]+$","not":{"enum":["ab","c"]}})", {"\"a\"", "\"abc\"", "\"cc\""},
                  {"\"ab\"", "\"c\"", "\"d\""});
  // A format with a length: date-time strings are at least 20 code points.
  expect_language(R"({"type":"string","format":"date","maxLength":10})", {"\"2024-02-29\""}, {"\"2023-02-29\""});
  expect_language(R"({"type":"string","format":"date","maxLength":9})", {}, {"\"2024-02-29\"", "\"\""});
  // Lengths and exclusions alone.
  expect_language(R"({"type":"string","maxLength":2,"not":{"const":"ab"}})", {"\"a\"", "\"ba\"", "\"\""}, {"\"ab\"", "\"abc\""});
  // Contradictory: empty.
  expect_language(R"({"type":"string","pattern":"^a+$","maxLength":0})", {}, {"\"\"", "\"a\""});
}

TEST(JsonSchema, ObjectsInSchemaOrder) {
  const std::string schema =
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["b"]})";
  expect_language(schema, {R"({"b":"x"})", R"({"a":1,"b":"x"})", R"({"a": 1, "b": "x"})", R"({"b":"x","c":null})", R"( { "b" : "x" } )"},
                  {R"({})", R"({"a":1})", R"({"b":"x","a":1})", R"({"a":"1","b":"x"})", R"({"b":"x","b":"y"})"});
  expect_language(R"({"properties":{"a":true},"additionalProperties":false})", {"{}", R"({"a":1})"}, {R"({"b":1})"});
  expect_language(R"({"additionalProperties":{"type":"integer"}})", {R"({"x":1,"y":2})"}, {R"({"x":"1"})"});
}

// Optional members around required ones: one separator between members, never a leading or trailing one,
// and the count bounds still hold (the in-order member graph).
TEST(JsonSchema, OptionalMembersTakeOneSeparatorEach) {
  const std::string schema = R"({"type":"object","properties":{"a":{"const":1},"b":{"const":2},"c":{"const":3},
      "d":{"const":4}},"required":["c"],"additionalProperties":false})";
  expect_language(schema, {R"({"c":3})", R"({"a":1,"c":3})", R"({"b":2,"c":3,"d":4})", R"({"a":1,"b":2,"c":3,"d":4})",
                           R"({ "a" : 1 , "c" : 3 })"},
                  {R"({})", R"({"a":1})", R"({"c":3,})", R"({,"c":3})", R"({"a":1,,"c":3})", R"({"a":1"c":3})",
                   R"({"c":3,"a":1})", R"({"c":3,"d":4,})", R"({"a":1,"b":2,"d":4})"});
  expect_language(R"({"type":"object","properties":{"a":{"const":1},"b":{"const":2}},"minProperties":1,
      "additionalProperties":{"type":"null"}})",
                  {R"({"a":1})", R"({"b":2})", R"({"x":null})", R"({"a":1,"x":null,"y":null})", R"({"b":2,"x":null})"},
                  {"{}", R"({"a":1,})", R"({,"x":null})", R"({"x":null,})", R"({"a":1"x":null})"});
}

// Equal subschemas in different places share one rule, but only where they mean the same: a "$ref" is
// resolved against its own base URI, so equal "$ref"s under different "$id"s stay apart.
TEST(JsonSchema, EqualSubschemasShareRulesOnlyUnderOneBase) {
  const auto rules = [](const std::string& schema) { return json_schema_to_grammar(std::string_view(schema)).rules().size(); };
  const std::string eight_equal =
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},
      "d":{"type":"string"},"e":{"type":"string"},"f":{"type":"string"},"g":{"type":"string"},"h":{"type":"string"}}})";
  const std::string one = R"({"type":"object","properties":{"a":{"type":"string"}}})";
  EXPECT_EQ(rules(eight_equal), rules(one));
  const std::string bases = R"({"type":"object","properties":{
      "a":{"$id":"http://e.com/a.json","$defs":{"x":{"type":"integer"}},"properties":{"v":{"$ref":"#/$defs/x"}}},
      "b":{"$id":"http://e.com/b.json","$defs":{"x":{"type":"string"}},"properties":{"v":{"$ref":"#/$defs/x"}}}}})";
  expect_language(bases, {R"({"a":{"v":1},"b":{"v":"s"}})"}, {R"({"a":{"v":"s"}})", R"({"b":{"v":1}})"});
}

// Subschemas equal up to annotations (title, description, ...) share a rule too, but only annotations
// at schema positions are set aside: a property named "description" or a const holding a "title" is
// compared whole.
TEST(JsonSchema, SubschemasEqualUpToAnnotationsShareRules) {
  const auto rules = [](const std::string& schema) { return json_schema_to_grammar(std::string_view(schema)).rules().size(); };
  std::string described = R"({"type":"object","properties":{)";
  for (int i = 0; i < 8; ++i) {
    described += fmt::format(R"({}"p{}":{{"type":"string","maxLength":9,"description":"property {}","title":"t{}",
        "examples":["e{}"],"x-note":{}}})",
                             i ? "," : "", i, i, i, i, i);
  }
  described += "}}";
  EXPECT_EQ(rules(described), rules(R"({"type":"object","properties":{"p0":{"type":"string","maxLength":9}}})"));
  const std::string values = R"({"type":"object","properties":{
      "a":{"type":"object","properties":{"description":{"type":"integer"}},"description":"first"},
      "b":{"type":"object","properties":{"description":{"type":"string"}},"description":"second"},
      "c":{"const":{"title":"x"}},
      "d":{"const":{"title":"y"}},
      "e":{"type":"object","properties":{"x":{"default":1,"type":"integer"}},"required":["x"]},
      "f":{"type":"object","properties":{"x":{"default":1,"type":"integer"}},"dependentRequired":{"default":["x"]}},
      "g":{"type":"object","properties":{"x":{"default":1,"type":"integer"}}}}})";
  expect_language(values, {R"({"a":{"description":1},"b":{"description":"s"},"c":{"title":"x"},"d":{"title":"y"}})",
                           R"({"e":{"x":1},"f":{},"g":{"default":0}})", R"({"f":{"x":1,"default":0}})"},
                  {R"({"a":{"description":"s"}})", R"({"b":{"description":1}})", R"({"c":{"title":"y"}})",
                   R"({"d":{"title":"x"}})", R"({"e":{}})", R"({"f":{"default":0}})"});
}

// JsonPropertyOrder::kAnyOrder: members in any order, each declared one at most once, required ones present.
TEST(JsonSchema, AnyPropertyOrder) {
  JsonSchemaOptions any;
  any.property_order = JsonPropertyOrder::kAnyOrder;
  const std::string schema =
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["b"]})";
  expect_language(schema, {R"({"b":"x"})", R"({"a":1,"b":"x"})", R"({"b":"x","a":1})", R"({"c":null,"b":"x","a":1})",
                           R"({ "b" : "x", "c": [1] })"},
                  {"{}", R"({"a":1})", R"({"b":"x","a":"1"})", R"({"b":"x","b":"y"})", R"({"a":1,"b":"x","a":2})"}, any);
  expect_language(R"({"properties":{"a":true,"b":true},"additionalProperties":false,"maxProperties":1})",
                  {"{}", R"({"b":1})", R"({"a":1})"}, {R"({"a":1,"b":2})", R"({"c":1})"}, any);
  expect_language(R"({"properties":{"a":true},"minProperties":2})", {R"({"x":1,"a":2})", R"({"x":1,"y":2,"z":3})"},
                  {"{}", R"({"a":1})"}, any);
  std::string wide = R"({"type":"object","properties":{)";
  for (int i = 0; i < 10; ++i) wide += (i ? ",\"p" : "\"p") + std::to_string(i) + R"(":{"type":"integer"})";
  wide += "}}";
  try {
    (void)json_schema_to_grammar(std::string_view(wide), any);
    ADD_FAILURE() << "ten declared properties in any order should be a SchemaError";
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.keyword(), "properties") << e.what();
  }
  EXPECT_NO_THROW((void)json_schema_to_grammar(std::string_view(wide)));  // schema order: fine
  // Nine properties with counts up to 20: more (presence, count) states than the bound.
  std::string counted = R"({"type":"object","maxProperties":20,"properties":{)";
  for (int i = 0; i < 9; ++i) counted += (i ? ",\"p" : "\"p") + std::to_string(i) + R"(":{"type":"integer"})";
  counted += "}}";
  EXPECT_THROW((void)json_schema_to_grammar(std::string_view(counted), any), SchemaError);
}

TEST(JsonSchema, PatternPropertiesAlone) {
  expect_language(R"({"type":"object","patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false})",
                  {"{}", R"({"x-a":1,"x-b":2})"}, {R"({"a":1})", R"({"x-a":"1"})"});
  expect_language(R"({"patternProperties":{"^a":true}})", {R"({"a":1,"b":2})"}, {});
  // A pattern with an empty schema beside "additionalProperties": false still admits its keys.
  expect_language(R"({"type":"object","patternProperties":{"^[a-z]+$":{}},"additionalProperties":false})",
                  {"{}", R"({"ab":1,"c":[true]})"}, {R"({"A":1})", R"({"a1":1})"});
  // Beside declared names the pattern matches none of: declared members in order, then pattern members.
  expect_language(R"({"properties":{"foo":{"type":"string"}},"patternProperties":{"^v":{"type":"integer"}},"additionalProperties":false})",
                  {R"({"foo":"x","vroom":2})", R"({"vroom":2})", "{}"}, {R"({"vroom":"x"})", R"({"bar":1})", R"({"foo":1})"});
  // Open objects: keys matching the pattern take its schema, the others the additional schema (the
  // complement of one repeated character class, anchored or not).
  expect_language(R"({"type":"object","patternProperties":{"^[a-z]+$":{"type":"integer"}}})",
                  {R"({"ab":1})", R"({"A1":"x"})", R"({"":true})", R"({"a":1,"B":[1]})", "{}"},
                  {R"({"ab":"x"})", R"({"a":1,"b":null})"});
  expect_language(R"({"type":"object","patternProperties":{".*":{"type":"integer"}}})", {R"({"x":1,"":2})"},
                  {R"({"x":"1"})", R"({"":null})"});
  expect_language(R"({"patternProperties":{"^.*$":{"type":"integer"}},"additionalProperties":{"type":"string"}})",
                  {R"({"ab":1})", R"({"a\nb":"x"})"}, {R"({"ab":"x"})", R"({"a\nb":1})"});
  expect_language(R"({"patternProperties":{"\\d+":{"const":0}}})", {R"({"a1":0,"b":1})"}, {R"({"a1":1})"});
  // Any pattern on open objects: keys it matches take its schema (the others are free).
  expect_language(R"({"patternProperties":{"^ab+":{"type":"integer"}}})", {R"({"abb":1,"x":"s"})", R"({"abz":2})", R"({"a":"s"})"},
                  {R"({"ab":"x"})", R"({"abz":"1"})"});
  // A declared name the pattern matches takes both schemas.
  expect_language(R"({"properties":{"vx":{"minimum":3}},"patternProperties":{"^v":{"type":"integer"}},"additionalProperties":false})",
                  {R"({"vx":3})", R"({"vy":2})", R"({"vx":4,"va":-1})"}, {R"({"vx":"s"})", R"({"vx":2})", R"({"a":1})", R"({"vy":"s"})"});
  // Several patterns: a key matched by both takes both schemas, one matched by none the additional one.
  expect_language(R"({"patternProperties":{"^a":{"type":"integer"},"b$":{"minimum":5}},"additionalProperties":{"type":"string"}})",
                  {R"({"ab":7,"a":1,"b":"x","c":"s"})", R"({"b":5})", "{}"},
                  {R"({"ab":3})", R"({"ab":5.5})", R"({"a":"x"})", R"({"c":1})", R"({"b":3})"});
}

TEST(JsonSchema, PropertyCountsAndNames) {
  expect_language(R"({"type":"object","minProperties":1,"maxProperties":2})", {R"({"a":1})", R"({"a":1,"b":2})"},
                  {"{}", R"({"a":1,"b":2,"c":3})"});
  expect_language(R"({"type":"object","propertyNames":{"maxLength":2}})", {R"({"ab":1})", "{}"}, {R"({"abc":1})"});
}

TEST(JsonSchema, DependentRequiredAndSchemas) {
  expect_language(R"({"properties":{"a":true,"b":true},"dependentRequired":{"a":["b"]}})", {"{}", R"({"b":1})", R"({"a":1,"b":2})"},
                  {R"({"a":1})"});
  expect_language(R"({"properties":{"a":true,"b":true},"dependentSchemas":{"a":{"properties":{"b":{"type":"string"}}}}})",
                  {R"({"a":1,"b":"x"})", R"({"b":1})"}, {R"({"a":1,"b":2})"});
}

TEST(JsonSchema, Arrays) {
  expect_language(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})", {"[1]", "[1, 2, 3]"},
                  {"[]", "[1,2,3,4]", "[\"a\"]"});
  expect_language(R"({"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})", {"[]", "[\"a\"]", "[\"a\",1]"},
                  {"[1]", "[\"a\",1,2]"});
  expect_language(R"({"items":[{"type":"string"}],"additionalItems":{"type":"null"},"$schema":"http://json-schema.org/draft-07/schema#"})",
                  {"[\"a\",null]"}, {"[\"a\",1]"});
  expect_language(R"({"type":"array","contains":{"const":1},"minContains":2})", {"[1,1]", "[0,1,2,1]"}, {"[1]", "[]", "[0,1]"});
  expect_language(R"({"type":"array","items":{"enum":["a","b"]},"uniqueItems":true})", {"[]", "[\"a\",\"b\"]", "[\"b\"]"},
                  {"[\"a\",\"a\"]"});
  expect_error(R"({"type":"array","uniqueItems":true})", "", "uniqueItems");
  expect_error(R"({"type":"array","contains":{"const":1},"maxContains":2})", "", "maxContains");
}

TEST(JsonSchema, AnyOfAllOfOneOf) {
  expect_language(R"({"anyOf":[{"type":"string"},{"type":"integer","minimum":5}]})", {"\"x\"", "7"}, {"3", "null"});
  expect_language(R"({"allOf":[{"type":"integer","minimum":1},{"maximum":3},{"type":["integer","string"]}]})", {"1", "3"},
                  {"0", "4", "\"a\""});
  expect_language(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":true},"additionalProperties":false}]})",
                  {}, {R"({"a":1})", R"({"b":1})"});
  expect_language(R"({"oneOf":[{"type":"string"},{"type":"null"}]})", {"\"a\"", "null"}, {"1"});
  // Discriminated by a required constant (on objects only: any non-object would match both branches).
  expect_language(R"({"type":"object","oneOf":[{"properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k"]},{"properties":{"k":{"const":"b"}},"required":["k"]}]})",
                  {R"({"k":"a","x":1})", R"({"k":"b"})"}, {R"({"k":"c"})"});
  // Overlapping branches, written exactly: each branch and not the others.
  expect_language(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})", {"1.5", "-0.5"}, {"1", "0", "-3", "\"a\""});
  expect_language(R"({"oneOf":[{"type":"integer","minimum":0},{"type":"integer","maximum":10}]})", {"-1", "11", "-100"},
                  {"0", "5", "10"});
  expect_language(R"({"type":"object","oneOf":[{"required":["a"]},{"required":["b"]}]})", {R"({"a":1})", R"({"b":1})"},
                  {R"({"a":1,"b":2})", "{}"});
  // A branch without an exact complement keeps the error.
  // Overlapping branches with an expressible complement: exactly one matches.
  expect_language(R"({"oneOf":[{"type":"string"},{"pattern":"a"}]})", {"1", "\"b\"", "null"}, {"\"a\"", "\"xay\""});
  // Strings whose patterns cannot both match are disjoint branches.
  expect_language(R"({"oneOf":[{"type":"string","pattern":"^a"},{"type":"string","pattern":"^b"}]})", {"\"ax\"", "\"b\""},
                  {"\"x\"", "1"});
  expect_error(R"({"oneOf":[{"type":"object"},{"properties":{"a":{"contains":{"type":"integer"}}}}]})", "", "oneOf");
  // A key one branch requires and the other forbids (closed object, false schema or pattern): disjoint.
  expect_language(R"({"oneOf":[{"type":"object","required":["data"]},{"type":"object","properties":{"errors":{}},"additionalProperties":false}]})",
                  {R"({"data":1})", R"({"errors":2})", "{}", R"({"data":1,"errors":2})"}, {R"({"x":1})", "1"});
  expect_language(R"({"oneOf":[{"type":"object","required":["x1"]},{"type":"object","patternProperties":{"^x":false}}]})",
                  {R"({"x1":1})", R"({"y":2})"}, {"1"});
}

TEST(JsonSchema, NotAndIfThenElse) {
  expect_language(R"({"not":{"type":"string"}})", {"1", "null", "{}"}, {"\"a\""});
  expect_language(R"({"type":"string","not":{"enum":["a","b"]}})", {"\"c\"", "\"ab\"", "\"\""}, {"\"a\"", "\"b\""});
  expect_language(R"({"type":"integer","not":{"const":0}})", {"1", "-1"}, {"0"});
  expect_language(R"({"type":"number","not":{"type":"integer"}})", {"1.5", "-0.5", "-10.25"}, {"1", "-3", "0", "1.0"});
  expect_language(R"({"if":{"properties":{"t":{"const":"n"}},"required":["t"]},"then":{"properties":{"v":{"type":"integer"}}},"else":{"properties":{"v":{"type":"string"}}}})",
                  {R"({"t":"n","v":1})", R"({"t":"s","v":"x"})", R"({"v":"x"})"}, {R"({"t":"n","v":"x"})", R"({"t":"s","v":1})"});
  // not pattern / not format: the complement of the automaton (or another type).
  expect_language(R"({"not":{"pattern":"a"}})", {"\"b\"", "1", "\"\""}, {"\"xay\"", "\"a\""});
  expect_language(R"({"type":"string","not":{"format":"date"}})", {"\"2023-02-29\"", "\"x\""}, {"\"2024-02-29\""});
  expect_language(R"({"type":"string","not":{"format":"no-such-format"}})", {}, {"\"x\""});  // not {}: nothing
  expect_language(R"({"enum":["ab","cd","b"],"pattern":"b"})", {"\"ab\"", "\"b\""}, {"\"cd\""});
  expect_error(R"({"not":{"contains":{"type":"string"}}})", "", "not");
  // Keywords of no draft inside a negated schema constrain nothing there either.
  expect_language(R"({"not":{"type":"string","faker":"name"}})", {"1"}, {"\"a\""});
}

TEST(JsonSchema, RefsPointersAnchorsAndRecursion) {
  expect_language(R"({"$defs":{"n":{"type":"integer"}},"$ref":"#/$defs/n"})", {"1"}, {"\"a\""});
  expect_language(R"({"definitions":{"a~b/c%d":{"type":"null"}},"$ref":"#/definitions/a~0b~1c%25d"})", {"null"}, {"1"});
  expect_language(R"({"$defs":{"x":{"$anchor":"here","type":"boolean"}},"$ref":"#here"})", {"true"}, {"1"});
  expect_language(R"({"$id":"http://e.com/root.json","$defs":{"s":{"$id":"s.json","type":"string"}},"$ref":"s.json"})", {"\"a\""}, {"1"});
  expect_language(R"({"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#"}}},"additionalProperties":false})",
                  {"{}", R"({"kids":[{},{"kids":[]}]})"}, {R"({"kids":[1]})"});
  expect_error(R"({"$ref":"#/$defs/missing"})", "", "$ref");
  expect_error(R"({"$ref":"http://elsewhere.org/s.json"})", "", "$ref");
  JsonSchemaOptions docs;
  docs.documents["http://elsewhere.org/s.json"] = R"({"type":"integer"})";
  expect_language(R"({"$ref":"http://elsewhere.org/s.json"})", {"1"}, {"\"1\""}, docs);
}

TEST(JsonSchema, UnevaluatedProperties) {
  expect_language(R"({"allOf":[{"properties":{"a":true}}],"properties":{"b":true},"unevaluatedProperties":false})",
                  {R"({"b":2,"a":1})", "{}"}, {R"({"c":1})", R"({"b":2,"c":1})"});
}

TEST(JsonSchema, Layouts) {
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})";
  JsonSchemaOptions compact;
  compact.layout = JsonLayout::kCompact;
  expect_language(schema, {R"({"a":[1,2]})", "{}"}, {R"({"a": [1, 2]})", R"( {"a":[1]})"}, compact);
  JsonSchemaOptions indented;
  indented.layout = JsonLayout::kIndented;
  expect_language(schema, {"{\n  \"a\": [\n    1,\n    2\n  ]\n}", "{}", "{\n  \"a\": []\n}"}, {R"({"a":[1,2]})"}, indented);
  JsonSchemaOptions flexible;
  flexible.max_whitespace_run = 2;
  expect_language(schema, {"{ \"a\" : [ 1 ] }"}, {"{     \"a\":[1]}"}, flexible);
  JsonSchemaOptions spaced = compact;  // json.dumps' default separators
  spaced.item_separator = ", ";
  spaced.key_separator = ": ";
  expect_language(schema, {R"({"a": [1, 2]})", "{}"}, {R"({"a":[1,2]})", R"({"a": [1,2]})"}, spaced);
  for (const auto& [item, key] : {std::pair{";", ":"}, {",", " "}, {",,", ":"}, {"x,", ":"}}) {
    JsonSchemaOptions bad = compact;
    bad.item_separator = item;
    bad.key_separator = key;
    EXPECT_THROW((void)json_schema_to_grammar(std::string_view(schema), bad), InputError) << item << key;
  }
}

TEST(JsonSchema, ErrorsCarryPointerAndKeyword) {
  expect_error(R"({"properties":{"a":{"type":"strin"}}})", "/properties/a", "type");
  expect_error(R"({"properties":{"a":{"minimum":"ten"}}})", "/properties/a", "minimum");
  expect_error(R"({"items":{"maxItems":-1}})", "/items", "maxItems");
  expect_error(R"({"type":"string","maxlength":3})", "", "maxlength");  // a validation keyword, miscased
  expect_error(R"({"patternProperties":{"^a":{"type":"integer"}},"propertyNames":{"maxLength":3}})", "", "patternProperties");
  expect_error(R"x({"patternProperties":{"^(?=a)":{"type":"integer"}}})x", "", "patternProperties");
  expect_error(R"({"patternProperties":{"^[ab]{5000}$":{"type":"integer"}}})", "", "patternProperties");
  // Six independent patterns split the keys into 64 regions: past the bound.
  expect_error(R"({"patternProperties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"},)"
               R"("d":{"type":"integer"},"e":{"type":"integer"},"f":{"type":"integer"}}})",
               "", "patternProperties");
  // unevaluated* beside enum objects / arrays would need evaluation tracking of the values: an error (it was
  // once accepted unchecked).
  expect_error(R"({"enum":[{"a":1}],"unevaluatedProperties":false})", "", "enum");
  expect_error(R"({"enum":[[1]],"unevaluatedItems":false})", "", "enum");
  expect_error(R"({"$dynamicRef":"#x"})", "", "$dynamicRef");
  expect_error(R"({"anyOf":[]})", "", "anyOf");
  expect_error(R"({"required":[1]})", "", "required");
  // A length bound whose automaton would pass the state bound.
  expect_error(R"({"type":"string","pattern":"a","maxLength":100000})", "", "pattern");
  expect_error(R"(5)", "", "");
  EXPECT_THROW((void)json_schema_to_grammar(std::string_view("{not json")), SchemaError);
  EXPECT_THROW((void)json_schema_to_grammar(std::string_view(R"({"minimum":1e400})")), SchemaError);
  JsonSchemaOptions bad_doc;
  bad_doc.documents["http://x/y.json"] = "{";
  EXPECT_THROW((void)json_schema_to_grammar(std::string_view("true"), bad_doc), SchemaError);
}

// Keywords of no draft are annotations by default, as the specification says: they change no instance's
// validity. Strict mode makes them errors.
TEST(JsonSchema, UnknownKeywordsAreAnnotationsUnlessStrict) {
  expect_language(R"({"type":"string","faker":"name","_format":"date","maxLength":2})", {"\"ab\""},
                  {"\"abc\"", "1"});
  JsonSchemaOptions strict;
  strict.unknown_keywords = JsonSchemaOptions::UnknownKeywords::kError;
  try {
    (void)json_schema_to_grammar(std::string_view(R"({"properties":{"a":{"frobnicate":1}}})"), strict);
    ADD_FAILURE() << "strict mode accepted an unknown keyword";
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.pointer(), "/properties/a");
    EXPECT_EQ(e.keyword(), "frobnicate");
  }
  EXPECT_NO_THROW((void)json_schema_to_grammar(std::string_view(R"({"x-order":1,"title":"t"})"), strict));
}

// Values nested deeper than JsonSchemaOptions::max_nesting, in const, enum or anywhere in the document,
// are a LimitError found before any recursive walk (20,000 levels overflowed the stack in the emitter).
TEST(JsonSchema, DeepValuesAreALimitErrorNotACrash) {
  const std::string deep = std::string(20000, '[') + std::string(20000, ']');
  for (const std::string& schema : {R"({"const":)" + deep + "}", R"({"enum":["a",)" + deep + "]}",
                                    R"({"type":"object","default":)" + deep + "}",
                                    R"({"properties":{"a":{"enum":[{"b":)" + deep + "}]}}}"}) {
    try {
      (void)json_schema_to_grammar(std::string_view(schema));
      ADD_FAILURE() << "no LimitError for a value nested 20,000 deep";
    } catch (const LimitError& e) {
      EXPECT_NE(std::string(e.what()).find("nests arrays and objects more than 1000 levels deep"), std::string::npos)
          << e.what();
    }
    // The nlohmann::json overload checks before its own (recursive) dump.
    EXPECT_THROW((void)json_schema_to_grammar(nlohmann::json::parse(schema)), LimitError);
    EXPECT_THROW((void)json_schema_to_grammar(nlohmann::ordered_json::parse(schema)), LimitError);
  }
  // Far deeper text is refused while it is read: nlohmann's parser copies values recursively as it
  // builds them, so a bound checked after parse() came too late (the fuzzer's crash: a "default" of
  // 20,000 arrays under ASan).
  const std::string deeper = std::string(300000, '[') + std::string(300000, ']');
  for (const std::string& schema : {R"({"default":)" + deeper + "}", R"({"enum":[{"a":)" + deeper + "}]}"}) {
    try {
      (void)json_schema_to_grammar(std::string_view(schema));
      ADD_FAILURE() << "no LimitError for a value nested 300,000 deep";
    } catch (const LimitError& e) {
      EXPECT_NE(std::string(e.what()).find("[json_schema] the schema nests arrays and objects more than 1000"),
                std::string::npos)
          << e.what();
    }
  }
  // The bound is the option's, and values just under it still convert.
  std::string under = std::string(990, '[') + std::string(990, ']');
  expect_language(R"({"const":)" + under + "}", {under}, {"[]"});
  JsonSchemaOptions shallow;
  shallow.max_nesting = 3;
  expect_language(R"({"const":[[1]]})", {"[[1]]", "[ [ 1 ] ]"}, {"[[2]]"}, shallow);
  EXPECT_THROW((void)json_schema_to_grammar(std::string_view(R"({"const":[[[1]]]})"), shallow), LimitError);
  JsonSchemaOptions with_document;
  with_document.documents["http://example.com/deep.json"] = R"({"const":)" + deep + "}";
  EXPECT_THROW((void)json_schema_to_grammar(std::string_view(R"({"$ref":"http://example.com/deep.json"})"),
                                            with_document),
               LimitError);
  with_document.documents["http://example.com/deep.json"] = R"({"const":)" + deeper + "}";
  try {
    (void)json_schema_to_grammar(std::string_view(R"({"$ref":"http://example.com/deep.json"})"), with_document);
    ADD_FAILURE() << "a document nested 300,000 deep should be refused while it is read";
  } catch (const LimitError& e) {
    EXPECT_NE(std::string(e.what()).find(R"(document "http://example.com/deep.json" nests)"), std::string::npos)
        << e.what();
  }
}

// enum lists are deduplicated and intersected under JSON Schema equality, in linear time (a 100,000-string
// enum took 52 s in quadratic scans); large lists keep exactly their values.
TEST(JsonSchema, LargeEnumsKeepExactlyTheirValues) {
  std::string values;
  for (int i = 0; i < 20000; ++i) values += fmt::format("{}\"v{}\"", i ? "," : "", i);
  const std::string big = "{\"enum\":[" + values + "]}";
  expect_language(big, {"\"v0\"", "\"v19999\"", "\"v777\""}, {"\"v20000\"", "\"v\"", "\"w1\""});
  // Intersected with a second enum, and with exclusions.
  expect_language(R"({"allOf":[)" + big + R"(,{"enum":["v5","v20001",1]}]})", {"\"v5\""}, {"\"v6\"", "1"});
  expect_language(R"({"allOf":[)" + big + R"(,{"not":{"enum":["v1","v2"]}}]})", {"\"v0\"", "\"v3\""},
                  {"\"v1\"", "\"v2\""});
  // Equal values collapse whatever their spelling: 1 and 1.0, [1] and [1.0], members in another order.
  expect_language(R"({"enum":[1,1.0,[1],[1.0],{"a":1,"b":2},{"a":1,"b":2}]})",
                  {"1", "1.0", "[1]", "{\"a\":1,\"b\":2}"}, {"2", "[2]"});
  expect_language(R"({"allOf":[{"enum":[1,[2.0],"x"]},{"enum":[1.0,[2],"y"]}]})", {"1", "[2]"}, {"\"x\"", "\"y\""});
}

TEST(JsonSchema, BoundsStopDeepInput) {
  std::string deep;
  for (int i = 0; i < 500; ++i) deep += R"({"items":)";
  deep += "true";
  for (int i = 0; i < 500; ++i) deep += "}";
  EXPECT_THROW((void)json_schema_to_grammar(std::string_view(deep)), LimitError);
  // Nested anyOf that multiply out hit a bound instead of running for ever.
  std::string wide = R"({"allOf":[)";
  for (int i = 0; i < 40; ++i) wide += std::string(i ? "," : "") + R"({"anyOf":[{"minimum":)" + std::to_string(i) + R"(},{"maximum":)" + std::to_string(-i) + "}]}";
  wide += "]}";
  JsonSchemaOptions small;
  small.max_expansion_work = 20000;
  EXPECT_THROW((void)json_schema_to_grammar(std::string_view(wide), small), LimitError);
  // Conditionals in one allOf multiply out in the copies of the rebased branches far more than in the
  // schemas visited: the copies are charged too, before they are made (a JSON Schema Store entry with
  // 125 ifs reached 3.5 GB before its error, when only visits were counted).
  std::string ifs = R"({"allOf":[)";
  for (int i = 0; i < 10; ++i) {
    const std::string n = std::to_string(i);
    ifs += std::string(i ? "," : "") + R"({"if":{"required":["p)" + n + R"("]},"then":{"required":["q)" + n +
           R"("]},"else":{"required":["r)" + n + R"("]}})";
  }
  ifs += "]}";
  JsonSchemaOptions copies;
  copies.max_expansion_work = 400000;  // the visits alone need about 270,000, with the copies 670,000
  EXPECT_THROW((void)json_schema_to_grammar(std::string_view(ifs), copies), LimitError);
  // The trie of the keys another member may not take is bounded like the grammar: an error that names
  // the object, not a silent cut.
  std::string keys = R"({"type":"object","properties":{")" + std::string(300, 'k') + R"(":{"type":"integer"}}})";
  JsonSchemaOptions tight;
  tight.max_grammar_exprs = 200;
  try {
    (void)json_schema_to_grammar(std::string_view(keys), tight);
    ADD_FAILURE() << "no LimitError";
  } catch (const LimitError& e) {
    EXPECT_NE(std::string(e.what()).find("[json_schema] /properties: the 1 excluded strings need a trie of more than 200 states"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW((void)json_schema_to_grammar(std::string_view(keys)));
  // A $ref cycle with no structure in between is a fixpoint, not an endless expansion.
  expect_language(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})", {"1", "{}"}, {});
}

}  // namespace
}  // namespace pse
