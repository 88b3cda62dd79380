// Sampling on the CUDA backend (pie/src/backend/cuda/sampling_ops.cu) against the CPU Sampler on fresh
// random logits (a 128,256-token vocabulary): greedy rows with every processor (penalties, logit bias
// with a repeated token, masks allowing some, one or every token, ties, -inf logits) give the CPU's token,
// logprob and top_logprobs; sampled rows (temperature, top-k, top-p narrow and wide, min-p) drawn at the
// CPU sampler's own draw give its token (sums of weights are in another order, so a draw within rounding
// of a boundary may differ: at most 1% of rows are allowed to); NaN, +inf and all -inf rows report the
// CPU's errors; the step's host rows stay untouched (no copy); bad calls are errors. The engine on CUDA:
// greedy, constrained, seeded sampled, logprobs, n > 1 and prompt-logprobs requests (one at a time) give
// with device sampling what they give without it, on the random model and stories260K, and so do drafted
// rows verified there (speculative decoding). The CPU tests (the seam's refusals) run everywhere; the GPU
// ones skip without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "require_gpu.h"
#include "../engine/engine_test_util.h"
#include "shared_data.h"
#include "pie/backend.h"
#include "pie/device_sampling.h"
#include "pie/engine.h"
#include "pie/error.h"
#include "pie/model.h"
#include "pie/runner.h"
#include "pie/sampling.h"
#include "pse/json_schema.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/memory_pool.h"

namespace pie::testing {
namespace {

namespace tc = tensor::cuda;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::int32_t kVocab = 128256;  // Llama 3's

// A step's logit rows left on the device, as a forward pass leaves them (written into the backend's output
// rows by gather_rows inside a step begun with keep_logits_on_device), and the step's host rows, which
// must stay as they were (NaN).
struct DeviceLogits {
  std::unique_ptr<Backend> backend = make_cuda_backend(0);
  std::vector<float> host;
  void load(const std::vector<float>& logits, std::int64_t n_rows) {
    const std::int64_t n = static_cast<std::int64_t>(logits.size()) / n_rows;
    tc::DeviceBuffer src = tc::MemoryPool::global().allocate(logits.size() * sizeof(float));
    src.copy_from_host(logits.data(), logits.size() * sizeof(float));
    host.assign(logits.size(), kNan);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n_rows));
    std::iota(ids.begin(), ids.end(), 0);
    backend->keep_logits_on_device();
    backend->begin([&] {
      const Rows out = backend->output_rows(host, n_rows, n);
      backend->gather_rows({src.as<float>(), n_rows, n}, ids, out);
    });
    backend->wait();
  }
};

// A row to sample: its parameters, mask, tokens so far and seed.
struct Case {
  SamplingParams params;
  std::vector<std::uint32_t> mask;
  std::vector<std::int32_t> prompt, output;
  std::uint64_t seed = 1;
};

std::vector<float> normal_logits(std::size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<std::int32_t> random_tokens(std::size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> d(0, kVocab - 1);
  std::vector<std::int32_t> v(n);
  for (auto& t : v) t = d(rng);
  return v;
}

std::vector<std::uint32_t> random_mask(double keep, std::mt19937& rng) {
  std::bernoulli_distribution d(keep);
  std::vector<std::uint32_t> m((kVocab + 31) / 32, 0u);
  for (std::int32_t i = 0; i < kVocab; ++i) {
    if (d(rng)) m[static_cast<std::size_t>(i / 32)] |= 1u << (i % 32);
  }
  return m;
}

// The CPU's result and the device's for each case (case i reads logit row i).
struct Compared {
  std::vector<SampledToken> cpu;
  std::vector<std::string> cpu_error;
  std::vector<DeviceSampleResult> gpu;
};

Compared compare(const std::vector<float>& logits, const std::vector<Case>& cases) {
  const auto n = static_cast<std::size_t>(kVocab);
  DeviceLogits dev;
  dev.load(logits, static_cast<std::int64_t>(cases.size()));
  Compared c;
  std::vector<DeviceSampleRow> rows(cases.size());
  std::vector<std::vector<std::int32_t>> penalized(cases.size());
  std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>> counts(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    std::vector<float> row(logits.begin() + static_cast<std::ptrdiff_t>(i * n),
                           logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * n));
    Sampler cpu(k.params, k.seed), twin(k.params, k.seed);
    try {
      c.cpu.push_back(cpu.sample(row, k.mask, k.prompt, k.output));
      c.cpu_error.emplace_back();
    } catch (const Error& e) {
      c.cpu.emplace_back();
      c.cpu_error.emplace_back(e.what());
    }
    penalty_inputs(k.params, k.prompt, k.output, kVocab, penalized[i], counts[i]);
    rows[i] = {static_cast<std::int32_t>(i), &cases[i].params, k.mask, penalized[i], counts[i], twin.next_draw()};
  }
  c.gpu.resize(cases.size());
  dev.backend->sample_rows(rows, c.gpu);
  for (std::size_t i = 0; i < dev.host.size(); i += 4099) {
    EXPECT_TRUE(std::isnan(dev.host[i])) << "the logits came to the host (float " << i << ")";
  }
  return c;
}

