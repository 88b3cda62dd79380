// orchard_bench_lora: batched decoding with LoRA adapters beside the same batch without: B sequences step
// together (one query token each, logits for every row) while their rows use N distinct rank-R adapters
// (rows spread round-robin), on every projection of every layer (q, k, v, o, gate, up, down: PEFT's
// "all-linear" without lm_head). Adapters are random (the speed does not depend on their values); the KV
// cache is f16. Each figure is the best of --reps rounds of --steps steps; every round runs each
// configuration in turn, the no-adapter batch included, so that the machine's drifting load touches all alike.
//
//   orchard_bench_lora MODEL [--threads 2] [--batch 32] [--adapters 1,8,32] [--rank 16] [--steps 8] [--reps 2]
// prints one JSON object: {"decode_tok_s": {"0": x, "1": y, ...}, "ratio_to_none": {"1": y / x, ...}, ...}.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "pie/kv_cache.h"
#include "pie/lora.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "tensor/thread_pool.h"

namespace {

struct Options {
  std::string model;
  int threads = 2;
  std::int32_t batch = 32;
  std::vector<std::int32_t> adapters{1, 8, 32};
  std::int32_t rank = 16;
  std::int32_t steps = 8;
  int reps = 2;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "orchard_bench_lora: %s\nusage: orchard_bench_lora MODEL [--threads N] [--batch B] [--adapters 1,8,32] "
               "[--rank R] [--steps S] [--reps R]\n",
               why.c_str());
  std::exit(2);
}

std::int32_t positive(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v <= 0 || v > 100'000) usage(flag + " wants a positive integer, got '" + text + "'");
  return static_cast<std::int32_t>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads = positive(a, value());
    } else if (a == "--batch") {
      o.batch = positive(a, value());
    } else if (a == "--rank") {
      o.rank = positive(a, value());
    } else if (a == "--steps") {
      o.steps = positive(a, value());
    } else if (a == "--reps") {
      o.reps = positive(a, value());
    } else if (a == "--adapters") {
      o.adapters.clear();
      std::stringstream ss(value());
      for (std::string item; std::getline(ss, item, ',');) o.adapters.push_back(positive(a, item));
    } else if (!a.empty() && a[0] == '-') {
      usage("unknown option " + a);
    } else if (o.model.empty()) {
      o.model = a;
    } else {
      usage("one model only");
    }
  }
  if (o.model.empty()) usage("no model given");
  return o;
}

