// The runner: validates a batch, lays it out for the backend (each token's position and KV slot, the
// decode rows and prefill chunks as attention groups, the RoPE table), and has the architecture's builder
// run it as one backend step.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "models/architecture.h"
#include "pie/error.h"
#include "pie/runner.h"
#include "runner/batch_check.h"
#include "tensor/error.h"

namespace pie {
namespace {

void add_to_group(AttentionGroup& g, const ForwardBatch& b, std::int32_t s) {
  for (std::int32_t i = b.page_indptr[s]; i < b.page_indptr[s + 1]; ++i) g.page_indices.push_back(b.page_indices[i]);
  g.page_indptr.push_back(static_cast<std::int32_t>(g.page_indices.size()));
  g.seq_lens.push_back(b.seq_lens[s]);
  for (std::int32_t t = b.qo_indptr[s]; t < b.qo_indptr[s + 1]; ++t) g.rows.push_back(t);
  g.qo_indptr.push_back(static_cast<std::int32_t>(g.rows.size()));
}

void clear(AttentionGroup& g) {
  g.page_indptr.assign(1, 0);
  g.page_indices.clear();
  g.seq_lens.clear();
  g.qo_indptr.assign(1, 0);
  g.rows.clear();
}

}  // namespace

struct ModelRunner::Impl {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Backend> backend;
  std::shared_ptr<const ModelWeights> weights;  // resident on the backend's device
  const models::ArchitectureBuilder* builder = nullptr;
  // The step under way (begin .. wait): its layout and RoPE table outlive the backend's work.
  StepLayout layout;
  std::shared_ptr<const pal::RopeTable> rope;  // cos/sin for the positions seen so far
  bool in_flight = false;
  double step_seconds = 0;  // the last step's time on the backend's step thread

