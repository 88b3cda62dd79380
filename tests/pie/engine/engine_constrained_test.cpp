// Constrained generation with the default model (random weights, so the model itself knows no JSON):
// every output of several JSON schemas and GBNF grammars, over many seeds, ends by the grammar ("stop"),
// parses, replays through a fresh pse::Matcher to an accepting state, and never hits a dead end. Forced
// (jump-forward) tokens are used where the grammar fixes the text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "pie/engine.h"
#include "pie/grammar_vocabulary.h"
#include "pse/compiler.h"
#include "pse/gbnf.h"
#include "pse/json_schema.h"
#include "pse/matcher.h"
#include "pse/regex.h"
#include "shared_data.h"

namespace pie {
namespace {

using testing::RunResult;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `n_seeds` sampled generations of the grammar and checks each output; returns them.
std::vector<std::string> generate_checked(Engine& engine, const pse::Grammar& grammar, int n_seeds,
                                          float temperature = 1.0f) {
  const Model& model = engine.model();
  pse::CompiledGrammar compiled =
      pse::compile_grammar(grammar, grammar_vocabulary(*model.tokenizer, static_cast<std::size_t>(model.config.n_vocab)));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int seed = 0; seed < n_seeds; ++seed) {
    GenerateRequest r;
    r.prompt = {*model.tokenizer->special_tokens().bos};
    const auto body = model.tokenizer->encode("Answer in JSON:");
    r.prompt.insert(r.prompt.end(), body.begin(), body.end());
    r.sampling.temperature = temperature;
    r.sampling.seed = static_cast<std::uint64_t>(seed);
    r.max_tokens = 1500;
    r.grammar = grammar;
    streams.push_back(engine.submit(std::move(r)));
  }
  std::vector<std::string> outputs;
  for (auto& stream : streams) {
    RunResult res = testing::collect(*stream);
    EXPECT_EQ(res.samples.size(), 1u);
    if (res.samples.empty()) continue;
    const auto& s = res.samples[0];
    EXPECT_EQ(s.finish, FinishReason::stop) << "finish " << finish_reason_name(s.finish) << " " << s.error
                                            << "\noutput: " << s.text;
    pse::Matcher replay(compiled);
    EXPECT_TRUE(replay.accept_bytes(s.text)) << "output leaves the grammar: " << s.text;
    EXPECT_TRUE(replay.can_stop()) << "output is not complete: " << s.text;
    // The tokens replay too (the text is exactly their bytes).
    pse::Matcher by_token(compiled);
    for (std::int32_t t : s.tokens) {
      if (!by_token.accept_token(t)) {
        ADD_FAILURE() << "token " << t << " leaves the grammar in " << s.text;
        break;
      }
    }
    outputs.push_back(s.text);
  }
  return outputs;
}

EngineOptions options() {
  EngineOptions o;
  o.n_threads = 2;
  o.context_length = 2048;
  return o;
}

TEST(EngineConstrained, JsonSchemasAlwaysValidate) {
  Engine engine(random_model(), options());
  const std::string person = read_file(orchard::testing::source_dir() / "examples/person.schema.json");
  ASSERT_FALSE(person.empty());
  for (const std::string& text : generate_checked(engine, pse::json_schema_to_grammar(std::string_view(person)), 6)) {
    const auto j = nlohmann::json::parse(text);
    ASSERT_TRUE(j.is_object());
    EXPECT_TRUE(j.contains("name") && j["name"].is_string());
    const auto name_len = j["name"].get<std::string>().size();
    EXPECT_GE(name_len, 1u);
    // JSON Schema's integer is a value, not a spelling: 0.00 is an integer.
    ASSERT_TRUE(j.contains("age") && j["age"].is_number()) << text;
    const double age = j["age"].get<double>();
    EXPECT_EQ(age, std::floor(age)) << text;
    EXPECT_GE(age, 0) << text;
    EXPECT_LE(age, 130) << text;
    for (auto& [k, v] : j.items()) EXPECT_TRUE(k == "name" || k == "age" || k == "email" || k == "tags") << k;
    if (j.contains("tags")) {
      EXPECT_LE(j["tags"].size(), 3u);
      for (const auto& t : j["tags"]) EXPECT_TRUE(t == "admin" || t == "dev" || t == "ops") << t;
    }
  }
  const char* schemas[] = {
      R"({"type":"object","properties":{"id":{"type":"integer","minimum":1,"maximum":100000},"ok":{"type":"boolean"},
          "tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":4}},
          "required":["id","ok","tags"],"additionalProperties":false})",
      R"({"type":"array","items":{"type":"number","minimum":-5,"maximum":5},"minItems":1,"maxItems":5})",
      R"({"enum":["red","green","blue",{"rgb":[1,2,3]}]})",
      R"({"type":"object","properties":{"kind":{"const":"point"},"x":{"type":"number","minimum":-1000,"maximum":1000},
          "y":{"type":"number","exclusiveMinimum":0,"maximum":1},
          "label":{"type":["string","null"],"maxLength":12}},"required":["kind","x","y","label"]})",
  };
  for (const char* schema : schemas) {
    const auto parsed = nlohmann::json::parse(schema);
    for (const std::string& text : generate_checked(engine, pse::json_schema_to_grammar(std::string_view(schema)), 5)) {
      const auto j = nlohmann::json::parse(text);  // throws (fails the test) on bad JSON
      if (parsed.contains("required")) {
        for (const auto& key : parsed["required"]) EXPECT_TRUE(j.contains(key.get<std::string>())) << text;
      }
      if (parsed.contains("enum")) {
        EXPECT_NE(std::find(parsed["enum"].begin(), parsed["enum"].end(), j), parsed["enum"].end()) << text;
      }
      if (parsed.value("type", "") == "array") {
        EXPECT_GE(j.size(), 1u);
        EXPECT_LE(j.size(), 5u);
        for (const auto& v : j) EXPECT_TRUE(v.is_number() && v.get<double>() >= -5 && v.get<double>() <= 5) << text;
      }
    }
  }
  // Fixed keys and punctuation came as forced tokens, not sampled ones.
  EXPECT_GT(engine.stats().forced_tokens, 0u);
  EXPECT_GT(engine.stats().grammar_compiles, 0u);
  EXPECT_EQ(engine.stats().requests_failed, 0u);
}

