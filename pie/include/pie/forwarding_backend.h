// A Backend that hands every operation to the backend it wraps: the base of wrappers that change one or
// two operations (with_injected_faults' wrapper, the tests' "device" samplers over the CPU backend), so a
// new Backend operation is forwarded here, once, and not in each wrapper.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "pie/backend.h"
#include "pie/error.h"

namespace pie {

class ForwardingBackend : public Backend {
 public:
  // Throws pie::Error on a null `inner`.
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {
    if (!inner_) throw Error("[backend] a forwarding backend needs a backend to wrap, got none");
  }

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
  void add_rms_norm(const Rows& acc, const Rows& x, const Weight& weight, float eps, const Rows& out) override {
    inner_->add_rms_norm(acc, x, weight, eps, out);
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
  void begin(std::function<void()> step) override { inner_->begin(std::move(step)); }
  void wait() override { inner_->wait(); }
  bool samples_on_device() const override { return inner_->samples_on_device(); }
  void keep_logits_on_device() override { inner_->keep_logits_on_device(); }
  void sample_rows(std::span<const DeviceSampleRow> rows, std::span<DeviceSampleResult> out) override {
    inner_->sample_rows(rows, out);
  }

 protected:
  Backend& inner() const { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace pie