void expect_logprobs_agree(const SampledToken& cpu, const SampledToken& gpu, const std::string& what) {
  EXPECT_NEAR(gpu.logprob, cpu.logprob, 1e-4 * (1 + std::fabs(cpu.logprob))) << what;
  ASSERT_EQ(gpu.top.size(), cpu.top.size()) << what;
  for (std::size_t j = 0; j < cpu.top.size(); ++j) {
    EXPECT_EQ(gpu.top[j].token, cpu.top[j].token) << what << " top " << j;
    EXPECT_NEAR(gpu.top[j].logprob, cpu.top[j].logprob, 1e-4 * (1 + std::fabs(cpu.top[j].logprob))) << what;
  }
}

TEST(CudaSamplingKernel, GreedyRowsGiveTheCpuSamplersTokensAndLogprobs) {
  REQUIRE_GPU();
  std::mt19937 rng(std::random_device{}());
  std::vector<Case> cases;
  std::vector<float> logits;
  auto add = [&](Case k, std::vector<float> row) {
    k.params.temperature = 0;
    k.params.logprobs = true;
    k.seed = rng();
    cases.push_back(std::move(k));
    logits.insert(logits.end(), row.begin(), row.end());
  };
  Case plain;
  plain.params.top_logprobs = 20;
  add(plain, normal_logits(kVocab, 3.0f, rng));
  // Ties everywhere: logits on a grid of 0.5, the best shared by many ids (the lowest wins).
  std::vector<float> tied = normal_logits(kVocab, 1.0f, rng);
  for (float& x : tied) x = std::round(x * 2.0f) / 2.0f;
  Case ties;
  ties.params.top_logprobs = 20;
  add(ties, tied);
  Case penalties;
  penalties.params.repetition_penalty = 1.7f;
  penalties.params.frequency_penalty = 0.9f;
  penalties.params.presence_penalty = 0.6f;
  penalties.params.top_logprobs = 5;
  std::vector<float> row = normal_logits(kVocab, 3.0f, rng);
  const std::int32_t best = static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  penalties.prompt = random_tokens(300, rng);
  penalties.prompt.push_back(best);  // the best is penalized
  penalties.output = random_tokens(40, rng);
  penalties.output.insert(penalties.output.end(), {penalties.output[0], penalties.output[0], best});
  add(penalties, row);
  Case bias;
  bias.params.logit_bias = {{17, 100.0f}, {17, -30.5f}, {99, 80.0f}, {5, -100.0f}, {kVocab - 1, 3.25f}};
  bias.params.top_logprobs = 3;
  add(bias, normal_logits(kVocab, 3.0f, rng));
  Case half;
  half.mask = random_mask(0.5, rng);
  half.params.top_logprobs = 20;
  add(half, normal_logits(kVocab, 3.0f, rng));
  Case one;
  one.mask.assign((kVocab + 31) / 32, 0u);
  one.mask[1234 / 32] = 1u << (1234 % 32);
  one.params.top_logprobs = 20;  // only one token is left to report
  add(one, normal_logits(kVocab, 3.0f, rng));
  Case all;
  all.mask.assign((kVocab + 31) / 32, 0xFFFFFFFFu);
  add(all, normal_logits(kVocab, 3.0f, rng));
  std::vector<float> holes = normal_logits(kVocab, 3.0f, rng);
  for (std::size_t i = 0; i < holes.size(); i += 3) holes[i] = -kInf;
  Case minus_inf;
  minus_inf.params.top_logprobs = 20;
  add(minus_inf, holes);
  Case everything;
  everything.mask = random_mask(0.3, rng);
  everything.params.repetition_penalty = 0.8f;
  everything.params.frequency_penalty = -1.5f;
  everything.params.presence_penalty = 2.0f;
  everything.params.logit_bias = {{3, 7.0f}, {70000, -2.0f}};
  everything.prompt = random_tokens(2000, rng);
  everything.output = random_tokens(500, rng);
  everything.params.top_logprobs = 7;
  add(everything, normal_logits(kVocab, 3.0f, rng));
  Case quiet;  // no logprobs asked: none reported
  quiet.params.logprobs = false;
  add(quiet, normal_logits(kVocab, 3.0f, rng));
  cases.back().params.logprobs = false;

  const Compared c = compare(logits, cases);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string what = "row " + std::to_string(i);
    ASSERT_TRUE(c.cpu_error[i].empty()) << what << ": " << c.cpu_error[i];
    ASSERT_EQ(c.gpu[i].status, DeviceSampleResult::Status::ok) << what;
    EXPECT_EQ(c.gpu[i].sampled.token, c.cpu[i].token) << what;
    expect_logprobs_agree(c.cpu[i], c.gpu[i].sampled, what);
  }
  EXPECT_EQ(c.gpu[5].sampled.token, 1234);
  EXPECT_EQ(c.gpu[5].sampled.top.size(), 1u);
  EXPECT_TRUE(c.gpu.back().sampled.top.empty());
}

