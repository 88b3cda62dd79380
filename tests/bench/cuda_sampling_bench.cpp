// A step's sampling at batch ROWS (default 64) over a 128,256-token vocabulary, both ways the engine can do
// it, in one run: on the device (the logits stay there, Backend::sample_rows returns the tokens) and on the
// host (wait() copies every logits row to the host, then pie::Sampler samples row after row, as the engine
// does with ORCHARD_DEVICE_SAMPLING=0). Each timed step writes its logits rows with one gather on the device
// first (the same in both), so the difference is the sampling and the copy. One JSON object per line:
// config, device_us and host_us per step (medians of REPS), their ratio.
//
//   orchard_bench_cuda_sampling [ROWS] [REPS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "pie/backend.h"
#include "pie/device_sampling.h"
#include "pie/sampling.h"
#include "tensor/cuda/memory_pool.h"

namespace {

constexpr std::int64_t kVocab = 128256;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Config {
  const char* name;
  pie::SamplingParams params;
  float scale;  // of the random logits: 3 peaked, 0.5 flat
};

pie::SamplingParams make(float t, std::int32_t k, float p, float min_p, std::int32_t top_lp) {
  pie::SamplingParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.min_p = min_p;
  s.logprobs = top_lp > 0;
  s.top_logprobs = top_lp;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t rows = argc > 1 ? std::atoll(argv[1]) : 64;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  const Config configs[] = {
      {"greedy", make(0, 0, 1, 0, 0), 3.0f},
      {"greedy + top-5 logprobs", make(0, 0, 1, 0, 5), 3.0f},
      {"T=0.8", make(0.8f, 0, 1, 0, 0), 3.0f},
      {"top-k 40", make(0.8f, 40, 1, 0, 0), 3.0f},
      {"k40+p0.95+min-p 0.05", make(0.8f, 40, 0.95f, 0.05f, 0), 3.0f},
      {"top-p 0.9, peaked", make(1.0f, 0, 0.9f, 0, 0), 3.0f},
      {"top-p 0.9, flat", make(1.0f, 0, 0.9f, 0, 0), 0.5f},
  };
  std::unique_ptr<pie::Backend> backend = pie::make_cuda_backend(0);
  std::mt19937 rng(1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows));
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> host(static_cast<std::size_t>(rows * kVocab));
  for (const Config& c : configs) {
    std::normal_distribution<float> d(0.0f, c.scale);
    std::vector<float> logits(host.size());
    for (float& x : logits) x = d(rng);
    tensor::cuda::DeviceBuffer src = tensor::cuda::MemoryPool::global().allocate(logits.size() * sizeof(float));
    src.copy_from_host(logits.data(), logits.size() * sizeof(float));
    const pie::Rows src_rows{src.as<float>(), rows, kVocab};
    auto step = [&](bool keep) {
      if (keep) backend->keep_logits_on_device();
      backend->begin([&] { backend->gather_rows(src_rows, ids, backend->output_rows(host, rows, kVocab)); });
      backend->wait();
    };
    std::vector<pie::Sampler> samplers;
    for (std::int64_t r = 0; r < rows; ++r) samplers.emplace_back(c.params, static_cast<std::uint64_t>(r));
    std::vector<pie::DeviceSampleRow> in(static_cast<std::size_t>(rows));
    std::vector<pie::DeviceSampleResult> out(static_cast<std::size_t>(rows));
    std::vector<double> device_us, host_us;
    for (int rep = 0; rep < reps + 2; ++rep) {  // two warm-up rounds (JIT, buffers)
      auto t0 = std::chrono::steady_clock::now();
      step(true);
      for (std::int64_t r = 0; r < rows; ++r) {
        in[static_cast<std::size_t>(r)] = {static_cast<std::int32_t>(r), &c.params, {}, {}, {},
                                           samplers[static_cast<std::size_t>(r)].next_draw()};
      }
      backend->sample_rows(in, out);
      auto t1 = std::chrono::steady_clock::now();
      step(false);
      std::int64_t sum = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        sum += samplers[static_cast<std::size_t>(r)]
                   .sample(std::span<float>(host.data() + r * kVocab, static_cast<std::size_t>(kVocab)), {}, {}, {})
                   .token;
      }
      auto t2 = std::chrono::steady_clock::now();
      if (sum < 0) return 1;  // keeps the host samples
      if (rep >= 2) {
        device_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        host_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
      }
    }
    const double dev = median(device_us), hst = median(host_us);
    std::printf("{\"measure\": \"step_sampling\", \"config\": \"%s\", \"rows\": %lld, \"vocab\": %lld, "
                "\"device_us\": %.1f, \"host_us\": %.1f, \"host_over_device\": %.2f}\n",
                c.name, static_cast<long long>(rows), static_cast<long long>(kVocab), dev, hst, hst / dev);
    std::fflush(stdout);
  }
  return 0;
}
