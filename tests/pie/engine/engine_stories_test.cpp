// A real pretrained model through the whole engine: stories260K (llama2.c) at temperature 0 for 200 steps
// from BOS gives the reference implementation's text byte for byte, alone and in a crowd.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "engine_test_util.h"
#include "pie/engine.h"
#include "pse/gbnf.h"
#include "shared_data.h"

namespace pie {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(EngineStories, GreedyMatchesTheReference) {
  ORCHARD_REQUIRE_SHARED_DATA("models/stories260K/stories260K.bin");
  const auto dir = orchard::testing::shared_data("models/stories260K");
  const std::string expected = read_file(dir / "expected-greedy-200.txt");
  ASSERT_FALSE(expected.empty());
  EngineOptions o;
  o.n_threads = 2;
  Engine engine(load_model(dir / "stories260K.bin"), o);
  GenerateRequest r;
  r.prompt = {1};  // BOS
  r.sampling.temperature = 0;
  r.max_tokens = 200;
  r.ignore_eos = true;  // the reference stops only at BOS
  // Alone, then beside sampled requests of other prompts.
  auto alone = testing::run(engine, r);
  ASSERT_EQ(alone.samples.size(), 1u);
  EXPECT_EQ(alone.samples[0].tokens.size(), 200u);
  EXPECT_EQ(alone.samples[0].text, expected);
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest other;
    other.prompt = {1, 100 + i, 200 + i};
    other.sampling.seed = static_cast<std::uint64_t>(i);
    other.max_tokens = 150;
    others.push_back(engine.submit(other));
  }
  auto again = testing::run(engine, r);
  EXPECT_EQ(again.samples.at(0).text, expected);
  for (auto& s : others) EXPECT_TRUE(testing::collect(*s).done);
}

// A SentencePiece vocabulary (its encoder adds a dummy-prefix space): text the grammar fixes still comes as
// forced tokens that spell it byte for byte.
TEST(EngineStories, ForcedTokensWithSentencePiece) {
  ORCHARD_REQUIRE_SHARED_DATA("models/stories260K/stories260K.bin");
  EngineOptions o;
  o.n_threads = 2;
  Engine engine(load_model(orchard::testing::shared_data("models/stories260K/stories260K.bin")), o);
  GenerateRequest r;
  r.prompt = {1};
  r.sampling.seed = 3;
  r.max_tokens = 100;
  r.grammar = pse::parse_gbnf(R"gbnf(root ::= "Once upon a time, there was a " [a-z]{1,12} "." )gbnf");
  auto res = testing::run(engine, r);
  ASSERT_EQ(res.samples.size(), 1u);
  EXPECT_EQ(res.samples[0].finish, FinishReason::stop) << res.samples[0].error;
  EXPECT_TRUE(res.samples[0].text.starts_with("Once upon a time, there was a ")) << res.samples[0].text;
  EXPECT_TRUE(res.samples[0].text.ends_with(".")) << res.samples[0].text;
  EXPECT_GT(engine.stats().forced_tokens, 3u);
}

}  // namespace
}  // namespace pie