std::shared_ptr<const pie::LoraAdapter> random_adapter(const pie::Model& model, std::int32_t rank, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.01f, 0.01f);
  auto a = std::make_shared<pie::LoraAdapter>();
  a->alpha = static_cast<float>(rank);
  for (std::int32_t layer = 0; layer < model.config.n_layer; ++layer) {
    const pie::LayerWeights& l = model.weights.layers[static_cast<std::size_t>(layer)];
    using S = pie::ProjectionSite;
    for (auto [site, w] : {std::pair{S::q, &l.wq}, {S::k, &l.wk}, {S::v, &l.wv}, {S::o, &l.wo}, {S::gate, &l.w_gate},
                           {S::up, &l.w_up}, {S::down, &l.w_down}}) {
      pie::LoraPair p{site, layer, rank, pie::n_in(*w), pie::n_out(*w), 1.0f, {}, {}};
      p.a.resize(static_cast<std::size_t>(p.rank * p.n_in));
      p.b.resize(static_cast<std::size_t>(p.n_out * p.rank));
      for (float& x : p.a) x = u(rng);
      for (float& x : p.b) x = u(rng);
      a->pairs.push_back(std::move(p));
    }
  }
  pie::fit_lora_adapter(*a, model);
  return a;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const Options& o) {
  const auto model = pie::load_model(o.model);
  tensor::ThreadPool pool(o.threads);
  pie::ModelRunner runner(model, &pool);
  constexpr std::int32_t kContext = 16;  // each sequence's tokens before the timed steps
  const std::int32_t per_seq = (kContext + o.steps + pie::kKvPageSize - 1) / pie::kKvPageSize + 1;
  pie::KvCacheConfig config = runner.kv_config(per_seq * o.batch + 4, tensor::DType::f16);
  config.prefix_caching = false;
  pie::KvCache kv(config);
  const std::int32_t n_vocab = model->config.n_vocab;
  std::vector<float> logits;
  std::uint32_t state = 12345;
  auto next_token = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<std::int32_t>((state >> 8) % static_cast<std::uint32_t>(n_vocab));
  };
  const std::int32_t max_adapters = *std::max_element(o.adapters.begin(), o.adapters.end());
  std::vector<std::shared_ptr<const pie::LoraAdapter>> adapters;
  for (std::int32_t i = 0; i < max_adapters; ++i) adapters.push_back(random_adapter(*model, o.rank, 1000u + static_cast<std::uint32_t>(i)));

  // One step of every sequence with n tokens each; the rows of sequence s use adapter s % n_adapters.
  auto step = [&](std::vector<pie::SeqId>& seqs, std::vector<std::int32_t>& lens, std::int32_t n, std::int32_t n_adapters) {
    std::vector<std::int32_t> tokens, qo{0}, seq_lens, page_indptr{0}, pages, rows;
    std::vector<pie::LoraGroup> groups(static_cast<std::size_t>(n_adapters));
    for (std::int32_t a = 0; a < n_adapters; ++a) groups[static_cast<std::size_t>(a)].adapter = adapters[static_cast<std::size_t>(a)].get();
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      const std::int32_t len = lens[s] + n;
      if (!kv.reserve(seqs[s], len)) throw std::runtime_error("out of KV pages");
      const auto owned = kv.pages(seqs[s]);
      pages.insert(pages.end(), owned.begin(), owned.begin() + (len + pie::kKvPageSize - 1) / pie::kKvPageSize);
      page_indptr.push_back(static_cast<std::int32_t>(pages.size()));
      for (std::int32_t i = 0; i < n; ++i) {
        if (n_adapters > 0) groups[s % static_cast<std::size_t>(n_adapters)].rows.push_back(static_cast<std::int32_t>(tokens.size()));
        if (i + 1 == n) rows.push_back(static_cast<std::int32_t>(tokens.size()));
        tokens.push_back(next_token());
      }
      qo.push_back(static_cast<std::int32_t>(tokens.size()));
      seq_lens.push_back(len);
      lens[s] = len;
    }
    logits.resize(rows.size() * static_cast<std::size_t>(n_vocab));
    runner.forward(pie::ForwardBatch{tokens, qo, seq_lens, page_indptr, pages, rows, groups}, kv, logits);
  };

  std::vector<std::int32_t> counts{0};
  counts.insert(counts.end(), o.adapters.begin(), o.adapters.end());
  // Rounds over every configuration in turn (the machine's load drifts; each keeps its best round).
  std::vector<double> best(counts.size(), 0.0);
  for (int r = 0; r < o.reps; ++r) {
    for (std::size_t c = 0; c < counts.size(); ++c) {
      std::vector<pie::SeqId> seqs;
      std::vector<std::int32_t> lens(static_cast<std::size_t>(o.batch), 0);
      for (std::int32_t i = 0; i < o.batch; ++i) seqs.push_back(kv.create());
      step(seqs, lens, kContext, counts[c]);
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int32_t s = 0; s < o.steps; ++s) step(seqs, lens, 1, counts[c]);
      best[c] = std::max(best[c], static_cast<double>(o.batch) * o.steps / seconds_since(t0));
      for (pie::SeqId s : seqs) kv.release(s);
    }
  }
  std::string rates, ratios;
  for (std::size_t c = 0; c < counts.size(); ++c) {
    rates += (rates.empty() ? "" : ", ") + ("\"" + std::to_string(counts[c]) + "\": " + std::to_string(best[c]));
    if (counts[c] > 0) {
      ratios += (ratios.empty() ? "" : ", ") + ("\"" + std::to_string(counts[c]) + "\": " + std::to_string(best[c] / best[0]));
    }
  }
  std::printf("{\"engine\": \"orchard\", \"threads\": %d, \"batch\": %d, \"rank\": %d, \"steps\": %d, "
              "\"decode_tok_s\": {%s}, \"ratio_to_none\": {%s}, \"weights\": \"%s\"}\n",
              o.threads, o.batch, o.rank, o.steps, rates.c_str(), ratios.c_str(), model->describe().c_str());
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
