// Speculative decoding (prompt lookup) through the engine: outputs identical to decoding without it
// (greedy: stories260K's reference text, the random model free and constrained, a budget that trims every
// draft), drafts actually kept, sampled outputs reproducible by seed and distributed as without
// speculation (a two-sample chi-square test), and the options' errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "pie/engine.h"
#include "pse/gbnf.h"
#include "pse/json_schema.h"
#include "pse/regex.h"
#include "default_model.h"
#include "shared_data.h"

namespace pie {
namespace {

SpeculativeOptions ngram(std::int32_t k = 0) { return {DraftMode::ngram, k}; }

std::vector<std::int32_t> random_model_prompt(const std::string& text) {
  const auto& tok = *random_model()->tokenizer;
  std::vector<std::int32_t> ids{*tok.special_tokens().bos};
  const auto body = tok.encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

EngineOptions options(std::int32_t max_batch_tokens = 512) {
  EngineOptions o;
  o.n_threads = 2;
  o.context_length = 512;
  o.max_batch_tokens = max_batch_tokens;
  o.speculative_max_batch = 16;
  return o;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(EngineSpeculative, StoriesGreedyIsTheReferenceTextWithDraftsKept) {
  ORCHARD_REQUIRE_SHARED_DATA("models/stories260K/stories260K.bin");
  const auto dir = orchard::testing::shared_data("models/stories260K");
  const std::string expected = read_file(dir / "expected-greedy-200.txt");
  Engine engine(load_model(dir / "stories260K.bin"), options());
  for (const SpeculativeOptions& spec : {ngram(), ngram(1), ngram(4), ngram(16)}) {
    SCOPED_TRACE(spec.k);
    GenerateRequest r;
    r.prompt = {1};
    r.sampling.temperature = 0;
    r.max_tokens = 200;
    r.ignore_eos = true;
    r.speculative = spec;
    const auto out = testing::run(engine, r);
    ASSERT_EQ(out.samples.size(), 1u);
    EXPECT_EQ(out.samples[0].text, expected);
    EXPECT_EQ(out.samples[0].tokens.size(), 200u);
    // A children's story repeats itself: some drafts are kept, each a forward pass saved.
    EXPECT_GT(out.usage.draft_tokens, 0);
    EXPECT_GT(out.usage.accepted_draft_tokens, 0);
    EXPECT_LE(out.usage.accepted_draft_tokens, out.usage.draft_tokens);
  }
  EXPECT_GT(engine.stats().accepted_draft_tokens, 0u);
}

// Greedy requests of the random model, free and constrained, with speculation and without: the same tokens.
TEST(EngineSpeculative, GreedyOutputsAreUnchanged) {
  Engine engine(random_model(), options());
  const std::vector<std::string> texts{"a b c a b c a b c a b", "{\"name\": \"Alice\", \"name\": \"Al",
                                       "Once upon a time, once upon a time, once", "1 2 3 1 2 3 1 2",
                                       "{\"a\":\"cat\",\"b\":\"dog\"} {\"a\":\"cat\",\"b\":\"dog\"} {\"a\":\"cat"};
  for (const std::string& text : texts) {
    for (int constrained = 0; constrained < 4; ++constrained) {
      SCOPED_TRACE(text + " / constraint " + std::to_string(constrained));
      auto make = [&](std::optional<SpeculativeOptions> spec) {
        GenerateRequest r;
        r.prompt = random_model_prompt(text);
        r.sampling.temperature = 0;
        r.max_tokens = 60;
        r.speculative = spec;
        if (constrained == 0) r.ignore_eos = true;
        if (constrained == 1) r.grammar = pse::parse_regex("([a-z]+ ){3,30}[a-z]+");
        if (constrained == 2) r.grammar = pse::parse_gbnf(R"(root ::= "{" pair ("," pair)* "}"
pair ::= "\"" [a-z]+ "\":" [0-9]+)");
        // Text the grammar forces between the values (jump-forward) right where drafts copy the prompt.
        if (constrained == 3) {
          r.grammar = pse::json_schema_to_grammar(std::string_view(
              R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 6},
                  "b": {"type": "string", "maxLength": 6}, "c": {"enum": ["cat", "dog"]}},
                  "required": ["a", "b", "c"], "additionalProperties": false})"),
              pse::JsonSchemaOptions{.layout = pse::JsonLayout::kCompact});
        }
        return r;
      };
      const auto plain = testing::run(engine, make(SpeculativeOptions{}));
      for (const SpeculativeOptions& spec : {ngram(), ngram(3)}) {
        const auto fast = testing::run(engine, make(spec));
        ASSERT_EQ(fast.samples.size(), 1u);
        EXPECT_EQ(fast.samples[0].tokens, plain.samples[0].tokens);
        EXPECT_EQ(fast.samples[0].text, plain.samples[0].text);
        EXPECT_EQ(fast.samples[0].finish, plain.samples[0].finish);
      }
    }
  }
}

// The real default model (Q4_1) on the extraction prompts of the speculative benchmark: the same JSON with
// and without speculation, greedy, and drafts kept (the answers copy their paragraph).
TEST(EngineSpeculative, DefaultModelExtractionIsUnchanged) {
  ORCHARD_REQUIRE_DEFAULT_MODEL();
  const auto model = load_model(orchard::testing::default_model_path());
  Engine engine(model, options());
  std::ifstream in(orchard::testing::source_dir() / "tests/bench/speculative/extraction.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  std::int32_t kept = 0;
  for (const nlohmann::json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto make = [&](SpeculativeOptions spec) {
      GenerateRequest r;
      r.prompt = model->tokenizer->encode(c["text"].get<std::string>() + "\nJSON:");
      r.sampling.temperature = 0;
      r.max_tokens = 160;
      r.grammar = pse::json_schema_to_grammar(std::string_view(c["schema"].dump()),
                                              pse::JsonSchemaOptions{.layout = pse::JsonLayout::kCompact});
      r.speculative = spec;
      return r;
    };
    const auto plain = testing::run(engine, make({}));
    const auto fast = testing::run(engine, make(ngram()));
    EXPECT_EQ(fast.samples.at(0).text, plain.samples.at(0).text);
    EXPECT_EQ(fast.samples.at(0).tokens, plain.samples.at(0).tokens);
    kept += fast.usage.accepted_draft_tokens;
  }
  EXPECT_GT(kept, 0);
}

// A drafter that never guesses: what is drafted then comes from the grammar.
class NoGuesses final : public Drafter {
 public:
  void propose(std::span<Row> rows) override {
    for (Row& row : rows) row.draft.clear();
  }
};

// Text a JSON Schema forces (each key and its `":"`) leaves its last token to the model (jump-forward keeps
// it back), which spells it as it did before: drafted as such without a guess, kept, and fewer steps; the
// output is the same. (Without these drafts, a drafter that never guesses drafts nothing.) 2-3 s.
TEST(EngineSpeculative, ForcedTextIsDraftedAsTheModelSpelledIt) {
  ORCHARD_REQUIRE_DEFAULT_MODEL();
  const auto model = load_model(orchard::testing::default_model_path());
  EngineOptions o = options();
  o.custom_drafter = std::make_shared<NoGuesses>();
  Engine engine(model, o);
  std::ifstream in(orchard::testing::source_dir() / "tests/bench/speculative/extraction.json");
  const nlohmann::json c = nlohmann::json::parse(in).at(0);  // contact: six string and integer fields
  auto make = [&](SpeculativeOptions spec) {
    GenerateRequest r;
    r.prompt = model->tokenizer->encode(c["text"].get<std::string>() + "\nJSON:");
    r.sampling.temperature = 0;
    r.max_tokens = 120;
    r.grammar = pse::json_schema_to_grammar(std::string_view(c["schema"].dump()),
                                            pse::JsonSchemaOptions{.layout = pse::JsonLayout::kCompact});
    r.speculative = spec;
    return r;
  };
  const std::uint64_t before = engine.stats().steps;
  const auto plain = testing::run(engine, make({}));
  const std::uint64_t plain_steps = engine.stats().steps - before;
  const auto fast = testing::run(engine, make({DraftMode::custom, 0}));
  const std::uint64_t fast_steps = engine.stats().steps - before - plain_steps;
  EXPECT_EQ(fast.samples.at(0).text, plain.samples.at(0).text);
  EXPECT_EQ(fast.samples.at(0).tokens, plain.samples.at(0).tokens);
  EXPECT_GE(fast.usage.accepted_draft_tokens, 4);  // at least one for each field after the first
  EXPECT_LE(fast.usage.accepted_draft_tokens, fast.usage.draft_tokens);
  // Each kept draft token is a step saved; a rejected one costs none.
  EXPECT_EQ(plain_steps - fast_steps, static_cast<std::uint64_t>(fast.usage.accepted_draft_tokens));
}

// A token budget of 3 per step trims every draft to two tokens (and a busy step to none): still the same.
TEST(EngineSpeculative, DraftsTrimmedByTheBudgetChangeNothing) {
  Engine tight(random_model(), options(3));
  Engine roomy(random_model(), options());
  GenerateRequest r;
  r.prompt = random_model_prompt("a b c a b c a b c a b c");
  r.sampling.temperature = 0;
  r.max_tokens = 40;
  r.ignore_eos = true;
  r.speculative = ngram(8);
  const auto a = testing::run(tight, r);
  r.speculative = SpeculativeOptions{};
  const auto b = testing::run(roomy, r);
  EXPECT_EQ(a.samples.at(0).tokens, b.samples.at(0).tokens);
}

// Speculation waits until at most speculative_max_batch samples are live, prefilling ones included: the
// first of eight requests decodes while the others' prompts fill a few tokens a step, and drafts nothing
// under a limit of 4 (the others are still live when it ends); under a limit of 8 it drafts.
TEST(EngineSpeculative, ALargeBatchDraftsNothingWhileItFills) {
  for (const std::int32_t limit : {4, 8}) {
    SCOPED_TRACE(limit);
    EngineOptions o = options(24);
    o.speculative_max_batch = limit;
    o.max_running = 8;
    Engine engine(random_model(), o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 8; ++i) {
      GenerateRequest r;
      r.prompt = random_model_prompt(std::string(static_cast<std::size_t>(i), 'x') + " a b c a b c a b c a b c");
      r.sampling.temperature = 0;
      r.max_tokens = i == 0 ? 12 : 200;
      r.ignore_eos = true;
      r.speculative = ngram(4);
      streams.push_back(engine.submit(r));
    }
    const auto first = testing::collect(*streams[0]);
    EXPECT_EQ(first.samples.at(0).tokens.size(), 12u);
    if (limit == 4) {
      EXPECT_EQ(first.usage.draft_tokens, 0);
    } else {
      EXPECT_GT(first.usage.draft_tokens, 0);
    }
    for (auto& s : streams) s->cancel();
  }
}

TEST(EngineSpeculative, SampledOutputsDependOnlyOnTheSeed) {
  Engine engine(random_model(), options());
  GenerateRequest r;
  r.prompt = random_model_prompt("a b c a b c a b c a b");
  r.sampling.temperature = 0.7f;
  r.sampling.seed = 42;
  r.max_tokens = 50;
  r.ignore_eos = true;
  r.speculative = ngram();
  const auto a = testing::run(engine, r);
  const auto b = testing::run(engine, r);
  EXPECT_EQ(a.samples.at(0).tokens, b.samples.at(0).tokens);
  EXPECT_EQ(a.samples.at(0).tokens.size(), 50u);
  // Whatever was drafted (the adaptive length follows measured step times), the seed gives sample()'s text.
  r.speculative = SpeculativeOptions{};
  const auto plain = testing::run(engine, r);
  EXPECT_EQ(a.samples.at(0).tokens, plain.samples.at(0).tokens);
  for (const std::int32_t k : {1, 4}) {
    r.speculative = ngram(k);
    const auto fixed = testing::run(engine, r);
    EXPECT_GT(fixed.usage.draft_tokens, 0);
    EXPECT_EQ(fixed.samples.at(0).tokens, plain.samples.at(0).tokens) << "k " << k;
  }
}

// 99.9% quantile of chi-square with k degrees of freedom (Wilson-Hilferty).
double chi_square_bound(int k) {
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1 - a + 3.09 * std::sqrt(a), 3);
}

// The first two tokens of many sampled requests (the second one verified against a draft) have the same
// joint distribution with speculation as without: a two-sample chi-square test over the pairs seen
// often, the rare ones pooled. A grammar keeps the tokens to three that the prompt repeats, so that prompt
// lookup always finds a draft after the first (checked against the grammar, verified under its mask).
TEST(EngineSpeculative, SampledTokensKeepTheirDistribution) {
  EngineOptions o = options();
  o.max_queued = 4096;
  Engine engine(random_model(), o);
  const int n = 1500;
  auto histogram = [&](std::optional<SpeculativeOptions> spec, std::uint64_t seed0, std::int32_t* drafted) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < n; ++i) {
      GenerateRequest r;
      r.prompt = {*random_model()->tokenizer->special_tokens().bos, 300, 301, 302, 300, 301, 302, 300};
      r.sampling.temperature = 1.0f;
      r.sampling.seed = seed0 + static_cast<std::uint64_t>(i);
      r.max_tokens = 2;
      r.grammar = pse::parse_gbnf("root ::= t t+\nt ::= <[300]> | <[301]> | <[302]>");
      r.speculative = spec;
      streams.push_back(engine.submit(r));
    }
    std::map<std::pair<std::int32_t, std::int32_t>, int> counts;  // (first token, second token)
    for (auto& s : streams) {
      const auto out = testing::collect(*s);
      ++counts[{out.samples.at(0).tokens.at(0), out.samples.at(0).tokens.at(1)}];
      *drafted += out.usage.draft_tokens;
    }
    return counts;
  };
  std::int32_t drafted_plain = 0, drafted_spec = 0;
  const auto plain = histogram(SpeculativeOptions{}, 1, &drafted_plain);
  const auto spec = histogram(ngram(1), 1'000'000, &drafted_spec);
  EXPECT_EQ(drafted_plain, 0);
  ASSERT_GT(drafted_spec, n / 2) << "too few drafts to test verification";
  std::map<std::pair<std::int32_t, std::int32_t>, std::pair<int, int>> both;
  for (const auto& [t, c] : plain) both[t].first = c;
  for (const auto& [t, c] : spec) both[t].second = c;
  double chi = 0;
  int cells = 0, rare_a = 0, rare_b = 0;
  for (const auto& [t, c] : both) {
    if (c.first + c.second < 20) {
      rare_a += c.first;
      rare_b += c.second;
      continue;
    }
    const double e = (c.first + c.second) / 2.0;  // equal sample sizes
    chi += (c.first - e) * (c.first - e) / e + (c.second - e) * (c.second - e) / e;
    ++cells;
  }
  if (rare_a + rare_b >= 20) {
    const double e = (rare_a + rare_b) / 2.0;
    chi += (rare_a - e) * (rare_a - e) / e + (rare_b - e) * (rare_b - e) / e;
    ++cells;
  }
  ASSERT_GE(cells, 3);
  EXPECT_LT(chi, chi_square_bound(cells - 1)) << cells << " cells";
}

TEST(EngineSpeculative, BadOptionsAreErrors) {
  EngineOptions o = options();
  o.speculative = {DraftMode::ngram, 17};
  EXPECT_THROW(Engine(random_model(), o), Error);
  o = options();
  o.speculative_max_batch = -1;
  EXPECT_THROW(Engine(random_model(), o), Error);
  Engine engine(random_model(), options());
  GenerateRequest r;
  r.prompt = random_model_prompt("hi");
  r.speculative = SpeculativeOptions{DraftMode::ngram, -1};
  try {
    engine.submit(r);
    FAIL() << "no error";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param(), "speculative.k");
  }
  EXPECT_EQ(draft_mode_from_name("ngram"), DraftMode::ngram);
  EXPECT_THROW(draft_mode_from_name("eagle"), RequestError);
}

}  // namespace
}  // namespace pie
