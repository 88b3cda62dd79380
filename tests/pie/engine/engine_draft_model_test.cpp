// Speculative decoding with a draft model (DraftMode::draft) and with the oracle drafter (custom): outputs
// identical to decoding without speculation (greedy, free and constrained, with a draft that always agrees
// and one that disagrees often; sampled, by seed), the draft's KV rollback, and every error at load and
// request time.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "default_model.h"
#include "shared_data.h"
#include "engine_test_util.h"
#include "pie/engine.h"
#include "pse/gbnf.h"
#include "pse/json_schema.h"
#include "pse/regex.h"

namespace pie {
namespace {

// The model's first n_layer layers over the same weights: the target's vocabulary, a cheaper forward
// pass, and predictions that often differ from the whole model's (a draft that is often wrong).
std::shared_ptr<const Model> first_layers(const std::shared_ptr<const Model>& model, std::int32_t n_layer) {
  auto out = std::make_shared<Model>(*model);
  out->name = model->name + " (first " + std::to_string(n_layer) + " layers)";
  out->config.n_layer = n_layer;
  out->weights.layers.resize(static_cast<std::size_t>(n_layer));
  out->storage.push_back(model);  // its weights view the model's storage
  return out;
}

SpeculativeOptions draft(std::int32_t k = 0) { return {DraftMode::draft, k}; }

EngineOptions options(std::shared_ptr<const Model> draft_model) {
  EngineOptions o;
  o.n_threads = 2;
  o.context_length = 512;
  o.speculative_max_batch = 16;
  o.draft_model = std::move(draft_model);
  return o;
}

std::vector<std::int32_t> random_model_prompt(const std::string& text) {
  const auto& tok = *random_model()->tokenizer;
  std::vector<std::int32_t> ids{*tok.special_tokens().bos};
  const auto body = tok.encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::optional<pse::Grammar> constraint(int kind) {
  switch (kind) {
    case 1: return pse::parse_regex("([a-z]+ ){3,30}[a-z]+");
    case 2: return pse::parse_gbnf("root ::= \"{\" pair (\",\" pair)* \"}\"\npair ::= \"\\\"\" [a-z]+ \"\\\":\" [0-9]+");
    case 3:
      return pse::json_schema_to_grammar(
          std::string_view(R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 6},
              "b": {"type": "string", "maxLength": 6}, "c": {"enum": ["cat", "dog"]}},
              "required": ["a", "b", "c"], "additionalProperties": false})"),
          pse::JsonSchemaOptions{.layout = pse::JsonLayout::kCompact});
    default: return std::nullopt;
  }
}

// Greedy requests of the random model, free and constrained, with each draft (the model itself: always
// right; its first layer: often wrong) and K, give the tokens decoding without speculation gives.
TEST(EngineDraftModel, GreedyOutputsAreUnchanged) {
  const auto target = random_model();
  Engine plain_engine(target, options(nullptr));
  for (const auto& draft_model : {target, first_layers(target, 1)}) {
    SCOPED_TRACE(draft_model->name);
    Engine engine(target, options(draft_model));
    std::int32_t drafted = 0, kept = 0;
    for (const std::string text : {"a b c a b c a b", "{\"name\": \"Alice\", \"na", "1 2 3 1 2 3 1 2"}) {
      for (int kind = 0; kind < 4; ++kind) {
        SCOPED_TRACE(text + " / constraint " + std::to_string(kind));
        GenerateRequest r;
        r.prompt = random_model_prompt(text);
        r.sampling.temperature = 0;
        r.max_tokens = 48;
        r.ignore_eos = kind == 0;
        r.grammar = constraint(kind);
        const auto plain = testing::run(plain_engine, r);
        for (const SpeculativeOptions& spec : {draft(), draft(1), draft(5)}) {
          r.speculative = spec;
          const auto fast = testing::run(engine, r);
          ASSERT_EQ(fast.samples.size(), 1u);
          EXPECT_EQ(fast.samples[0].tokens, plain.samples.at(0).tokens) << "k " << spec.k;
          EXPECT_EQ(fast.samples[0].text, plain.samples.at(0).text);
          EXPECT_EQ(fast.samples[0].finish, plain.samples.at(0).finish);
          drafted += fast.usage.draft_tokens;
          kept += fast.usage.accepted_draft_tokens;
        }
      }
    }
    EXPECT_GT(drafted, 0);
    if (draft_model == target) {
      EXPECT_GT(kept, drafted / 2);  // the model agrees with itself, but for drafts the grammar cut
    } else {
      EXPECT_LT(kept, drafted);  // the first layer alone is often wrong
    }
  }
}

