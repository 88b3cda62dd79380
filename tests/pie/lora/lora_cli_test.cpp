// The LoRA command line through the built binary: --lora on run (a GGUF adapter at a scale, stacked),
// `orchard lora merge` whose model gives the same greedy text, `orchard convert` of a PEFT folder into a
// GGUF adapter that gives its source's text, and the usage errors (exit status 2, one line naming what).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <random>

#include "lora_test_util.h"
#include "pie/engine.h"
#include "pie/lora.h"

namespace pie::testing {
namespace {

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr
};

Result orchard(const std::string& args) {
  const std::string command = std::string(ORCHARD_BINARY) + " " + args + " 2>&1";
  Result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) r.out += buf.data();
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A rank-4 adapter on every v and up projection of orchard-random, written as a GGUF adapter.
void write_random_adapter(const std::filesystem::path& path, std::uint32_t seed) {
  const auto model = random_model();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  LoraAdapter a;
  a.alpha = 8;
  for (std::int32_t layer = 0; layer < model->config.n_layer; ++layer) {
    const LayerWeights& l = model->weights.layers[static_cast<std::size_t>(layer)];
    for (auto [site, w] : {std::pair{ProjectionSite::v, &l.wv}, std::pair{ProjectionSite::up, &l.w_up}}) {
      LoraPair p{site, layer, 4, n_in(*w), n_out(*w), 2.0f, {}, {}};
      for (std::int64_t i = 0; i < p.rank * p.n_in; ++i) p.a.push_back(normal(rng) / std::sqrt(static_cast<float>(p.n_in)));
      for (std::int64_t i = 0; i < p.n_out * p.rank; ++i) p.b.push_back(normal(rng));
      a.pairs.push_back(std::move(p));
    }
  }
  fit_lora_adapter(a, *model);
  write_gguf_adapter(a, *model, path);
}

// The generated text of a greedy run (stdout's first line).
std::string run_text(const std::string& args) {
  const Result r = orchard("run " + args + " -p 'Once upon a time' -n 10 --temp 0 --ignore-eos --threads 1");
  EXPECT_EQ(r.status, 0) << r.out;
  return r.out.substr(0, r.out.find('\n'));
}

TEST(LoraCli, RunWithAdaptersAndMergedModelsAgree) {
  TempDir dir("lora-cli");
  const std::string a = (dir.path / "a.gguf").string(), b = (dir.path / "b.gguf").string();
  write_random_adapter(a, 1);
  write_random_adapter(b, 2);
  const std::string base = run_text("-m orchard-random");
  const std::string with_a = run_text("-m orchard-random --lora " + a + ":0.5");
  const std::string stacked = run_text("-m orchard-random --lora first=" + a + ":0.5 --lora " + b);
  EXPECT_NE(with_a, base);
  EXPECT_NE(stacked, with_a);
  const std::string merged = (dir.path / "merged.gguf").string();
  Result r = orchard("lora merge orchard-random " + a + ":0.5 " + b + " -o " + merged + " --type f32");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 adapter(s) merged"), std::string::npos) << r.out;
  EXPECT_EQ(run_text("-m " + merged), stacked);
}

TEST(LoraCli, ConvertWritesAGgufAdapterOfAPeftFolder) {
  TempDir dir("lora-cli-convert");
  const std::string out = (dir.path / "a.gguf").string();
  const std::string peft = adapter_dir("llama", "a").string(), base = test_model_dir("llama").string();
  Result r = orchard("convert " + peft + " --base " + base + " -o " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("LoRA adapter for llama"), std::string::npos) << r.out;
  // Its pairs are the PEFT folder's (the logits agreement is lora_forward_test's).
  const auto model = load_hf_model(test_model_dir("llama"));
  EXPECT_EQ(load_lora_adapter(out, *model)->pairs.size(), read_lora_adapter(peft)->pairs.size());
  r = orchard("convert " + peft + " -o " + out);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--base"), std::string::npos) << r.out;
}

TEST(LoraCli, UsageAndAdapterErrors) {
  TempDir dir("lora-cli-errors");
  Result r = orchard("run -m orchard-random -p x -n 1 --lora ''");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--lora"), std::string::npos) << r.out;
  r = orchard("run -m orchard-random -p x -n 1 --lora a.gguf:1e300");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("SCALE must be a number"), std::string::npos) << r.out;
  r = orchard("run -m orchard-random -p x -n 1 --lora " + (dir.path / "missing").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("no such file"), std::string::npos) << r.out;
  // An adapter of another model's shapes.
  r = orchard("run -m orchard-random -p x -n 1 --lora " + adapter_dir("llama", "a").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("the base weight is"), std::string::npos) << r.out;
  r = orchard("lora merge orchard-random -o " + (dir.path / "m.gguf").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("ADAPTER"), std::string::npos) << r.out;
  r = orchard("lora frobnicate");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown subcommand"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace pie::testing
