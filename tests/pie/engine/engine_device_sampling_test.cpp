// The engine's device-sampling path (EngineOptions::device_sampling) on any machine: the CPU backend wrapped
// (EngineOptions::wrap_backend) as a backend that samples "on the device" by Sampler::sample_at at the
// engine's draws and hides the logits of its kept steps from the host (NaN there), so the engine's side is
// exercised without a GPU: the outputs (tokens, texts, logprobs) equal the host path's for greedy, logprobs,
// penalties and bias, seeded sampling, n > 1, prompt logprobs, a top_k the device does not sort, constraints
// and ignore_eos; speculative decoding's drafted rows verified there give the host path's outputs and
// decoding's without drafts; off, nothing goes to the device; a failing device sampler fails its rows and
// the engine goes on; a broken logit (at a drafted position too) ends its sample with the CPU sampler's
// error; a ForwardingBackend over nothing is refused. The kernels on a GPU: tests/pie/runner/cuda_sampling_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "pie/backend.h"
#include "pie/device_sampling.h"
#include "pie/engine.h"
#include "pie/error.h"
#include "pie/forwarding_backend.h"
#include "pse/json_schema.h"

namespace pie::testing {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// What the wrapper is told to do, shared with the test.
struct Control {
  std::atomic<int> kept_steps{0};
  std::atomic<int> sampled_rows{0};
  std::atomic<bool> fail{false};       // sample_rows throws
  std::atomic<bool> nan_logits{false};  // every kept row's first logit becomes NaN
  std::atomic<bool> nan_drafted{false};  // so in steps of more than one logits row (a drafted row's)
};

class HostSampledBackend final : public ForwardingBackend {
 public:
  HostSampledBackend(std::unique_ptr<Backend> inner, Control* control)
      : ForwardingBackend(std::move(inner)), c_(control) {}

  std::string name() const override { return "host-sampled " + inner().name(); }
  Rows output_rows(std::span<float> host, std::int64_t n_rows, std::int64_t n_cols) override {
    host_ = host.first(static_cast<std::size_t>(n_rows * n_cols));
    n_cols_ = n_cols;
    return inner().output_rows(host, n_rows, n_cols);
  }

  void wait() override {
    inner().wait();
    if (!std::exchange(keep_, false)) return;
    // The "device's" copy; the host rows get NaN, so a host read of a kept step's logits shows.
    kept_.assign(host_.begin(), host_.end());
    std::fill(host_.begin(), host_.end(), kNan);
    if (c_->nan_logits || (c_->nan_drafted && kept_.size() > static_cast<std::size_t>(n_cols_))) {
      for (std::size_t i = 0; i < kept_.size(); i += static_cast<std::size_t>(n_cols_)) kept_[i] = kNan;
    }
    ++c_->kept_steps;
  }

  bool samples_on_device() const override { return true; }
  void keep_logits_on_device() override { keep_ = true; }
  void sample_rows(std::span<const DeviceSampleRow> rows, std::span<DeviceSampleResult> out) override {
    if (c_->fail) throw Error("[backend:test] injected sampling fault");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const DeviceSampleRow& r = rows[i];
      const auto n = static_cast<std::size_t>(n_cols_);
      std::vector<float> logits(kept_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r.logits_row) * n),
                                kept_.begin() + static_cast<std::ptrdiff_t>((static_cast<std::size_t>(r.logits_row) + 1) * n));
      std::vector<std::int32_t> output;  // the counts as tokens: the same penalties
      for (const auto& [token, count] : r.counts) output.insert(output.end(), static_cast<std::size_t>(count), token);
      out[i] = {};
      try {
        out[i].sampled = Sampler(*r.params, 0).sample_at(logits, r.mask, r.penalized, output, r.u);
      } catch (const RequestError&) {
        out[i].status = DeviceSampleResult::Status::no_token;
      } catch (const Error&) {
        out[i].status = DeviceSampleResult::Status::bad_logit;
        for (std::size_t t = 0; t < n; ++t) {
          if (!(logits[t] < std::numeric_limits<float>::infinity())) {
            out[i].bad_token = static_cast<std::int32_t>(t);
            out[i].bad_value = logits[t];
            break;
          }
        }
      }
      ++c_->sampled_rows;
    }
  }

 private:
  Control* c_;
  std::span<float> host_;
  std::int64_t n_cols_ = 0;
  bool keep_ = false;
  std::vector<float> kept_;
};

EngineOptions options(Control* control) {
  EngineOptions o;
  o.device = DeviceRequest::cpu;
  o.n_threads = 1;
  o.max_running = 8;
  o.context_length = 512;
  if (control != nullptr) {
    o.wrap_backend = [control](std::unique_ptr<Backend> b) -> std::unique_ptr<Backend> {
      return std::make_unique<HostSampledBackend>(std::move(b), control);
    };
  }
  return o;
}