// Sampled requests reproduce the text decoding without speculation gives for their seed.
TEST(EngineDraftModel, SampledOutputsDependOnlyOnTheSeed) {
  const auto target = random_model();
  Engine plain_engine(target, options(nullptr));
  Engine engine(target, options(first_layers(target, 2)));
  GenerateRequest r;
  r.prompt = random_model_prompt("a b c a b c a b c a b");
  r.sampling.temperature = 0.7f;
  r.sampling.seed = 7;
  r.max_tokens = 40;
  r.ignore_eos = true;
  const auto plain = testing::run(plain_engine, r);
  for (const std::int32_t k : {0, 1, 4}) {
    r.speculative = draft(k);
    const auto fast = testing::run(engine, r);
    if (k > 0) {
      EXPECT_GT(fast.usage.draft_tokens, 0);
    }
    EXPECT_EQ(fast.samples.at(0).tokens, plain.samples.at(0).tokens) << "k " << k;
  }
}

// n > 1 samples of one prompt (forked sequences) each draft from their own draft sequence.
TEST(EngineDraftModel, ForkedSamplesAreUnchanged) {
  const auto target = random_model();
  Engine plain_engine(target, options(nullptr));
  Engine engine(target, options(target));
  GenerateRequest r;
  r.prompt = random_model_prompt("x y z x y z x");
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 3;
  r.n = 3;
  r.max_tokens = 24;
  r.ignore_eos = true;
  const auto plain = testing::run(plain_engine, r);
  r.speculative = draft(3);
  const auto fast = testing::run(engine, r);
  ASSERT_EQ(fast.samples.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(fast.samples[i].tokens, plain.samples.at(i).tokens) << i;
  EXPECT_GT(fast.usage.accepted_draft_tokens, 0);
}

// The real default model on the extraction prompts of the speculative benchmark, JSON Schema constrained,
// greedy: the same JSON with the model itself as its draft and with its first two layers.
TEST(EngineDraftModel, DefaultModelExtractionIsUnchanged) {
  ORCHARD_REQUIRE_DEFAULT_MODEL();
  const auto model = load_model(orchard::testing::default_model_path());
  Engine plain_engine(model, options(nullptr));
  std::ifstream in(orchard::testing::source_dir() / "tests/bench/speculative/extraction.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  for (const auto& draft_model : {model, first_layers(model, 2)}) {
    SCOPED_TRACE(draft_model->name);
    Engine engine(model, options(draft_model));
    std::int32_t kept = 0;
    for (std::size_t i = 0; i < 2; ++i) {
      const nlohmann::json& c = cases.at(i);
      SCOPED_TRACE(c["name"].get<std::string>());
      GenerateRequest r;
      r.prompt = model->tokenizer->encode(c["text"].get<std::string>() + "\nJSON:");
      r.sampling.temperature = 0;
      r.max_tokens = 120;
      r.grammar = pse::json_schema_to_grammar(std::string_view(c["schema"].dump()),
                                              pse::JsonSchemaOptions{.layout = pse::JsonLayout::kCompact});
      const auto plain = testing::run(plain_engine, r);
      r.speculative = draft(4);
      const auto fast = testing::run(engine, r);
      EXPECT_EQ(fast.samples.at(0).text, plain.samples.at(0).text);
      EXPECT_EQ(fast.samples.at(0).tokens, plain.samples.at(0).tokens);
      kept += fast.usage.accepted_draft_tokens;
    }
    EXPECT_GT(kept, 0);
  }
}

// A rejected tail leaves the draft's cache as it was before the tail was drafted: the same tokens, the
// same pages in use, and K/V that draft what a fresh drafter drafts.
TEST(DraftModelDrafter, RejectedTailLeavesTheCacheAsBefore) {
  const auto target = random_model();
  const auto model = first_layers(target, 2);
  DraftModelOptions o;
  o.n_pages = 64;
  DraftModelDrafter drafter(model, *target, o);
  const std::vector<std::int32_t> context = random_model_prompt("the cat sat on the mat and the cat");
  auto ask = [&](DraftModelDrafter& d, std::span<const std::int32_t> c, std::int32_t k) {
    std::vector<Drafter::Row> rows{{1, c, k, {}}};
    d.propose(rows);
    return rows[0].draft;
  };
  const auto one = ask(drafter, context, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(drafter.cached_tokens(1), context);
  const std::int32_t pages_before = drafter.pages_in_use();
  const auto eight = ask(drafter, context, 40);  // past a page boundary
  ASSERT_EQ(eight.size(), 40u);
  EXPECT_EQ(eight[0], one[0]);
  EXPECT_EQ(drafter.cached_tokens(1).size(), context.size() + 39);
  EXPECT_GT(drafter.pages_in_use(), pages_before);
  drafter.keep(1, static_cast<std::int32_t>(context.size()));  // every drafted token rejected
  EXPECT_EQ(drafter.cached_tokens(1), context);
  EXPECT_EQ(drafter.pages_in_use(), pages_before);
  // The target's correction token follows: the draft catches up from the kept K/V as a fresh one would.
  std::vector<std::int32_t> next = context;
  next.push_back(static_cast<std::int32_t>((eight[0] + 1) % model->config.n_vocab));
  DraftModelDrafter fresh(model, *target, o);
  EXPECT_EQ(ask(drafter, next, 6), ask(fresh, next, 6));
  // Part of a draft kept: the cache holds the context and the kept tokens.
  const auto d = ask(drafter, next, 5);
  drafter.keep(1, static_cast<std::int32_t>(next.size()) + 2);
  std::vector<std::int32_t> expected = next;
  expected.insert(expected.end(), d.begin(), d.begin() + 2);
  EXPECT_EQ(drafter.cached_tokens(1), expected);
  drafter.release(1);
  EXPECT_TRUE(drafter.cached_tokens(1).empty());
  EXPECT_EQ(drafter.pages_in_use(), 0);
}

// The random model written as GGUF with its end-of-sequence id changed in the file's metadata.
std::filesystem::path random_model_with_eos(const std::filesystem::path& dir, std::uint32_t eos) {
  const auto path = dir / "random.gguf";
  write_gguf_model(*random_model(), path, ConvertOptions{.type = tensor::DType::f32});
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string key = "tokenizer.ggml.eos_token_id";
  const std::size_t at = bytes.find(key);
  EXPECT_NE(at, std::string::npos);
  std::memcpy(bytes.data() + at + key.size() + 4, &eos, 4);  // after the key: its type (u32), its value
  const auto patched = dir / "random-eos.gguf";
  std::ofstream(patched, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return patched;
}

TEST(EngineDraftModel, ErrorsAtLoad) {
  const auto target = random_model();
  // Another vocabulary: both sizes named.
  auto other = std::make_shared<Model>(*target);
  other->config.n_vocab = target->config.n_vocab + 10;
  try {
    Engine engine(target, options(other));
    FAIL() << "no error";
  } catch (const ModelError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(target->config.n_vocab + 10)), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(target->config.n_vocab)), std::string::npos) << what;
    EXPECT_NE(what.find("vocabular"), std::string::npos) << what;
  }
  // The same vocabulary with another end-of-sequence id.
  const auto dir = std::filesystem::temp_directory_path() / ("orchard-draft-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::uint32_t eos = *target->tokenizer->special_tokens().eos == 3 ? 4 : 3;
  const auto patched = load_model(random_model_with_eos(dir, eos));
  std::filesystem::remove_all(dir);
  EXPECT_NO_THROW(check_draft_vocabulary(*patched, *patched));
  try {
    Engine engine(target, options(patched));
    FAIL() << "no error";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("end-of-sequence ids differ"), std::string::npos) << e.what();
  }
  // A draft that does not fit beside the target.
  EngineOptions small = options(target);
  small.draft_memory_bytes = 1 << 20;
  try {
    Engine engine(target, small);
    FAIL() << "no error";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit beside the target"), std::string::npos) << e.what();
  }
  small.draft_memory_bytes = -1;
  EXPECT_THROW(Engine(target, small), Error);
  // K outside 1..16, and the draft mode without a draft model.
  EngineOptions bad = options(target);
  bad.speculative = draft(17);
  EXPECT_THROW(Engine(target, bad), Error);
  bad = options(nullptr);
  bad.speculative = draft();
  EXPECT_THROW(Engine(target, bad), Error);
  bad.speculative = {DraftMode::custom, 0};
  EXPECT_THROW(Engine(target, bad), Error);
}

