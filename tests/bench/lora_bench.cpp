// orchard_bench_lora: batched decoding with LoRA adapters beside the same batch without: B sequences step
// together (one query token each, logits for every row) while their rows use N distinct rank-R adapters
// (rows spread round-robin), on every projection of every layer (q, k, v, o, gate, up, down: PEFT's
// "all-linear" without lm_head). Adapters are random (the speed does not depend on their values); the KV
// cache is f16. Each figure is the best of --reps rounds of --steps steps; every round runs each
// configuration in turn, the no-adapter batch included, so that the machine's drifting load touches all alike.
// Then the time to attach one more rank-R adapter (fit it to the model, then the backend's prepare_lora:
// on CUDA its one upload), the best and the median of --attach-reps.
//
//   orchard_bench_lora MODEL|--shape NAME [--device cpu|cuda] [--threads 2] [--batch 32] [--adapters 1,8,32]
//                      [--rank 16] [--steps 8] [--reps 2] [--context 16] [--attach-reps 5]
// --shape builds a model of random f16 weights in memory instead of reading one: llama8b (Llama-3.1-8B's
// shape: 32 layers, 4096 hidden, 14336 ff, 32 heads, 8 KV heads, 128256 vocab) or tinyllama (TinyLlama
// 1.1B's: 22 layers, 2048, 5632, 32 heads, 4 KV heads, 32000 vocab).
// Prints one JSON object: {"decode_tok_s": {"0": x, "1": y, ...}, "ratio_to_none": {"1": y / x, ...},
// "attach_ms": {...}, ...}.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "pie/backend.h"
#include "pie/kv_cache.h"
#include "pie/lora.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "tensor/half.h"
#include "tensor/thread_pool.h"

#include "bench_args.h"
#include "batch_stepper.h"

namespace {

using orchard::bench::seconds_since;

struct Options {
  std::string model;
  std::string shape;
  std::string device = "cpu";
  int attach_reps = 5;
  std::int32_t context = 16;  // each sequence's tokens before the timed steps
  int threads = 2;
  std::int32_t batch = 32;
  std::vector<std::int32_t> adapters{1, 8, 32};
  std::int32_t rank = 16;
  std::int32_t steps = 8;
  int reps = 2;
};

const orchard::bench::BenchArgs kArgs(
    "orchard_bench_lora", "MODEL|--shape llama8b|tinyllama [--device cpu|cuda] [--threads N] [--batch B] "
    "[--adapters 1,8,32] [--rank R] [--steps S] [--reps R] [--context C] [--attach-reps N]");
constexpr long kMaxValue = 100'000;

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) kArgs.fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads = kArgs.positive(a, value(), kMaxValue);
    } else if (a == "--batch") {
      o.batch = kArgs.positive(a, value(), kMaxValue);
    } else if (a == "--rank") {
      o.rank = kArgs.positive(a, value(), kMaxValue);
    } else if (a == "--steps") {
      o.steps = kArgs.positive(a, value(), kMaxValue);
    } else if (a == "--reps") {
      o.reps = kArgs.positive(a, value(), kMaxValue);
    } else if (a == "--context") {
      o.context = kArgs.positive(a, value(), kMaxValue);
    } else if (a == "--attach-reps") {
      o.attach_reps = kArgs.positive(a, value(), kMaxValue);
    } else if (a == "--shape") {
      o.shape = value();
      if (o.shape != "llama8b" && o.shape != "tinyllama") kArgs.fail("--shape wants llama8b or tinyllama, got '" + o.shape + "'");
    } else if (a == "--device") {
      o.device = value();
      if (o.device != "cpu" && o.device != "cuda") kArgs.fail("--device wants cpu or cuda, got '" + o.device + "'");
    } else if (a == "--adapters") {
      o.adapters = kArgs.positive_list(a, value(), kMaxValue);
    } else if (!a.empty() && a[0] == '-') {
      kArgs.fail("unknown option " + a);
    } else if (o.model.empty()) {
      o.model = a;
    } else {
      kArgs.fail("one model only");
    }
  }
  if (o.model.empty() == o.shape.empty()) kArgs.fail("give a model or --shape, not both");
  return o;
}

// Uniform values in [-scale, scale) from a counter (splitmix64): fast enough to fill billions.
inline float hashed_uniform(std::uint64_t i, float scale) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return scale * (static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
}

// fn(begin, end) over [0, n) on every core.
template <typename Fn>
void parallel(std::int64_t n, Fn fn) {
  const std::int64_t t = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (std::int64_t i = 0; i < t; ++i) threads.emplace_back([&, i] { fn(n * i / t, n * (i + 1) / t); });
  for (std::thread& th : threads) th.join();
}