TEST(CudaSamplingKernel, SampledRowsDrawTheCpuSamplersTokens) {
  REQUIRE_GPU();
  std::mt19937 rng(std::random_device{}());
  struct Shape {
    float temperature, top_p, min_p, scale;
    std::int32_t top_k;
    bool ties;
  };
  // Narrow and wide nuclei (a peaked and a flat distribution), top-k alone and with top-p, min-p alone,
  // top-k at the device's largest, ties at the k-th best.
  const Shape shapes[] = {
      {1.0f, 1.0f, 0.0f, 3.0f, 0, false},     {0.7f, 1.0f, 0.05f, 3.0f, 0, false}, {1.0f, 0.5f, 0.0f, 3.0f, 0, false},
      {1.3f, 0.95f, 0.0f, 0.5f, 0, false},    {1.0f, 0.99f, 0.01f, 1.0f, 0, false}, {0.8f, 1.0f, 0.0f, 2.0f, 40, false},
      {0.8f, 0.9f, 0.0f, 2.0f, 40, false},    {1.0f, 0.95f, 0.02f, 1.0f, 1024, false},
      {1.0f, 1.0f, 0.0f, 1.0f, 1, false},     {1.0f, 1.0f, 0.0f, 1.0f, 40, true},  {1.5f, 0.7f, 0.0f, 1.0f, 0, true},
  };
  std::size_t rows = 0, differ = 0;
  for (int round = 0; round < 4; ++round) {
    std::vector<Case> cases;
    std::vector<float> logits;
    for (const Shape& s : shapes) {
      for (int rep = 0; rep < 3; ++rep) {
        Case k;
        k.params.temperature = s.temperature;
        k.params.top_k = s.top_k;
        k.params.top_p = s.top_p;
        k.params.min_p = s.min_p;
        k.params.logprobs = rep == 0;
        k.params.top_logprobs = rep == 0 ? 4 : 0;
        if (rep == 2) k.mask = random_mask(0.6, rng);
        k.seed = rng();
        std::vector<float> row = normal_logits(kVocab, s.scale, rng);
        if (s.ties) {
          for (float& x : row) x = std::round(x * 4.0f) / 4.0f;
        }
        cases.push_back(std::move(k));
        logits.insert(logits.end(), row.begin(), row.end());
      }
    }
    const Compared c = compare(logits, cases);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const std::string what = "round " + std::to_string(round) + " row " + std::to_string(i);
      ASSERT_TRUE(c.cpu_error[i].empty()) << what << ": " << c.cpu_error[i];
      ASSERT_EQ(c.gpu[i].status, DeviceSampleResult::Status::ok) << what;
      ++rows;
      if (c.gpu[i].sampled.token != c.cpu[i].token) {
        ++differ;
        ADD_FAILURE_AT(__FILE__, __LINE__) << what << ": " << c.gpu[i].sampled.token << " vs the CPU's "
                                           << c.cpu[i].token << " (counted; at most 1% may differ)";
      }
      if (!cases[i].mask.empty()) {
        const std::int32_t t = c.gpu[i].sampled.token;
        EXPECT_TRUE(cases[i].mask[static_cast<std::size_t>(t / 32)] >> (t % 32) & 1u) << what << ": masked token";
      }
      if (cases[i].params.logprobs) expect_logprobs_agree(c.cpu[i], c.gpu[i].sampled, what);
    }
  }
  EXPECT_LE(differ * 100, rows) << differ << " of " << rows << " rows differ";
}

