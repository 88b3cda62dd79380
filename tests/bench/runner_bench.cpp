// orchard_bench_runner: the CPU forward pass (pie::ModelRunner) timed the way scripts/bench-llamacpp.sh times
// llama.cpp beside it: prefill tokens/s of one prompt in one step, and decode tokens/s with B sequences
// stepping together (one query token each per step, logits for every row). Token ids are a fixed
// pseudo-random stream (the speed does not depend on them); the KV cache is f16 as llama.cpp's default.
// With --chunks, also the time of a step in which one sequence computes T tokens with the logits of each
// (what verifying T - 1 speculative draft tokens costs).
//
//   orchard_bench_runner MODEL.gguf [--threads N] [--prompt P] [--batches 1,4,16] [--steps S] [--reps R]
//                                   [--chunks 1,2,4,8]
// prints one JSON object: {"prefill_tok_s": x, "decode_tok_s": {"1": x, "4": y, ...}, "chunk_step_ms":
// {"1": t, "2": u, ...}, ...}.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "pie/kv_cache.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "tensor/thread_pool.h"

namespace {

struct Options {
  std::string model;
  int threads = 2;
  std::int32_t prompt = 128;
  std::vector<std::int32_t> batches{1, 4, 16};
  std::int32_t steps = 16;
  int reps = 2;
  std::vector<std::int32_t> chunks;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "orchard_bench_runner: %s\nusage: orchard_bench_runner MODEL [--threads N] [--prompt P] "
               "[--batches 1,4,16] [--steps S] [--reps R] [--chunks 1,2,4,8]\n",
               why.c_str());
  std::exit(2);
}