// A llama of the named shape with random f16 matrices (uniform, about the spread of N(0, 0.02)) and unit
// norms, in memory: no file to write or read.
std::shared_ptr<const pie::Model> shaped_model(const std::string& shape) {
  auto m = std::make_shared<pie::Model>();
  pie::ModelConfig& c = m->config;
  const bool big = shape == "llama8b";
  c.arch = pie::Architecture::llama;
  c.n_vocab = big ? 128256 : 32000;
  c.n_embd = big ? 4096 : 2048;
  c.n_layer = big ? 32 : 22;
  c.n_head = 32;
  c.n_kv_head = big ? 8 : 4;
  c.head_dim = c.n_embd / c.n_head;
  c.n_ff = big ? 14336 : 5632;
  c.context_length = 2048;
  c.rope.head_dim = c.head_dim;
  c.rope.rotary_dim = c.head_dim;
  c.rope.theta = big ? 500000.0 : 10000.0;
  c.rope.layout = pal::RopeLayout::neox;
  c.validate();
  m->name = shape + " (random f16)";
  std::uint64_t seed = 0;
  auto matrix = [&](std::int64_t n_out, std::int64_t n_in) {
    auto buf = std::make_shared<std::vector<std::uint16_t>>(static_cast<std::size_t>(n_out * n_in));
    const std::uint64_t base = seed;
    seed += static_cast<std::uint64_t>(n_out * n_in);
    std::uint16_t* d = buf->data();
    parallel(n_out * n_in, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) d[i] = tensor::f32_to_f16(hashed_uniform(base + static_cast<std::uint64_t>(i), 0.035f));
    });
    m->storage.push_back(buf);
    return pie::weight_view(buf->data(), buf->size() * 2, tensor::DType::f16, n_out, n_in);
  };
  auto ones = [&](std::int64_t n) {
    auto buf = std::make_shared<std::vector<float>>(static_cast<std::size_t>(n), 1.0f);
    m->storage.push_back(buf);
    return pie::weight_view(buf->data(), buf->size() * 4, tensor::DType::f32, 0, n);
  };
  const std::int64_t e = c.n_embd, q = c.n_head * c.head_dim, kv = c.n_kv_head * c.head_dim, ff = c.n_ff;
  m->weights.token_embd = matrix(c.n_vocab, e);
  m->weights.output_norm = ones(e);
  m->weights.output = matrix(c.n_vocab, e);
  for (std::int32_t l = 0; l < c.n_layer; ++l) {
    pie::LayerWeights w;
    w.attn_norm = ones(e);
    w.wq = matrix(q, e);
    w.wk = matrix(kv, e);
    w.wv = matrix(kv, e);
    w.wo = matrix(e, q);
    w.ffn_norm = ones(e);
    w.w_gate = matrix(ff, e);
    w.w_up = matrix(ff, e);
    w.w_down = matrix(e, ff);
    m->weights.layers.push_back(std::move(w));
  }
  return m;
}

// A random rank-`rank` adapter on every decoder projection, not yet fitted.
std::shared_ptr<pie::LoraAdapter> random_adapter(const pie::Model& model, std::int32_t rank, std::uint32_t seed) {
  auto a = std::make_shared<pie::LoraAdapter>();
  a->name = "random-" + std::to_string(seed);
  a->alpha = static_cast<float>(rank);
  std::uint64_t counter = static_cast<std::uint64_t>(seed) << 40;
  for (std::int32_t layer = 0; layer < model.config.n_layer; ++layer) {
    const pie::LayerWeights& l = model.weights.layers[static_cast<std::size_t>(layer)];
    using S = pie::ProjectionSite;
    for (auto [site, w] : {std::pair{S::q, &l.wq}, {S::k, &l.wk}, {S::v, &l.wv}, {S::o, &l.wo}, {S::gate, &l.w_gate},
                           {S::up, &l.w_up}, {S::down, &l.w_down}}) {
      pie::LoraPair p{site, layer, rank, pie::n_in(*w), pie::n_out(*w), 1.0f, {}, {}};
      p.a.resize(static_cast<std::size_t>(p.rank * p.n_in));
      p.b.resize(static_cast<std::size_t>(p.n_out * p.rank));
      for (float& x : p.a) x = hashed_uniform(counter++, 0.01f);
      for (float& x : p.b) x = hashed_uniform(counter++, 0.01f);
      a->pairs.push_back(std::move(p));
    }
  }
  return a;
}