  void lay_out(const ForwardBatch& b);
};

void ModelRunner::Impl::lay_out(const ForwardBatch& b) {
  const auto n_tokens = static_cast<std::size_t>(b.tokens.size());
  const std::int32_t n_seqs = static_cast<std::int32_t>(b.qo_indptr.size()) - 1;
  layout.positions.resize(n_tokens);
  layout.kv_slots.resize(n_tokens);
  clear(layout.decode);
  clear(layout.prefill);
  std::int32_t max_pos = 0;
  for (std::int32_t s = 0; s < n_seqs; ++s) {
    const std::int32_t n_q = b.qo_indptr[s + 1] - b.qo_indptr[s];
    if (n_q == 0) continue;
    const std::int32_t first = b.seq_lens[s] - n_q;
    for (std::int32_t i = 0; i < n_q; ++i) {
      const auto t = static_cast<std::size_t>(b.qo_indptr[s] + i);
      const std::int32_t pos = first + i;
      layout.positions[t] = pos;
      layout.kv_slots[t] = b.page_indices[b.page_indptr[s] + pos / kKvPageSize] * kKvPageSize + pos % kKvPageSize;
      max_pos = std::max(max_pos, pos);
    }
    add_to_group(n_q == 1 ? layout.decode : layout.prefill, b, s);
  }
  if (!rope || rope->n_positions() <= max_pos) rope = pal::rope_table(model->config.rope, max_pos + 1);
  // Each adapter's logit rows: the positions in logit_rows of the token rows it applies to.
  layout.lora.assign(b.loras.begin(), b.loras.end());
  std::vector<char> uses(n_tokens);
  for (LoraGroup& g : layout.lora) {
    std::fill(uses.begin(), uses.end(), 0);
    for (std::int32_t r : g.rows) uses[static_cast<std::size_t>(r)] = 1;
    g.logit_rows.clear();
    for (std::size_t i = 0; i < b.logit_rows.size(); ++i) {
      if (uses[static_cast<std::size_t>(b.logit_rows[i])] != 0) g.logit_rows.push_back(static_cast<std::int32_t>(i));
    }
  }
}

ModelRunner::ModelRunner(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend)
    : impl_(std::make_unique<Impl>()) {
  if (!model) throw ModelError("[runner] no model");
  if (!backend) throw Error("[runner] no backend");
  impl_->builder = &models::builder_for(model->config.arch);
  impl_->builder->check(*model);
  impl_->weights = backend->upload(model);
  impl_->model = std::move(model);
  impl_->backend = std::move(backend);
}

ModelRunner::ModelRunner(std::shared_ptr<const Model> model, tensor::ThreadPool* pool)
    : ModelRunner(std::move(model), make_cpu_backend(pool)) {}

ModelRunner::~ModelRunner() {
  if (impl_ && impl_->in_flight) {
    try {
      impl_->backend->wait();
    } catch (...) {  // the step's error has no one to go to
    }
  }
}

const Model& ModelRunner::model() const { return *impl_->model; }

Backend& ModelRunner::backend() const { return *impl_->backend; }

double ModelRunner::last_step_seconds() const { return impl_->step_seconds; }

KvCacheConfig ModelRunner::kv_config(std::int32_t n_pages, tensor::DType dtype) const {
  KvCacheConfig k;
  k.n_layer = impl_->model->config.n_layer;
  k.n_kv_head = impl_->model->config.n_kv_head;
  k.head_dim = impl_->model->config.head_dim;
  k.dtype = dtype;
  k.n_pages = n_pages;
  return k;
}

std::unique_ptr<KvStorage> ModelRunner::make_kv_storage(const KvCacheConfig& config) const {
  detail::check_kv_config(config, impl_->model->config);
  return impl_->backend->make_kv_storage(config);
}

void ModelRunner::begin(const ForwardBatch& batch, KvCache& kv, std::span<float> logits, bool logits_to_host) {
  Impl& m = *impl_;
  if (m.in_flight) throw Error("[runner] begin: a batch is already under way (wait() first)");
  detail::check_batch(batch, m.model->config, kv.config(), logits.size());
  if (kv.storage().device() != m.backend->device()) {
    throw Error(fmt::format("[runner] the KV cache is in {} memory, the backend computes on {}",
                            tensor::device_name(kv.storage().device()), tensor::device_name(m.backend->device())));
  }
  if (!batch.loras.empty() && !m.backend->supports_lora()) {
    throw Error(fmt::format("[runner] the {} backend does not apply LoRA adapters", m.backend->name()));
  }
  for (const LoraGroup& g : batch.loras) {
    if (g.adapter == nullptr) throw Error("[runner] a LoRA group without its adapter");
    for (std::int32_t r : g.rows) {
      if (r < 0 || static_cast<std::size_t>(r) >= batch.tokens.size()) {
        throw Error(fmt::format("[runner] LoRA row {} outside the batch's {} tokens", r, batch.tokens.size()));
      }
    }
  }
  if (!logits_to_host && !m.backend->samples_on_device()) {
    throw Error(fmt::format("[runner] the {} backend does not sample on the device: its logits must come to the host",
                            m.backend->name()));
  }
  if (batch.tokens.empty()) return;
  m.lay_out(batch);
  const models::ForwardContext context{
      *m.model, *m.weights, *m.backend, kv.storage(), m.layout, *m.rope, batch.tokens, batch.logit_rows,
      m.backend->output_rows(logits, static_cast<std::int64_t>(batch.logit_rows.size()), m.model->config.n_vocab)};
  const models::ArchitectureBuilder* builder = m.builder;
  double* seconds = &m.step_seconds;
  if (!logits_to_host) m.backend->keep_logits_on_device();
  m.backend->begin([builder, context, seconds] {
    const auto t0 = std::chrono::steady_clock::now();
    builder->forward(context);
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  m.in_flight = true;
}

void ModelRunner::wait() {
  Impl& m = *impl_;
  if (!m.in_flight) return;
  m.in_flight = false;
  try {
    m.backend->wait();
  } catch (const tensor::Error& e) {  // kernels and pal: the batch checks should make this unreachable
    throw Error(fmt::format("[runner] forward pass failed: {}", e.what()));
  }
}

void ModelRunner::forward(const ForwardBatch& batch, KvCache& kv, std::span<float> logits) {
  begin(batch, kv, logits);
  wait();
}

}  // namespace pie