// Rows handed one mask (the same span, as the engine hands every ignore_eos row its one mask) share its
// upload; rows between them with masks of their own keep theirs: each row's token is the CPU's under its
// own mask (two random masks of half the vocabulary: a row read under the other mask would pick another
// token).
TEST(CudaSamplingKernel, RowsHandedOneMaskShareItsUpload) {
  REQUIRE_GPU();
  std::mt19937 rng(std::random_device{}());
  const std::vector<std::uint32_t> shared = random_mask(0.5, rng), own_a = random_mask(0.5, rng),
                                   own_b = random_mask(0.5, rng);
  const std::uint32_t* const masks[] = {shared.data(), own_a.data(), shared.data(), own_b.data(), shared.data()};
  const std::size_t n_rows = std::size(masks), words = shared.size();
  std::vector<float> logits;
  for (std::size_t i = 0; i < n_rows; ++i) {
    const std::vector<float> row = normal_logits(static_cast<std::size_t>(kVocab), 3.0f, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  DeviceLogits dev;
  dev.load(logits, static_cast<std::int64_t>(n_rows));
  SamplingParams params;
  params.temperature = 0;  // greedy
  std::vector<DeviceSampleRow> rows(n_rows);
  std::vector<std::int32_t> expected(n_rows);
  for (std::size_t i = 0; i < n_rows; ++i) {
    const std::span<const std::uint32_t> mask(masks[i], words);
    std::vector<float> row(logits.begin() + static_cast<std::ptrdiff_t>(i * kVocab),
                           logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * kVocab));
    Sampler cpu(params, 1);
    expected[i] = cpu.sample(row, mask, {}, {}).token;
    rows[i] = {static_cast<std::int32_t>(i), &params, mask, {}, {}, 0.5};
  }
  std::vector<DeviceSampleResult> got(n_rows);
  dev.backend->sample_rows(rows, got);
  for (std::size_t i = 0; i < n_rows; ++i) {
    EXPECT_EQ(got[i].status, DeviceSampleResult::Status::ok) << "row " << i;
    EXPECT_EQ(got[i].sampled.token, expected[i]) << "row " << i;
  }
}

TEST(CudaSamplingKernel, BrokenAndEmptyRowsReportTheCpuSamplersErrors) {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  std::vector<float> logits = normal_logits(3 * static_cast<std::size_t>(kVocab), 1.0f, rng);
  logits[100] = kNan;
  logits[50] = kInf;  // the first bad logit is reported
  logits[static_cast<std::size_t>(kVocab) + 7] = kNan;
  std::vector<Case> cases(3);
  cases[1].params.temperature = 0.9f;
  cases[1].params.top_k = 40;
  cases[2].mask.assign((kVocab + 31) / 32, 0u);  // allows nothing: every token -inf
  cases[2].mask[0] = 0;
  const Compared c = compare(logits, cases);
  ASSERT_EQ(c.gpu[0].status, DeviceSampleResult::Status::bad_logit);
  EXPECT_EQ(c.gpu[0].bad_token, 50);
  ASSERT_EQ(c.gpu[1].status, DeviceSampleResult::Status::bad_logit);
  EXPECT_EQ(c.gpu[1].bad_token, 7);
  EXPECT_EQ(c.gpu[2].status, DeviceSampleResult::Status::no_token);
  for (std::size_t i = 0; i < 2; ++i) {
    try {
      throw_unless_sampled(c.gpu[i]);
      ADD_FAILURE() << "row " << i << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), c.cpu_error[i]) << "row " << i;
    }
  }
  // The CPU refuses a mask allowing nothing before looking at the logits; the engine does the same on the
  // host (mask_allows_nothing) before the device; the device alone finds every token -inf.
  EXPECT_TRUE(mask_allows_nothing(cases[2].mask, kVocab));
  EXPECT_THROW(throw_unless_sampled(c.gpu[2]), RequestError);
}