TEST(EngineConstrained, GbnfAndRegexGrammars) {
  Engine engine(random_model(), options());
  const pse::Grammar arithmetic = pse::parse_gbnf(R"gbnf(
root   ::= expr
expr   ::= term (("+" | "-") term){0,3}
term   ::= factor (("*" | "/") factor){0,2}
factor ::= [0-9]{1,3} | "(" expr ")"
)gbnf");
  for (const std::string& text : generate_checked(engine, arithmetic, 6)) EXPECT_FALSE(text.empty());
  const pse::Grammar yes_no = pse::parse_gbnf(R"gbnf(root ::= ("yes" | "no") ", because " [a-z ]{1,20} ".")gbnf");
  for (const std::string& text : generate_checked(engine, yes_no, 4, 0.0f)) {
    EXPECT_TRUE(text.starts_with("yes, because ") || text.starts_with("no, because ")) << text;
  }
  const pse::Grammar phone = pse::parse_regex("[0-9]{3}-[0-9]{4}");
  for (const std::string& text : generate_checked(engine, phone, 4)) EXPECT_EQ(text.size(), 8u) << text;
}

// A grammar that names a special token (a token terminal) gets it, as a token: the default model's "<s>"
// in the middle of the output, never as the text "<s>"; the text leaves control tokens out.
TEST(EngineConstrained, TokenTerminalsReadSpecialTokens) {
  Engine engine(random_model(), options());
  const Model& model = engine.model();
  const std::int32_t bos = *model.tokenizer->special_tokens().bos;
  const pse::Grammar g = pse::parse_gbnf("root ::= \"ab\" <s> [a-c]{1,3} \".\"");
  const pse::CompiledGrammar compiled =
      pse::compile_grammar(g, grammar_vocabulary(*model.tokenizer, static_cast<std::size_t>(model.config.n_vocab)));
  for (int seed = 0; seed < 4; ++seed) {
    GenerateRequest r;
    r.prompt = {bos};
    r.sampling.temperature = 1.0f;
    r.sampling.seed = static_cast<std::uint64_t>(seed);
    r.max_tokens = 64;
    r.grammar = g;
    RunResult res = testing::collect(*engine.submit(std::move(r)));
    ASSERT_EQ(res.samples.size(), 1u);
    const auto& s = res.samples[0];
    EXPECT_EQ(s.finish, FinishReason::stop) << s.error << " " << s.text;
    EXPECT_TRUE(s.text.starts_with("ab") && s.text.ends_with(".") && s.text.find('<') == std::string::npos) << s.text;
    EXPECT_EQ(std::count(s.tokens.begin(), s.tokens.end(), bos), 1) << s.text;
    pse::Matcher replay(compiled);
    for (const std::int32_t t : s.tokens) ASSERT_TRUE(replay.accept_token(t)) << "token " << t << " in " << s.text;
    EXPECT_TRUE(replay.can_stop()) << s.text;
  }
}

