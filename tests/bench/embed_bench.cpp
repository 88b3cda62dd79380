// Sentences per second of pie::Embedder on all-MiniLM-L6-v2 ($ORCHARD_HOME/folders/all-minilm-l6-v2) at
// batch 1 and batch 32, over the first 128 inputs of tests/pie/embed/golden/minilm_sentences.json (the texts
// sentence_transformers_peer.py's bench runs), on ORCHARD_EMBED_THREADS threads (default 2). Wall time.
// scripts/bench-embed.sh runs it beside sentence-transformers.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pie/embedding.h"

namespace {

namespace fs = std::filesystem;

fs::path model_folder() {
  const char* env = std::getenv("ORCHARD_HOME");
  const char* home = std::getenv("HOME");
  const fs::path root = env != nullptr && *env != '\0' ? fs::path(env)
                                                       : fs::path(home != nullptr ? home : "/") / ".cache" / "orchard";
  return root / "folders" / "all-minilm-l6-v2";
}

std::vector<std::string> sentences(std::size_t n) {
  std::ifstream in(fs::path(ORCHARD_SOURCE_DIR) / "tests" / "pie" / "embed" / "golden" / "minilm_sentences.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  std::vector<std::string> out;
  for (const auto& item : golden["items"]) {
    if (out.size() == n) break;
    out.push_back(item["text"].get<std::string>());
  }
  return out;
}

void BM_embed(benchmark::State& state) {
  const fs::path folder = model_folder();
  if (!fs::exists(folder / ".source")) {
    state.SkipWithError("all-MiniLM-L6-v2 absent (scripts/fetch-models.sh)");
    return;
  }
  const char* threads = std::getenv("ORCHARD_EMBED_THREADS");
  pie::Embedder embedder(pie::load_embedding_model(folder), threads != nullptr ? std::atoi(threads) : 2);
  const std::vector<std::string> texts = sentences(128);
  const std::size_t batch = static_cast<std::size_t>(state.range(0));
  // Checked before timing: every vector normalized.
  for (const auto& v : embedder.embed(std::span(texts).first(batch), {.truncate = true}).embeddings) {
    double s = 0;
    for (float x : v) s += double(x) * x;
    if (s < 0.999 || s > 1.001) state.SkipWithError("a vector is not normalized");
  }
  for (auto _ : state) {
    for (std::size_t i = 0; i < texts.size(); i += batch) {
      const auto chunk = std::span(texts).subspan(i, std::min(batch, texts.size() - i));
      benchmark::DoNotOptimize(embedder.embed(chunk, {.truncate = true}));
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * texts.size()));
  state.counters["sentences_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * texts.size()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_embed)->Arg(1)->Arg(32)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