TEST(CudaSamplingKernel, BadCallsAreErrors) {
  REQUIRE_GPU();
  DeviceLogits dev;
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<DeviceSampleResult> out(1);
  const DeviceSampleRow before{0, &greedy, {}, {}, {}, 0.5};
  EXPECT_THROW(dev.backend->sample_rows(std::span(&before, 1), out), Error);  // no step yet
  std::mt19937 rng(4);
  dev.load(normal_logits(2 * 3000, 1.0f, rng), 2);  // a vocabulary of 3000
  const DeviceSampleRow outside{2, &greedy, {}, {}, {}, 0.5};
  EXPECT_THROW(dev.backend->sample_rows(std::span(&outside, 1), out), Error);
  const DeviceSampleRow no_params{0, nullptr, {}, {}, {}, 0.5};
  EXPECT_THROW(dev.backend->sample_rows(std::span(&no_params, 1), out), Error);
  const std::int32_t far = 3000;
  const DeviceSampleRow bad_token{0, &greedy, {}, std::span(&far, 1), {}, 0.5};
  EXPECT_THROW(dev.backend->sample_rows(std::span(&bad_token, 1), out), Error);
  SamplingParams wide_k;
  wide_k.top_k = kDeviceMaxTopK + 1;  // below the vocabulary: on, and more than the device sorts
  const DeviceSampleRow too_many{0, &wide_k, {}, {}, {}, 0.5};
  EXPECT_THROW(dev.backend->sample_rows(std::span(&too_many, 1), out), Error);
  std::vector<DeviceSampleResult> two(2);
  EXPECT_THROW(dev.backend->sample_rows(std::span(&before, 1), two), Error);  // results for another count
  EXPECT_NO_THROW(dev.backend->sample_rows(std::span(&before, 1), out));
}

// The CPU backend leaves sampling to the host: it says so (the runner's refusal: runner_error_test).
TEST(DeviceSamplingSeam, TheCpuBackendSamplesOnTheHost) {
  std::unique_ptr<Backend> cpu = make_cpu_backend(std::int32_t{1});
  EXPECT_FALSE(cpu->samples_on_device());
  std::vector<DeviceSampleResult> out;
  EXPECT_THROW(cpu->sample_rows({}, out), Error);
}

// The engine on the CPU samples every row on the host (its stats say none went to the device).
TEST(DeviceSamplingSeam, TheEngineOnTheCpuSamplesOnTheHost) {
  EngineOptions o;
  o.device = DeviceRequest::cpu;
  o.n_threads = 1;
  Engine engine(random_model(), o);
  GenerateRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 4;
  r.sampling.temperature = 0;
  const RunResult result = run(engine, r);
  ASSERT_EQ(result.samples.size(), 1u);
  EXPECT_EQ(result.samples[0].tokens.size(), 4u);
  EXPECT_EQ(engine.stats().device_sampled_rows, 0u);
}

// --- The engine on CUDA, with device sampling and without.

struct EngineOutputs {
  std::vector<RunResult> results;
  EngineStats stats;
};

EngineOutputs run_all(std::shared_ptr<const Model> model, bool device_sampling, const std::vector<GenerateRequest>& reqs,
                      bool batch_invariant = false) {
  EngineOptions o;
  o.device = DeviceRequest::cuda;
  o.max_running = 8;
  o.context_length = 512;
  o.device_sampling = device_sampling;
  o.batch_invariant = batch_invariant;
  Engine engine(std::move(model), o);
  // One request at a time, so both engines run the same batches: on CUDA a token's logits differ in their
  // last bits between a prefill chunk and a decode row (other attention kernels), so batches that the
  // submission's timing composes differently could part greedy texts at a near tie whoever samples.
  // Batches with device sampling: the batched-equals-alone test of cuda_backend_test, where it is on.
  EngineOutputs out;
  for (const GenerateRequest& r : reqs) out.results.push_back(run(engine, r));
  out.stats = engine.stats();
  return out;
}