std::vector<GenerateRequest> requests(const Model& model) {
  const auto& tok = *model.tokenizer;
  std::vector<GenerateRequest> reqs;
  for (const char* p : {"Once upon a time", "The dog", "A little girl named Lily", "One day"}) {
    GenerateRequest r;
    r.prompt = tok.encode(p, {});
    r.max_tokens = 24;
    r.sampling.temperature = 0;
    reqs.push_back(r);
  }
  reqs[1].sampling.logprobs = true;
  reqs[1].sampling.top_logprobs = 5;
  reqs[2].sampling.repetition_penalty = 1.3f;
  reqs[2].sampling.frequency_penalty = 0.4f;
  reqs[2].sampling.presence_penalty = -0.3f;
  reqs[2].sampling.logit_bias = {{reqs[2].prompt.back(), -5.0f}, {7, 2.5f}, {7, 1.0f}};
  reqs[3].ignore_eos = true;
  GenerateRequest seeded = reqs[0];
  seeded.sampling.temperature = 0.9f;
  seeded.sampling.top_k = 40;
  seeded.sampling.top_p = 0.95f;
  seeded.sampling.min_p = 0.02f;
  seeded.sampling.seed = 11;
  seeded.sampling.logprobs = true;
  reqs.push_back(seeded);
  GenerateRequest wide_p = seeded;
  wide_p.sampling.top_k = 0;
  wide_p.sampling.top_p = 0.999f;
  reqs.push_back(wide_p);
  GenerateRequest forked = reqs[3];
  forked.n = 3;
  forked.sampling.temperature = 1.0f;
  forked.sampling.seed = 5;
  reqs.push_back(forked);
  GenerateRequest prompt_lp = reqs[0];
  prompt_lp.prompt_logprobs = true;
  prompt_lp.sampling.logprobs = true;
  reqs.push_back(prompt_lp);
  GenerateRequest wide_k = seeded;
  wide_k.sampling.top_k = kDeviceMaxTopK + 7;
  reqs.push_back(wide_k);
  pse::JsonSchemaOptions compact;
  compact.layout = pse::JsonLayout::kCompact;
  GenerateRequest constrained = reqs[0];
  constrained.max_tokens = 64;
  constrained.grammar = pse::json_schema_to_grammar(
      std::string_view(R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},)"
                       R"("active":{"type":"boolean"}},"required":["name","active"],"additionalProperties":false})"),
      compact);
  reqs.push_back(constrained);
  constrained.sampling.temperature = 0.8f;
  constrained.sampling.seed = 3;
  reqs.push_back(constrained);
  return reqs;
}

struct Outputs {
  std::vector<RunResult> results;
  EngineStats stats;
};

Outputs run_all(const EngineOptions& o, const std::vector<GenerateRequest>& reqs) {
  Engine engine(random_model(), o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerateRequest& r : reqs) streams.push_back(engine.submit(r));
  Outputs out;
  for (auto& s : streams) out.results.push_back(collect(*s));
  out.stats = engine.stats();
  return out;
}

TEST(EngineDeviceSampling, OutputsEqualTheHostPaths) {
  const auto reqs = requests(*random_model());
  Control control;
  const Outputs device = run_all(options(&control), reqs), host = run_all(options(nullptr), reqs);
  ASSERT_EQ(device.results.size(), host.results.size());
  for (std::size_t i = 0; i < host.results.size(); ++i) {
    const RunResult& d = device.results[i];
    const RunResult& h = host.results[i];
    ASSERT_EQ(d.samples.size(), h.samples.size()) << "request " << i;
    for (std::size_t j = 0; j < h.samples.size(); ++j) {
      const std::string what = "request " + std::to_string(i) + " sample " + std::to_string(j);
      EXPECT_EQ(d.samples[j].error, "") << what;
      EXPECT_EQ(d.samples[j].tokens, h.samples[j].tokens) << what;
      EXPECT_EQ(d.samples[j].text, h.samples[j].text) << what;
      EXPECT_EQ(d.samples[j].finish, h.samples[j].finish) << what;
      ASSERT_EQ(d.samples[j].logprobs.size(), h.samples[j].logprobs.size()) << what;
      for (std::size_t t = 0; t < h.samples[j].logprobs.size(); ++t) {
        EXPECT_EQ(d.samples[j].logprobs[t].logprob, h.samples[j].logprobs[t].logprob) << what;
        ASSERT_EQ(d.samples[j].logprobs[t].top.size(), h.samples[j].logprobs[t].top.size()) << what;
      }
    }
    EXPECT_EQ(d.prompt_logprobs.size(), h.prompt_logprobs.size()) << "request " << i;
  }
  EXPECT_GT(device.stats.device_sampled_rows, 0u);
  EXPECT_EQ(device.stats.device_sampled_rows, static_cast<std::uint64_t>(control.sampled_rows.load()));
  EXPECT_GT(control.kept_steps.load(), 0);
  EXPECT_EQ(host.stats.device_sampled_rows, 0u);
}

TEST(EngineDeviceSampling, OffSamplesEveryRowOnTheHost) {
  Control control;
  EngineOptions o = options(&control);
  o.device_sampling = false;
  const Outputs out = run_all(o, {requests(*random_model())[0]});
  EXPECT_EQ(out.results[0].samples[0].tokens.size(), 24u);
  EXPECT_EQ(out.stats.device_sampled_rows, 0u);
  EXPECT_EQ(control.kept_steps.load(), 0);
}