std::int32_t positive(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v <= 0 || v > 1'000'000) usage(flag + " wants a positive integer, got '" + text + "'");
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
    } else if (a == "--prompt") {
      o.prompt = positive(a, value());
    } else if (a == "--steps") {
      o.steps = positive(a, value());
    } else if (a == "--reps") {
      o.reps = positive(a, value());
    } else if (a == "--chunks") {
      std::stringstream ss(value());
      for (std::string item; std::getline(ss, item, ',');) o.chunks.push_back(positive(a, item));
    } else if (a == "--batches") {
      o.batches.clear();
      std::stringstream ss(value());
      for (std::string item; std::getline(ss, item, ',');) o.batches.push_back(positive(a, item));
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

struct Seq {
  pie::SeqId id = -1;
  std::int32_t len = 0;  // tokens with K/V in the cache
};

class Driver {
 public:
  Driver(pie::ModelRunner& runner, pie::KvCache& kv) : runner_(runner), kv_(kv) {}

  // One step: each sequence computes its next counts[i] tokens; logits for the last of each when
  // all_rows is false, for every token otherwise.
  void step(std::vector<Seq>& seqs, const std::vector<std::int32_t>& counts, bool all_rows) {
    std::vector<std::int32_t> tokens, qo{0}, lens, page_indptr{0}, pages, rows;
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      const std::int32_t len = seqs[s].len + counts[s];
      if (!kv_.reserve(seqs[s].id, len)) throw std::runtime_error("out of KV pages");
      const auto owned = kv_.pages(seqs[s].id);
      const std::int32_t n_pages = (len + pie::kKvPageSize - 1) / pie::kKvPageSize;
      pages.insert(pages.end(), owned.begin(), owned.begin() + n_pages);
      page_indptr.push_back(static_cast<std::int32_t>(pages.size()));
      for (std::int32_t i = 0; i < counts[s]; ++i) {
        if (all_rows || i + 1 == counts[s]) rows.push_back(static_cast<std::int32_t>(tokens.size()));
        tokens.push_back(next_token());
      }
      qo.push_back(static_cast<std::int32_t>(tokens.size()));
      lens.push_back(len);
      seqs[s].len = len;
    }
    logits_.resize(rows.size() * static_cast<std::size_t>(runner_.model().config.n_vocab));
    runner_.forward(pie::ForwardBatch{tokens, qo, lens, page_indptr, pages, rows}, kv_, logits_);
  }

 private:
  std::int32_t next_token() {
    state_ = state_ * 1664525u + 1013904223u;
    return static_cast<std::int32_t>((state_ >> 8) % static_cast<std::uint32_t>(runner_.model().config.n_vocab));
  }

  pie::ModelRunner& runner_;
  pie::KvCache& kv_;
  std::vector<float> logits_;
  std::uint32_t state_ = 12345;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const Options& o) {
  const auto model = pie::load_model(o.model);
  tensor::ThreadPool pool(o.threads);
  pie::ModelRunner runner(model, &pool);
  const std::int32_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  constexpr std::int32_t kDecodePrompt = 16;  // each decode sequence's context before the timed steps
  const std::int32_t max_chunk = o.chunks.empty() ? 1 : *std::max_element(o.chunks.begin(), o.chunks.end());
  const std::int32_t per_seq =
      (std::max(o.prompt, kDecodePrompt + o.steps * max_chunk) + pie::kKvPageSize - 1) / pie::kKvPageSize;
  pie::KvCacheConfig config = runner.kv_config(per_seq * max_batch + 4, tensor::DType::f16);
  config.prefix_caching = false;
  pie::KvCache kv(config);
  Driver driver(runner, kv);

  // Warm-up (page faults of the mapped weights, thread start-up): one short step.
  {
    std::vector<Seq> s{{kv.create(), 0}};
    driver.step(s, {8}, false);
    kv.release(s[0].id);
  }
  double prefill_best = 0;
  for (int r = 0; r < o.reps; ++r) {
    std::vector<Seq> s{{kv.create(), 0}};
    const auto t0 = std::chrono::steady_clock::now();
    driver.step(s, {o.prompt}, false);
    prefill_best = std::max(prefill_best, o.prompt / seconds_since(t0));
    kv.release(s[0].id);
  }
  std::string decode_json;
  for (std::int32_t b : o.batches) {
    double best = 0;
    for (int r = 0; r < o.reps; ++r) {
      std::vector<Seq> seqs;
      for (std::int32_t i = 0; i < b; ++i) seqs.push_back({kv.create(), 0});
      driver.step(seqs, std::vector<std::int32_t>(static_cast<std::size_t>(b), kDecodePrompt), false);
      const std::vector<std::int32_t> ones(static_cast<std::size_t>(b), 1);
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int32_t s = 0; s < o.steps; ++s) driver.step(seqs, ones, true);
      best = std::max(best, static_cast<double>(b) * o.steps / seconds_since(t0));
      for (const Seq& s : seqs) kv.release(s.id);
    }
    if (!decode_json.empty()) decode_json += ", ";
    decode_json += "\"" + std::to_string(b) + "\": " + std::to_string(best);
  }
  std::string chunk_json;
  for (std::int32_t t : o.chunks) {
    double best = 1e30;
    for (int r = 0; r < o.reps; ++r) {
      std::vector<Seq> seqs{{kv.create(), 0}};
      driver.step(seqs, {kDecodePrompt}, false);
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int32_t s = 0; s < o.steps; ++s) driver.step(seqs, {t}, true);
      best = std::min(best, 1000 * seconds_since(t0) / o.steps);
      kv.release(seqs[0].id);
    }
    if (!chunk_json.empty()) chunk_json += ", ";
    chunk_json += "\"" + std::to_string(t) + "\": " + std::to_string(best);
  }
  std::printf("{\"engine\": \"orchard\", \"threads\": %d, \"prompt\": %d, \"steps\": %d, \"prefill_tok_s\": %.3f, "
              "\"decode_tok_s\": {%s}, \"chunk_step_ms\": {%s}, \"weights\": \"%s\"}\n",
              o.threads, o.prompt, o.steps, prefill_best, decode_json.c_str(), chunk_json.c_str(),
              model->describe().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orchard_bench_runner: %s\n", e.what());
    return 1;
  }
}