void expect_same_outputs(const EngineOutputs& device, const EngineOutputs& host) {
  ASSERT_EQ(device.results.size(), host.results.size());
  for (std::size_t i = 0; i < host.results.size(); ++i) {
    const RunResult& d = device.results[i];
    const RunResult& h = host.results[i];
    ASSERT_EQ(d.samples.size(), h.samples.size()) << "request " << i;
    for (std::size_t j = 0; j < h.samples.size(); ++j) {
      const std::string what = "request " + std::to_string(i) + " sample " + std::to_string(j);
      EXPECT_EQ(d.samples[j].error, "") << what;
      EXPECT_EQ(d.samples[j].tokens, h.samples[j].tokens) << what;
      EXPECT_EQ(d.samples[j].finish, h.samples[j].finish) << what;
      ASSERT_EQ(d.samples[j].logprobs.size(), h.samples[j].logprobs.size()) << what;
      for (std::size_t t = 0; t < h.samples[j].logprobs.size(); ++t) {
        expect_logprobs_agree(h.samples[j].logprobs[t], d.samples[j].logprobs[t], what + " token " + std::to_string(t));
      }
    }
  }
  EXPECT_GT(device.stats.device_sampled_rows, 0u);
  EXPECT_EQ(host.stats.device_sampled_rows, 0u);
}

std::vector<GenerateRequest> engine_requests(const Model& model) {
  const auto& tok = *model.tokenizer;
  std::vector<GenerateRequest> reqs;
  const char* prompts[] = {"Once upon a time", "The dog", "A little girl named Lily", "One day"};
  for (const char* p : prompts) {
    GenerateRequest r;
    r.prompt = tok.encode(p, {});
    r.max_tokens = 40;
    r.sampling.temperature = 0;
    reqs.push_back(r);
  }
  reqs[1].sampling.logprobs = true;  // logprobs with alternatives
  reqs[1].sampling.top_logprobs = 5;
  reqs[2].sampling.repetition_penalty = 1.3f;  // penalties and bias on the device
  reqs[2].sampling.frequency_penalty = 0.4f;
  reqs[2].sampling.logit_bias = {{reqs[2].prompt.back(), -5.0f}};
  GenerateRequest seeded = reqs[0];  // a seeded sampled request
  seeded.sampling.temperature = 0.9f;
  seeded.sampling.top_k = 40;
  seeded.sampling.top_p = 0.95f;
  seeded.sampling.min_p = 0.02f;
  seeded.sampling.seed = 11;
  reqs.push_back(seeded);
  reqs.push_back(seeded);  // twice: the seed reproduces its output
  GenerateRequest forked = reqs[3];  // n > 1: the first step forks on the host, the rest on the device
  forked.n = 2;
  forked.sampling.temperature = 1.0f;
  forked.sampling.top_k = 0;
  forked.sampling.seed = 5;
  reqs.push_back(forked);
  GenerateRequest prompt_lp = reqs[0];  // prompt logprobs: that step on the host
  prompt_lp.prompt_logprobs = true;
  prompt_lp.sampling.logprobs = true;
  reqs.push_back(prompt_lp);
  GenerateRequest wide = seeded;  // a top_k the device does not sort: every step on the host
  wide.sampling.top_k = kDeviceMaxTopK + 7;
  reqs.push_back(wide);
  return reqs;
}

TEST(CudaSamplingEngine, RandomModelGivesWhatTheHostPathGives) {
  REQUIRE_GPU();
  const auto model = random_model();
  const auto reqs = engine_requests(*model);
  const EngineOutputs device = run_all(model, true, reqs), host = run_all(model, false, reqs);
  expect_same_outputs(device, host);
  EXPECT_EQ(device.results[4].samples[0].tokens, device.results[5].samples[0].tokens);
}

