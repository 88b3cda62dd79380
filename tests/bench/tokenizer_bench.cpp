// Google Benchmark of tokenizer encoding throughput (bytes of UTF-8 text per second, one thread) on
// war-and-peace.txt (3.2 MB of English prose) with the Llama 3 folder tokenizer (byte-level BPE, 128,256
// tokens) and the llama-spm GGUF (SentencePiece BPE, 32,000 tokens): the whole book in one call, and the
// book cut into 4 KiB pieces at line ends (prompt-sized calls). The tokenizer keeps a per-thread cache of
// recently encoded words, so those two measure a warm cache; WholeCold encodes the book with a freshly
// loaded tokenizer each time (load not timed), its cache empty at the start. Before timing, each case
// checks that decode(encode(text)) gives the text back and that encoding is deterministic.
// scripts/bench-tokenizers.sh runs it beside Hugging Face tokenizers and tiktoken
// (tests/bench/peers/tokenizer_peers.py) on the same text and vocabulary and prints the ratios.
//
//   build-<dir>/tests/bench/tokenizer_bench --benchmark_filter=Llama3
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizers/tokenizer.h"

namespace {

namespace fs = std::filesystem;

fs::path shared_data(const std::string& relative) {
  const char* env = std::getenv("ORCHARD_SHARED_DATA");
  const fs::path base = env != nullptr && *env != '\0' ? fs::path(env) : fs::path(ORCHARD_DEFAULT_SHARED_DATA);
  return base / relative;
}

const std::string& corpus() {
  static const std::string text = [] {
    std::ifstream in(shared_data("corpus/war-and-peace.txt"), std::ios::binary);
    if (!in) throw std::runtime_error("tokenizer_bench: corpus/war-and-peace.txt not found (set ORCHARD_SHARED_DATA)");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }();
  return text;
}

// The corpus cut at the last line end before every 4 KiB.
const std::vector<std::string>& chunks() {
  static const std::vector<std::string> pieces = [] {
    std::vector<std::string> out;
    const std::string& text = corpus();
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = std::min(text.size(), start + 4096);
      if (end < text.size()) {
        const std::size_t nl = text.rfind('\n', end - 1);
        if (nl != std::string::npos && nl >= start) end = nl + 1;
      }
      out.push_back(text.substr(start, end - start));
      start = end;
    }
    return out;
  }();
  return pieces;
}

const tokenizers::Tokenizer& tokenizer(const std::string& relative) {
  static std::map<std::string, tokenizers::Tokenizer> cache;
  auto it = cache.find(relative);
  if (it == cache.end()) it = cache.emplace(relative, tokenizers::Tokenizer::load(shared_data(relative))).first;
  return it->second;
}

// Round trip and determinism, once per tokenizer, before any timing.
void check(benchmark::State& state, const tokenizers::Tokenizer& tok) {
  const auto ids = tok.encode(corpus());
  if (tok.decode(ids) != corpus()) {
    state.SkipWithError("decode(encode(war-and-peace.txt)) differs from the text");
    return;
  }
  if (tok.encode(corpus()) != ids) state.SkipWithError("encoding is not deterministic");
  state.counters["ids"] = static_cast<double>(ids.size());
}

void BM_EncodeWhole(benchmark::State& state, const std::string& relative) {
  const tokenizers::Tokenizer& tok = tokenizer(relative);
  check(state, tok);
  for (auto _ : state) {
    auto ids = tok.encode(corpus());
    benchmark::DoNotOptimize(ids.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * corpus().size()));
}

void BM_Encode4KiB(benchmark::State& state, const std::string& relative) {
  const tokenizers::Tokenizer& tok = tokenizer(relative);
  check(state, tok);
  for (auto _ : state) {
    for (const std::string& piece : chunks()) {
      auto ids = tok.encode(piece);
      benchmark::DoNotOptimize(ids.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * corpus().size()));
}

void BM_EncodeWholeCold(benchmark::State& state, const std::string& relative) {
  check(state, tokenizer(relative));
  for (auto _ : state) {
    state.PauseTiming();
    auto fresh = std::make_unique<tokenizers::Tokenizer>(tokenizers::Tokenizer::load(shared_data(relative)));
    state.ResumeTiming();
    auto ids = fresh->encode(corpus());
    benchmark::DoNotOptimize(ids.data());
    benchmark::ClobberMemory();
    state.PauseTiming();
    fresh.reset();
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * corpus().size()));
}

BENCHMARK_CAPTURE(BM_EncodeWhole, Llama3, std::string("tokenizers/llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeWhole, LlamaSpm, std::string("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode4KiB, Llama3, std::string("tokenizers/llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode4KiB, LlamaSpm, std::string("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeWholeCold, Llama3, std::string("tokenizers/llama3"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
BENCHMARK_CAPTURE(BM_EncodeWholeCold, LlamaSpm, std::string("tokenizers/llama.cpp/ggml-vocab-llama-spm.gguf"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
