// orchard_bench_runner: the forward pass (pie::ModelRunner, on the CPU or with --device cuda on the GPU)
// timed the way scripts/bench-llamacpp.sh times llama.cpp beside it: prefill tokens/s of one prompt in one step, and decode tokens/s with B sequences
// stepping together (one query token each per step, logits for every row). Token ids are a fixed
// pseudo-random stream (the speed does not depend on them); the KV cache is f16 as llama.cpp's default.
// With --chunks, also the time of a step in which one sequence computes T tokens with the logits of each
// (what verifying T - 1 speculative draft tokens costs). On CUDA the prefill figure is llama-bench's pp512
// with --prompt 512 (the best of --reps: the first pays for cuBLAS's first calls and the step's graph);
// --batch-invariant keeps the backend's own products at every size (no cuBLAS).
//
//   orchard_bench_runner MODEL.gguf [--device cpu|cuda] [--batch-invariant] [--threads N] [--prompt P]
//                                   [--batches 1,4,16] [--steps S] [--reps R] [--chunks 1,2,4,8]
// prints one JSON object: {"prefill_tok_s": x, "decode_tok_s": {"1": x, "4": y, ...}, "chunk_step_ms":
// {"1": t, "2": u, ...}, ...}.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "pie/backend.h"
#include "pie/kv_cache.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "tensor/thread_pool.h"

#include "bench_args.h"
#include "batch_stepper.h"

namespace {

using orchard::bench::BenchSeq;
using orchard::bench::seconds_since;

struct Options {
  std::string model;
  int threads = 2;
  std::int32_t prompt = 128;
  std::vector<std::int32_t> batches{1, 4, 16};
  std::int32_t steps = 16;
  int reps = 2;
  std::vector<std::int32_t> chunks;
  bool cuda = false;
  bool batch_invariant = false;
};

const orchard::bench::BenchArgs kArgs("orchard_bench_runner",
                                      "MODEL [--device cpu|cuda] [--batch-invariant] [--threads N] [--prompt P] "
                                      "[--batches 1,4,16] [--steps S] [--reps R] [--chunks 1,2,4,8]");

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) kArgs.fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--device") {
      const std::string d = value();
      if (d != "cpu" && d != "cuda") kArgs.fail("--device wants cpu or cuda, got '" + d + "'");
      o.cuda = d == "cuda";
    } else if (a == "--batch-invariant") {
      o.batch_invariant = true;
    } else if (a == "--threads") {
      o.threads = kArgs.positive(a, value());
    } else if (a == "--prompt") {
      o.prompt = kArgs.positive(a, value());
    } else if (a == "--steps") {
      o.steps = kArgs.positive(a, value());
    } else if (a == "--reps") {
      o.reps = kArgs.positive(a, value());
    } else if (a == "--chunks") {
      o.chunks = kArgs.positive_list(a, value());
    } else if (a == "--batches") {
      o.batches = kArgs.positive_list(a, value());
    } else if (!a.empty() && a[0] == '-') {
      kArgs.fail("unknown option " + a);
    } else if (o.model.empty()) {
      o.model = a;
    } else {
      kArgs.fail("one model only");
    }
  }
  if (o.model.empty()) kArgs.fail("no model given");
  return o;
}

int run(const Options& o) {
  const auto model = pie::load_model(o.model);
  tensor::ThreadPool pool(o.cuda ? 1 : o.threads);
  pie::ModelRunner runner =
      o.cuda ? pie::ModelRunner(model, pie::make_cuda_backend(0, {.batch_invariant = o.batch_invariant}))
             : pie::ModelRunner(model, &pool);
  const std::int32_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  constexpr std::int32_t kDecodePrompt = 16;  // each decode sequence's context before the timed steps
  const std::int32_t max_chunk = o.chunks.empty() ? 1 : *std::max_element(o.chunks.begin(), o.chunks.end());
  const std::int32_t per_seq =
      (std::max(o.prompt, kDecodePrompt + o.steps * max_chunk) + pie::kKvPageSize - 1) / pie::kKvPageSize;
  pie::KvCacheConfig config = runner.kv_config(per_seq * max_batch + 4, tensor::DType::f16);
  config.prefix_caching = false;
  pie::KvCache kv(runner.make_kv_storage(config));
  orchard::bench::BatchStepper driver(runner, kv);

  // Warm-up (page faults of the mapped weights, thread start-up): one short step.
  {
    std::vector<BenchSeq> s{{kv.create(), 0}};
    driver.step(s, {8}, false);
    kv.release(s[0].id);
  }
  double prefill_best = 0;
  for (int r = 0; r < o.reps; ++r) {
    std::vector<BenchSeq> s{{kv.create(), 0}};
    const auto t0 = std::chrono::steady_clock::now();
    driver.step(s, {o.prompt}, false);
    prefill_best = std::max(prefill_best, o.prompt / seconds_since(t0));
    kv.release(s[0].id);
  }
  std::string decode_json;
  for (std::int32_t b : o.batches) {
    double best = 0;
    for (int r = 0; r < o.reps; ++r) {
      std::vector<BenchSeq> seqs;
      for (std::int32_t i = 0; i < b; ++i) seqs.push_back({kv.create(), 0});
      driver.step(seqs, std::vector<std::int32_t>(static_cast<std::size_t>(b), kDecodePrompt), false);
      const std::vector<std::int32_t> ones(static_cast<std::size_t>(b), 1);
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int32_t s = 0; s < o.steps; ++s) driver.step(seqs, ones, true);
      best = std::max(best, static_cast<double>(b) * o.steps / seconds_since(t0));
      for (const BenchSeq& s : seqs) kv.release(s.id);
    }
    if (!decode_json.empty()) decode_json += ", ";
    decode_json += "\"" + std::to_string(b) + "\": " + std::to_string(best);
  }
  std::string chunk_json;
  for (std::int32_t t : o.chunks) {
    double best = 1e30;
    for (int r = 0; r < o.reps; ++r) {
      std::vector<BenchSeq> seqs{{kv.create(), 0}};
      driver.step(seqs, {kDecodePrompt}, false);
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int32_t s = 0; s < o.steps; ++s) driver.step(seqs, {t}, true);
      best = std::min(best, 1000 * seconds_since(t0) / o.steps);
      kv.release(seqs[0].id);
    }
    if (!chunk_json.empty()) chunk_json += ", ";
    chunk_json += "\"" + std::to_string(t) + "\": " + std::to_string(best);
  }
  std::printf("{\"engine\": \"orchard\", \"device\": \"%s\", \"batch_invariant\": %s, \"threads\": %d, "
              "\"prompt\": %d, \"steps\": %d, \"prefill_tok_s\": %.3f, \"decode_tok_s\": {%s}, "
              "\"chunk_step_ms\": {%s}, \"weights\": \"%s\"}\n",
              o.cuda ? "cuda" : "cpu", o.batch_invariant ? "true" : "false", o.threads, o.prompt, o.steps,
              prefill_best, decode_json.c_str(), chunk_json.c_str(), model->describe().c_str());
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