int run(const Options& o) {
  const std::shared_ptr<const pie::Model> model = o.shape.empty() ? pie::load_model(o.model) : shaped_model(o.shape);
  tensor::ThreadPool pool(o.threads);
  pie::ModelRunner runner = o.device == "cuda" ? pie::ModelRunner(model, pie::make_cuda_backend())
                                               : pie::ModelRunner(model, &pool);
  const std::int32_t context = o.context;
  const std::int32_t per_seq = (context + o.steps + pie::kKvPageSize - 1) / pie::kKvPageSize + 1;
  pie::KvCacheConfig config = runner.kv_config(per_seq * o.batch + 4, tensor::DType::f16);
  config.prefix_caching = false;
  pie::KvCache kv(runner.make_kv_storage(config));
  const std::int32_t max_adapters = *std::max_element(o.adapters.begin(), o.adapters.end());
  std::vector<std::shared_ptr<const pie::LoraAdapter>> adapters;
  std::vector<const pie::LoraAdapter*> adapter_ptrs;
  for (std::int32_t i = 0; i < max_adapters; ++i) {
    auto a = random_adapter(*model, o.rank, 1000u + static_cast<std::uint32_t>(i));
    pie::fit_lora_adapter(*a, *model);
    runner.backend().prepare_lora(*a);
    adapter_ptrs.push_back(a.get());
    adapters.push_back(std::move(a));
  }
  orchard::bench::BatchStepper stepper(runner, kv);

  std::vector<std::int32_t> counts{0};
  counts.insert(counts.end(), o.adapters.begin(), o.adapters.end());
  // Rounds over every configuration in turn (the machine's load drifts; each keeps its best round).
  std::vector<double> best(counts.size(), 0.0);
  for (int r = 0; r < o.reps; ++r) {
    for (std::size_t c = 0; c < counts.size(); ++c) {
      // The rows of sequence s use adapter s % counts[c].
      const std::span<const pie::LoraAdapter* const> used(adapter_ptrs.data(), static_cast<std::size_t>(counts[c]));
      const auto batch = static_cast<std::size_t>(o.batch);
      std::vector<orchard::bench::BenchSeq> seqs;
      for (std::size_t i = 0; i < batch; ++i) seqs.push_back({kv.create(), 0});
      stepper.step(seqs, std::vector<std::int32_t>(batch, context), false, used);
      const std::vector<std::int32_t> ones(batch, 1);
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int32_t s = 0; s < o.steps; ++s) stepper.step(seqs, ones, false, used);
      best[c] = std::max(best[c], static_cast<double>(o.batch) * o.steps / seconds_since(t0));
      for (const orchard::bench::BenchSeq& s : seqs) kv.release(s.id);
    }
  }
  std::string rates, ratios;
  for (std::size_t c = 0; c < counts.size(); ++c) {
    rates += (rates.empty() ? "" : ", ") + ("\"" + std::to_string(counts[c]) + "\": " + std::to_string(best[c]));
    if (counts[c] > 0) {
      ratios += (ratios.empty() ? "" : ", ") + ("\"" + std::to_string(counts[c]) + "\": " + std::to_string(best[c] / best[0]));
    }
  }
  // Attaching one more adapter: fit (shapes checked, q/k order, the lookup) and the backend's placement (on
  // CUDA: one allocation, one copy per matrix), each timed; the adapter is released after.
  std::vector<double> fit_ms, place_ms, total_ms;
  for (int r = 0; r < o.attach_reps; ++r) {
    auto a = random_adapter(*model, o.rank, 5000u + static_cast<std::uint32_t>(r));
    const auto t0 = std::chrono::steady_clock::now();
    pie::fit_lora_adapter(*a, *model);
    const double fit = seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    runner.backend().prepare_lora(*a);
    const double place = seconds_since(t1);
    fit_ms.push_back(fit * 1e3);
    place_ms.push_back(place * 1e3);
    total_ms.push_back((fit + place) * 1e3);
    runner.backend().release_lora(*a);
  }
  auto stats = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return "{\"best\": " + std::to_string(v.front()) + ", \"median\": " + std::to_string(v[v.size() / 2]) + "}";
  };
  std::printf("{\"engine\": \"orchard\", \"device\": \"%s\", \"threads\": %d, \"batch\": %d, \"rank\": %d, "
              "\"steps\": %d, \"decode_tok_s\": {%s}, \"ratio_to_none\": {%s}, \"attach_ms\": {\"fit\": %s, "
              "\"place\": %s, \"total\": %s}, \"adapter_bytes\": %zu, \"weights\": \"%s\"}\n",
              o.device.c_str(), o.threads, o.batch, o.rank, o.steps, rates.c_str(), ratios.c_str(),
              stats(fit_ms).c_str(), stats(place_ms).c_str(), stats(total_ms).c_str(), adapters.front()->bytes(),
              model->describe().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orchard_bench_lora: %s\n", e.what());
    return 1;
  }
}