TEST(CudaSamplingEngine, Stories260KGivesWhatTheHostPathGives) {
  REQUIRE_GPU();
  ORCHARD_REQUIRE_SHARED_DATA("models/stories260K/stories260K.bin");
  const auto model = load_model(orchard::testing::shared_data("models/stories260K/stories260K.bin"));
  const auto reqs = engine_requests(*model);
  const EngineOutputs device = run_all(model, true, reqs), host = run_all(model, false, reqs);
  expect_same_outputs(device, host);
  EXPECT_EQ(device.results[4].samples[0].tokens, device.results[5].samples[0].tokens);
}

// Speculative decoding's drafted rows (drafting_requests, each at a fixed draft length so that both runs
// take the same steps) verified on the device: what the host path gives with the same drafts; the
// verified positions sampled there (more device rows than steps: one request at a time, a step samples one
// plain row unless its drafts are there). Against decoding without drafts, greedy: a verify step's
// attention is the prefill kernel's (f16 operands) where a one-token step's is the decode kernel's, so
// their logits part in the last bits: the texts agree up to the first token whose top-two margin without
// drafts is under 1e-2 (issue 35's agreement rule).
TEST(CudaSamplingEngine, DraftedRowsGiveWhatTheHostPathGives) {
  REQUIRE_GPU();
  const auto model = random_model();
  std::vector<GenerateRequest> reqs = drafting_requests(*model);
  for (GenerateRequest& r : reqs) r.speculative->k = 4;
  std::vector<GenerateRequest> plain_reqs = reqs;
  for (GenerateRequest& r : plain_reqs) {
    r.speculative = SpeculativeOptions{};
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = std::max(r.sampling.top_logprobs, 2);
  }
  const EngineOutputs device = run_all(model, true, reqs, true), host = run_all(model, false, reqs, true);
  expect_same_outputs(device, host);
  const EngineOutputs plain = run_all(model, true, plain_reqs, true);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_GT(device.results[i].usage.draft_tokens, 0) << "request " << i;
    if (reqs[i].sampling.temperature > 0) continue;
    const SampleResult& d = device.results[i].samples.at(0);
    const SampleResult& p = plain.results[i].samples.at(0);
    std::size_t t = 0;
    while (t < d.tokens.size() && t < p.tokens.size() && d.tokens[t] == p.tokens[t]) ++t;
    if (t == d.tokens.size() && t == p.tokens.size()) continue;
    ASSERT_LT(t, p.logprobs.size()) << "request " << i;
    const std::vector<TokenLogprob>& top = p.logprobs[t].top;
    ASSERT_GE(top.size(), 2u) << "request " << i;
    EXPECT_LT(top[0].logprob - top[1].logprob, 1e-2f) << "request " << i << " parts at token " << t;
  }
  EXPECT_GT(device.stats.accepted_draft_tokens, 0u);
  EXPECT_GT(device.stats.device_sampled_rows, device.stats.steps);
}

TEST(CudaSamplingEngine, ConstrainedRequestsValidate) {
  REQUIRE_GPU();
  const auto model = random_model();
  // Compact and bounded (an integer may take any number of zeros after its point), so that every output
  // ends well inside max_tokens.
  pse::JsonSchemaOptions compact;
  compact.layout = pse::JsonLayout::kCompact;
  const pse::Grammar schema = pse::json_schema_to_grammar(
      std::string_view(R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},)"
                       R"("active":{"type":"boolean"}},"required":["name","active"],"additionalProperties":false})"),
      compact);
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    GenerateRequest r;
    r.prompt = model->tokenizer->encode(i == 0 ? "A person:" : "Someone else", {});
    r.max_tokens = 128;
    r.sampling.temperature = i == 2 ? 0.8f : 0.0f;
    r.sampling.seed = 3;
    r.grammar = schema;
    reqs.push_back(r);
  }
  const EngineOutputs device = run_all(model, true, reqs), host = run_all(model, false, reqs);
  expect_same_outputs(device, host);
  for (const RunResult& r : device.results) {
    ASSERT_EQ(r.samples.size(), 1u);
    ASSERT_EQ(r.samples[0].finish, FinishReason::stop) << r.samples[0].text;
    const nlohmann::json parsed = nlohmann::json::parse(r.samples[0].text);  // throws (fails) when it does not parse
    EXPECT_TRUE(parsed.at("name").is_string()) << r.samples[0].text;
    EXPECT_TRUE(parsed.at("active").is_boolean()) << r.samples[0].text;
  }
}

}  // namespace
}  // namespace pie::testing
