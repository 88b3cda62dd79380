// A backend that fails chosen steps: every operation goes to the backend it wraps, and wait() of the steps
// named in ORCHARD_INJECT_STEP_FAULTS throws as a device fault inside the step would (the step's own work
// done and discarded). It lets the engine's and the server's handling of a fault inside a step (the step's
// requests end with an error, the rest keep being served, /health says so) be exercised on any backend,
// on a machine without a GPU too.
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <set>
#include <string_view>

#include "pie/backend.h"
#include "pie/error.h"

namespace pie {
namespace {

class FaultInjectingBackend final : public Backend {
 public:
  FaultInjectingBackend(std::unique_ptr<Backend> inner, std::set<std::uint64_t> steps)
      : inner_(std::move(inner)), steps_(std::move(steps)) {}

  std::string name() const override { return inner_->name(); }
  tensor::Device device() const override { return inner_->device(); }
  bool supports_lora() const override { return inner_->supports_lora(); }
  void prepare_lora(const LoraAdapter& adapter) override { inner_->prepare_lora(adapter); }
  void release_lora(const LoraAdapter& adapter) override { inner_->release_lora(adapter); }
  std::shared_ptr<const ModelWeights> upload(std::shared_ptr<const Model> model) override {
    return inner_->upload(std::move(model));
  }
  std::unique_ptr<KvStorage> make_kv_storage(const KvCacheConfig& config) override {
    return inner_->make_kv_storage(config);
  }
  Rows scratch(int slot, std::int64_t n_rows, std::int64_t n_cols) override {
    return inner_->scratch(slot, n_rows, n_cols);
  }
  Rows output_rows(std::span<float> host, std::int64_t n_rows, std::int64_t n_cols) override {
    return inner_->output_rows(host, n_rows, n_cols);
  }
  void embed(const Weight& table, std::span<const std::int32_t> tokens, const Rows& out) override {
    inner_->embed(table, tokens, out);
  }
  void rms_norm(const Rows& x, const Weight& weight, float eps, const Rows& out) override {
    inner_->rms_norm(x, weight, eps, out);
  }
  void project(const Rows& in, std::span<const Projection> outs) override { inner_->project(in, outs); }
  void add_bias(const Rows& x, const Weight& bias) override { inner_->add_bias(x, bias); }
  void add(const Rows& acc, const Rows& x) override { inner_->add(acc, x); }
  void swiglu(const Rows& gate, const Rows& up) override { inner_->swiglu(gate, up); }
  void rope_append(const StepLayout& layout, const pal::RopeTable& rope, const Rows& q, const Rows& k, const Rows& v,
                   KvStorage& kv, std::int32_t layer) override {
    inner_->rope_append(layout, rope, q, k, v, kv, layer);
  }
  void attention(const StepLayout& layout, const pal::AttentionParams& params, const Rows& q, KvStorage& kv,
                 std::int32_t layer, const Rows& out) override {
    inner_->attention(layout, params, q, kv, layer, out);
  }
  void gather_rows(const Rows& x, std::span<const std::int32_t> rows, const Rows& out) override {
    inner_->gather_rows(x, rows, out);
  }
  void soft_cap(const Rows& x, float cap) override { inner_->soft_cap(x, cap); }

  void begin(std::function<void()> step) override {
    ++step_;
    inner_->begin(std::move(step));
  }
  bool samples_on_device() const override { return inner_->samples_on_device(); }
  void keep_logits_on_device() override { inner_->keep_logits_on_device(); }
  void sample_rows(std::span<const DeviceSampleRow> rows, std::span<DeviceSampleResult> out) override {
    inner_->sample_rows(rows, out);
  }
  void wait() override {
    inner_->wait();
    if (steps_.count(step_) != 0) {
      steps_.erase(step_);
      throw Error(fmt::format("[backend:{}] injected device fault in step {} (ORCHARD_INJECT_STEP_FAULTS)",
                              inner_->name(), step_));
    }
  }

 private:
  std::unique_ptr<Backend> inner_;
  std::set<std::uint64_t> steps_;
  std::uint64_t step_ = 0;
};

}  // namespace

std::unique_ptr<Backend> with_injected_faults(std::unique_ptr<Backend> backend) {
  const char* env = std::getenv("ORCHARD_INJECT_STEP_FAULTS");
  if (env == nullptr || *env == '\0') return backend;
  std::set<std::uint64_t> steps;
  std::string_view rest(env);
  for (bool more = true; more;) {
    const std::size_t comma = rest.find(',');
    more = comma != std::string_view::npos;
    const std::string_view item = rest.substr(0, comma);
    std::uint64_t step = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), step);
    if (ec != std::errc() || end != item.data() + item.size() || step == 0) {
      throw Error(fmt::format("[backend] ORCHARD_INJECT_STEP_FAULTS='{}': expected step numbers from 1, comma "
                              "separated, got '{}'",
                              env, item));
    }
    steps.insert(step);
    if (more) rest = rest.substr(comma + 1);
  }
  return std::make_unique<FaultInjectingBackend>(std::move(backend), std::move(steps));
}

}  // namespace pie
