// Sampler::sample over realistic vocabularies (32k, 128k, 256k) for each path: greedy, plain temperature
// sampling, top-k, top-p (a peaked distribution, where the nucleus is small, and a flat one, where it holds
// most of the vocabulary), the usual top-k + top-p + min-p chain, and logprobs. Each is reported beside the
// limit measured in the same run: one streaming pass over the logits (the copy every call starts from).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "pie/sampling.h"

namespace {

enum class Shape { peaked, flat };

// Peaked: normal logits (sd 2) with a handful of clear favourites, as a language model gives mid-sentence.
// Flat: sd 0.5, no favourites (the worst case for top-p).
std::vector<float> make_logits(std::int64_t n, Shape shape) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> d(0.0f, shape == Shape::peaked ? 2.0f : 0.5f);
  std::vector<float> l(static_cast<std::size_t>(n));
  for (float& x : l) x = d(rng);
  if (shape == Shape::peaked) {
    for (int i = 0; i < 5; ++i) l[static_cast<std::size_t>(rng() % n)] = 20.0f - static_cast<float>(i);
  }
  return l;
}

enum Config { kGreedy, kTemperature, kTopK, kTopP, kChain, kLogprobs };

pie::SamplingParams params_of(int config) {
  pie::SamplingParams p;
  switch (config) {
    case kGreedy: p.temperature = 0; break;
    case kTemperature: p.temperature = 0.8f; break;
    case kTopK: p.top_k = 40; break;
    case kTopP: p.top_p = 0.9f; break;
    case kChain: p.top_k = 40; p.top_p = 0.95f; p.min_p = 0.05f; p.temperature = 0.7f; break;
    case kLogprobs: p.temperature = 0; p.logprobs = true; p.top_logprobs = 5; break;
  }
  return p;
}

void BM_Sample(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto config = static_cast<int>(state.range(1));
  const auto shape = static_cast<Shape>(state.range(2));
  const std::vector<float> base = make_logits(n, shape);
  std::vector<float> logits = base;
  pie::Sampler sampler(params_of(config), 42);
  // Check before timing: the token is a valid id and greedy picks the argmax.
  const auto t = sampler.sample(logits, {}, {}, {});
  if (t.token < 0 || t.token >= n) throw std::runtime_error("sampler returned an invalid token");
  if (config == kGreedy && t.token != std::max_element(base.begin(), base.end()) - base.begin()) {
    throw std::runtime_error("greedy is not the argmax");
  }
  for (auto _ : state) {
    std::memcpy(logits.data(), base.data(), base.size() * sizeof(float));
    auto r = sampler.sample(logits, {}, {}, {});
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * static_cast<std::int64_t>(sizeof(float)));
}

// The limit: copying the logits (one read, one write: the copy each timed call above also does).
void BM_CopyLogits(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const std::vector<float> base = make_logits(n, Shape::peaked);
  std::vector<float> logits(base.size());
  for (auto _ : state) {
    std::memcpy(logits.data(), base.data(), base.size() * sizeof(float));
    benchmark::DoNotOptimize(logits.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * static_cast<std::int64_t>(sizeof(float)));
}

void sample_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"vocab", "config", "flat"});
  for (std::int64_t n : {32000, 128256, 256000}) {
    for (int c : {kGreedy, kTemperature, kTopK, kTopP, kChain, kLogprobs}) b->Args({n, c, 0});
    b->Args({n, kTopP, 1});
  }
}

BENCHMARK(BM_Sample)->Apply(sample_args)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CopyLogits)->Arg(32000)->Arg(128256)->Arg(256000)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