TEST(EngineDraftModel, ErrorsAtRequestTime) {
  Engine engine(random_model(), options(nullptr));
  GenerateRequest r;
  r.prompt = random_model_prompt("hi");
  for (const SpeculativeOptions& spec : {draft(), SpeculativeOptions{DraftMode::custom, 2}}) {
    r.speculative = spec;
    try {
      engine.submit(r);
      FAIL() << "no error";
    } catch (const RequestError& e) {
      EXPECT_EQ(e.param(), "speculative");
      EXPECT_NE(std::string(e.what()).find("the engine has none"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(draft_mode_from_name("draft"), DraftMode::draft);
  EXPECT_THROW(draft_mode_from_name("custom"), RequestError);
}

// The oracle drafter replays the recorded greedy output, each token wrong with probability 1 - a: the
// output is unchanged, and the share of drafts kept follows a.
TEST(OracleDrafter, ReplaysTheGreedyOutputAtTheChosenRate) {
  const auto target = random_model();
  Engine plain_engine(target, options(nullptr));
  GenerateRequest r;
  r.prompt = random_model_prompt("once upon a time");
  r.sampling.temperature = 0;
  r.max_tokens = 120;
  r.ignore_eos = true;
  const auto plain = testing::run(plain_engine, r);
  std::vector<std::int32_t> sequence = r.prompt;
  sequence.insert(sequence.end(), plain.samples.at(0).tokens.begin(), plain.samples.at(0).tokens.end());
  for (const double a : {0.0, 0.5, 1.0}) {
    SCOPED_TRACE(a);
    EngineOptions o = options(nullptr);
    o.custom_drafter = make_oracle_drafter(sequence, a, 1, target->config.n_vocab);
    o.speculative = {DraftMode::custom, 4};
    Engine engine(target, o);
    const auto fast = testing::run(engine, r);
    EXPECT_EQ(fast.samples.at(0).tokens, plain.samples.at(0).tokens);
    const Usage& u = fast.usage;
    if (a == 0.0) {
      EXPECT_EQ(u.accepted_draft_tokens, 0);
    }
    if (a == 1.0) {
      EXPECT_EQ(u.accepted_draft_tokens, u.draft_tokens);  // 4 of 4, then the bonus token
    }
    if (a == 0.5) {
      EXPECT_GT(u.accepted_draft_tokens, 0);
      EXPECT_LT(u.accepted_draft_tokens, u.draft_tokens);
    }
  }
  EXPECT_THROW(make_oracle_drafter(sequence, 1.5, 1, 100), Error);
  EXPECT_THROW(make_oracle_drafter(sequence, 0.5, 1, 1), Error);
  // A context that left the recorded sequence gets no draft.
  auto oracle = make_oracle_drafter({1, 2, 3, 4}, 1.0, 1, 100);
  const std::vector<std::int32_t> on{1, 2}, off{1, 5};
  std::vector<Drafter::Row> rows{{1, on, 8, {}}, {2, off, 8, {}}};
  oracle->propose(rows);
  EXPECT_EQ(rows[0].draft, (std::vector<std::int32_t>{3, 4}));
  EXPECT_TRUE(rows[1].draft.empty());
}

}  // namespace
}  // namespace pie