TEST(EngineDeviceSampling, AFailingDeviceSamplerFailsItsRowsAndTheEngineGoesOn) {
  Control control;
  Engine engine(random_model(), options(&control));
  GenerateRequest r = requests(*random_model())[0];
  control.fail = true;
  const RunResult failed = run(engine, r);
  ASSERT_EQ(failed.samples.size(), 1u);
  EXPECT_EQ(failed.samples[0].finish, FinishReason::error);
  EXPECT_NE(failed.samples[0].error.find("sampling failed: [backend:test] injected sampling fault"), std::string::npos)
      << failed.samples[0].error;
  control.fail = false;
  const RunResult ok = run(engine, r);
  ASSERT_EQ(ok.samples.size(), 1u);
  EXPECT_EQ(ok.samples[0].finish, FinishReason::length);
  EXPECT_EQ(ok.samples[0].tokens.size(), 24u);
}

TEST(EngineDeviceSampling, ABrokenLogitEndsItsSampleWithTheCpuSamplersError) {
  Control control;
  control.nan_logits = true;
  Engine engine(random_model(), options(&control));
  const RunResult r = run(engine, requests(*random_model())[0]);
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].finish, FinishReason::error);
  EXPECT_NE(r.samples[0].error.find("sampling failed: [sampler] logit of token 0 is nan"), std::string::npos)
      << r.samples[0].error;
}

Outputs run_one_at_a_time(const EngineOptions& o, const std::vector<GenerateRequest>& reqs) {
  Engine engine(random_model(), o);
  Outputs out;
  for (const GenerateRequest& r : reqs) out.results.push_back(run(engine, r));
  out.stats = engine.stats();
  return out;
}

// Speculative decoding's drafted rows (drafting_requests) verified on the "device", one request at a time: every output equals the host path's with the same drafts (tokens, text,
// logprobs bit for bit), the greedy and seeded ones also equal decoding without speculation (the seed's
// stream kept), constraints included (a forced draft's text, the masks per position); the verified
// positions went to the device (more device rows than steps: a step of one request samples one plain row
// unless its drafts are there too) and drafts were kept.
TEST(EngineDeviceSampling, DraftedRowsAreVerifiedOnTheDevice) {
  const auto reqs = drafting_requests(*random_model());
  std::vector<GenerateRequest> plain_reqs = reqs;
  for (GenerateRequest& r : plain_reqs) r.speculative = SpeculativeOptions{};
  Control control;
  const Outputs device = run_one_at_a_time(options(&control), reqs);
  const Outputs host = run_one_at_a_time(options(nullptr), reqs);
  const Outputs plain = run_one_at_a_time(options(nullptr), plain_reqs);
  ASSERT_EQ(device.results.size(), reqs.size());
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const SampleResult& d = device.results[i].samples.at(0);
    const SampleResult& h = host.results[i].samples.at(0);
    const std::string what = "request " + std::to_string(i);
    EXPECT_EQ(d.error, "") << what;
    EXPECT_EQ(d.tokens, h.tokens) << what;
    EXPECT_EQ(d.text, h.text) << what;
    EXPECT_EQ(d.finish, h.finish) << what;
    ASSERT_EQ(d.logprobs.size(), h.logprobs.size()) << what;
    for (std::size_t t = 0; t < h.logprobs.size(); ++t) {
      EXPECT_EQ(d.logprobs[t].token, h.logprobs[t].token) << what;
      EXPECT_EQ(d.logprobs[t].logprob, h.logprobs[t].logprob) << what;
      ASSERT_EQ(d.logprobs[t].top.size(), h.logprobs[t].top.size()) << what;
    }
    EXPECT_EQ(d.tokens, plain.results[i].samples.at(0).tokens) << what << ": not what decoding without drafts gives";
    EXPECT_GT(device.results[i].usage.draft_tokens, 0) << what;
  }
  EXPECT_GT(device.stats.accepted_draft_tokens, 0u);
  EXPECT_EQ(device.stats.device_sampled_rows, static_cast<std::uint64_t>(control.sampled_rows.load()));
  EXPECT_GT(device.stats.device_sampled_rows, device.stats.steps);
  EXPECT_EQ(host.stats.device_sampled_rows, 0u);
}

// A broken logit at a verified position ends the sample with the CPU sampler's error, as on the host.
TEST(EngineDeviceSampling, ABrokenLogitAtADraftedPositionEndsItsSample) {
  Control control;
  control.nan_drafted = true;
  Engine engine(random_model(), options(&control));
  const RunResult r = run(engine, drafting_requests(*random_model())[0]);
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].finish, FinishReason::error);
  EXPECT_NE(r.samples[0].error.find("sampling failed: [sampler] logit of token 0 is nan"), std::string::npos)
      << r.samples[0].error;
  EXPECT_GT(r.samples[0].tokens.size(), 0u);  // the steps before the first draft went on
}

TEST(ForwardingBackend, RefusesToWrapNothing) {
  try {
    HostSampledBackend wrapper(nullptr, nullptr);
    FAIL() << "a forwarding backend over no backend was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a backend to wrap"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pie::testing