// A sampled token may end inside a character ("\xC3" of "é"): the forced text then starts with the bytes
// that finish it, which no tokenizer encodes as text; they are spelled with byte tokens.
TEST(EngineConstrained, ForcedTextStartingInsideACharacter) {
  Engine engine(random_model(), options());
  const pse::Grammar accents = pse::parse_gbnf("root ::= \"\u00e9\u00e8\u00ea\u00eb\u00e9\" [a-z]{1,3}");
  for (const std::string& text : generate_checked(engine, accents, 8)) {
    EXPECT_TRUE(text.starts_with("\xC3\xA9\xC3\xA8\xC3\xAA\xC3\xAB\xC3\xA9")) << text;
  }
  EXPECT_GT(engine.stats().forced_tokens, 0u);
}

TEST(EngineConstrained, SharedJsonGbnf) {
  ORCHARD_REQUIRE_SHARED_DATA("grammars/json.gbnf");
  Engine engine(random_model(), options());
  const pse::Grammar json = pse::parse_gbnf(read_file(orchard::testing::shared_data("grammars/json.gbnf")));
  // llama.cpp's JSON grammar: any JSON object; the random model's output must still parse.
  for (const std::string& text : generate_checked(engine, json, 4)) {
    EXPECT_TRUE(nlohmann::json::accept(text)) << text;
  }
}

// Token tables built in the background (the default), all in compile or each at first use: the same
// masks, so the same seeded outputs, token for token.
TEST(EngineConstrained, TablesBuiltAnyWayGiveTheSameOutputs) {
  const pse::Grammar g = pse::json_schema_to_grammar(std::string_view(
      R"({"type":"object","properties":{"id":{"type":"integer","minimum":1,"maximum":9999},
          "name":{"type":"string","maxLength":10},"tags":{"type":"array","items":{"enum":["a","b","c"]}}},
          "required":["id","name"]})"));
  std::vector<std::vector<std::vector<std::int32_t>>> tokens_by_mode;
  for (const pse::TableBuild build :
       {pse::TableBuild::kInBackground, pse::TableBuild::kInCompile, pse::TableBuild::kAtFirstUse}) {
    EngineOptions o = options();
    o.grammar_tables = build;
    Engine engine(random_model(), o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int seed = 0; seed < 4; ++seed) {
      GenerateRequest r;
      r.prompt = {*engine.model().tokenizer->special_tokens().bos, 65, 66};
      r.grammar = g;
      r.max_tokens = 300;
      r.sampling.seed = static_cast<std::uint64_t>(seed);
      streams.push_back(engine.submit(std::move(r)));
    }
    auto& outputs = tokens_by_mode.emplace_back();
    for (auto& stream : streams) {
      RunResult res = testing::collect(*stream);
      ASSERT_EQ(res.samples.size(), 1u);
      EXPECT_EQ(res.samples[0].finish, FinishReason::stop) << res.samples[0].error;
      outputs.push_back(res.samples[0].tokens);
    }
  }
  EXPECT_EQ(tokens_by_mode[0], tokens_by_mode[1]);
  EXPECT_EQ(tokens_by_mode[0], tokens_by_mode[2]);
}

TEST(EngineConstrained, MixedWithUnconstrainedAndSamples) {
  Engine engine(random_model(), options());
  const pse::Grammar g = pse::json_schema_to_grammar(std::string_view(
      R"({"type":"object","properties":{"a":{"type":"integer","minimum":-50,"maximum":50},"b":{"enum":[true,false,null]}},"required":["a","b"]})"));
  GenerateRequest constrained;
  constrained.prompt = {*engine.model().tokenizer->special_tokens().bos, 65, 66};
  constrained.grammar = g;
  constrained.n = 3;
  constrained.max_tokens = 400;
  constrained.sampling.seed = 9;
  GenerateRequest free = constrained;
  free.grammar.reset();
  free.n = 1;
  free.max_tokens = 50;
  free.ignore_eos = true;
  auto s1 = engine.submit(constrained);
  auto s2 = engine.submit(free);
  RunResult a = testing::collect(*s1);
  RunResult b = testing::collect(*s2);
  ASSERT_EQ(a.samples.size(), 3u);
  for (const auto& s : a.samples) {
    EXPECT_EQ(s.finish, FinishReason::stop) << s.error;
    const auto j = nlohmann::json::parse(s.text);
    EXPECT_TRUE(j["a"].is_number() && j["a"].get<double>() == std::floor(j["a"].get<double>())) << s.text;
  }
  EXPECT_EQ(b.samples.at(0).tokens.size(), 50u);
}

}  // namespace
}  // namespace pie
