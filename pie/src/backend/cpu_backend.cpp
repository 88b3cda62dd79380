// The CPU backend: each operation is a kernels/ or pal/ call, parallel over rows on the thread pool, in
// host memory (the KV pages in a host KvStorage, the output rows the caller's own buffer). A step runs on
// the backend's step thread, which is the pool's thread 0, so the thread that begins a step is free until
// it waits.
//
// Batch invariance: products go through kernels::matmul over all of the step's rows (a row's dot products
// do not depend on the other rows); row-wise kernels are called per row (their SIMD / tail split depends
// on the row length only); pal's attention visits each query row's keys in fixed 512-key chunks.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernels/lora.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "pal/attention.h"
#include "pal/rope.h"
#include "pie/backend.h"
#include "pie/error.h"
#include "pie/lora.h"
#include "tensor/half.h"
#include "tensor/thread_pool.h"

namespace pie {
namespace {

// Weights a backend repacked at upload into a layout of the CPU's fastest kernels (kernels::WeightLayout),
// by data pointer: shared by the backend and the uploads that own the buffers (either may go first).
class RepackedWeights {
 public:
  void add(const void* data, kernels::WeightLayout layout) {
    std::lock_guard<std::mutex> lock(mutex_);
    layouts_[data] = layout;
  }
  void remove(const void* data) {
    std::lock_guard<std::mutex> lock(mutex_);
    layouts_.erase(data);
  }
  kernels::WeightLayout layout(const void* data) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = layouts_.find(data);
    return it == layouts_.end() ? kernels::WeightLayout::plain : it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const void*, kernels::WeightLayout> layouts_;
};

// An upload: the model's weights, the projections the CPU has faster kernels for in another layout
// repacked into buffers of their own (rows on 64-byte boundaries), the rest viewed where they are.
struct CpuWeights {
  std::shared_ptr<const Model> model;
  ModelWeights weights;
  std::shared_ptr<RepackedWeights> registry;
  std::vector<const void*> repacked;
  CpuWeights() = default;
  CpuWeights(const CpuWeights&) = delete;
  CpuWeights& operator=(const CpuWeights&) = delete;
  ~CpuWeights() {
    for (const void* p : repacked) registry->remove(p);
  }

  void repack(Weight& w) {
    if (w.rank() != 2 || w.data() == nullptr) return;
    const kernels::WeightLayout layout = kernels::preferred_layout(w.dtype());
    if (layout == kernels::WeightLayout::plain) return;
    const std::int64_t n_out = w.dim(0), n_in = w.dim(1);
    const std::size_t stride = kernels::aligned_row_bytes(w.dtype(), n_in);
    tensor::Buffer buffer = tensor::Buffer::allocate(stride * static_cast<std::size_t>(n_out));
    kernels::repack_weights(layout, w.dtype(), w.data(), static_cast<std::size_t>(w.strides().bytes[0]), n_out, n_in,
                            buffer.data(), stride);
    tensor::Strides strides = tensor::contiguous_strides(w.dtype(), w.shape());
    strides.bytes[0] = static_cast<std::int64_t>(stride);
    w = tensor::Tensor(std::move(buffer), 0, w.dtype(), w.shape(), strides);
    registry->add(w.data(), layout);
    repacked.push_back(w.data());
  }
};

// ORCHARD_CPU_REPACK=0 keeps every weight in its file's layout (for comparisons); anything else repacks.
bool repack_enabled() {
  const char* v = std::getenv("ORCHARD_CPU_REPACK");
  return v == nullptr || std::string(v) != "0";
}

kernels::MatmulParams params_of(const Weight& w, const RepackedWeights& repacked) {
  kernels::MatmulParams p;
  p.w_layout = repacked.layout(w.data());
  p.w_type = w.dtype();
  p.w = w.data();
  p.w_row_bytes = static_cast<std::size_t>(w.strides().bytes[0]);
  p.n_out = w.dim(0);
  p.n_in = w.dim(1);
  return p;
}

const float* floats(const Weight& w) { return w.data_as<const float>(); }

// Runs each step on a thread of its own; begin() hands it over, wait() waits for it.
class StepThread {
 public:
  StepThread() : thread_([this] { loop(); }) {}
  ~StepThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void begin(std::function<void()> step) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_ || running_) throw Error("[backend] begin: a step is already under way (wait() first)");
    step_ = std::move(step);
    pending_ = true;
    error_ = nullptr;
    wake_.notify_all();
  }

  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return !pending_ && !running_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait(lock, [this] { return pending_ || stopping_; });
      if (!pending_) return;
      std::function<void()> step = std::move(step_);
      pending_ = false;
      running_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        step();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      running_ = false;
      error_ = error;
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<void()> step_;
  bool pending_ = false, running_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::unique_ptr<tensor::ThreadPool> owned, tensor::ThreadPool* pool)
      : owned_pool_(std::move(owned)), pool_(owned_pool_ ? owned_pool_.get() : pool) {}

  std::string name() const override { return "cpu"; }
  tensor::Device device() const override { return tensor::Device::cpu; }
  bool supports_lora() const override { return true; }

  // Host memory is the CPU's: the model's tensors are used where they are (mapped files, owned buffers),
  // but the layers' projections of a type this CPU's kernels take faster in another layout (q4_1 with
  // AVX-512/VNNI: kernels::preferred_layout), which are repacked into buffers of the upload's (the
  // model's bytes again, once). ORCHARD_CPU_REPACK=0 repacks nothing.
  std::shared_ptr<const ModelWeights> upload(std::shared_ptr<const Model> model) override {
    if (!model) throw Error("[backend] upload: no model");
    if (!repack_enabled_) {
      const ModelWeights* weights = &model->weights;
      return std::shared_ptr<const ModelWeights>(std::move(model), weights);
    }
    auto up = std::make_shared<CpuWeights>();
    up->weights = model->weights;
    up->model = std::move(model);
    up->registry = repacked_;
    for (LayerWeights& l : up->weights.layers) {
      for (Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) up->repack(*w);
    }
    return std::shared_ptr<const ModelWeights>(up, &up->weights);
  }

  std::unique_ptr<KvStorage> make_kv_storage(const KvCacheConfig& config) override {
    return make_host_kv_storage(config);
  }

  Rows scratch(int slot, std::int64_t n_rows, std::int64_t n_cols) override {
    if (slot < 0 || slot > 64) throw Error(fmt::format("[backend] scratch slot {} outside [0, 64]", slot));
    if (static_cast<std::size_t>(slot) >= scratch_.size()) scratch_.resize(static_cast<std::size_t>(slot) + 1);
    std::vector<float>& v = scratch_[static_cast<std::size_t>(slot)];
    const auto n = static_cast<std::size_t>(n_rows * n_cols);
    if (v.size() < n) v.resize(n);
    return {v.data(), n_rows, n_cols};
  }

  Rows output_rows(std::span<float> host, std::int64_t n_rows, std::int64_t n_cols) override {
    if (static_cast<std::int64_t>(host.size()) < n_rows * n_cols) {
      throw Error(fmt::format("[backend] output rows: {} floats for [{}, {}]", host.size(), n_rows, n_cols));
    }
    return {host.data(), n_rows, n_cols};
  }

  void embed(const Weight& table, std::span<const std::int32_t> tokens, const Rows& out) override {
    kernels::EmbeddingParams p;
    p.table_type = table.dtype();
    p.table = table.data();
    p.n_vocab = table.dim(0);
    p.n_embd = table.dim(1);
    for_rows(static_cast<std::int64_t>(tokens.size()), 8, [&](std::int64_t t0, std::int64_t t1) {
      kernels::embedding(p, tokens.data() + t0, t1 - t0, out.row(t0));
    });
  }

  void rms_norm(const Rows& x, const Weight& weight, float eps, const Rows& out) override {
    const std::int64_t n = x.n_cols;
    for_rows(x.n_rows, std::max<std::int64_t>(1, 4096 / n), [&](std::int64_t r0, std::int64_t r1) {
      kernels::NormParams p;
      p.n_rows = r1 - r0;
      p.n = n;
      p.eps = eps;
      kernels::rms_norm(p, x.row(r0), floats(weight), out.row(r0));
    });
  }

  void project(const Rows& in, std::span<const Projection> outs) override {
    base_project(in, outs);
    add_loras(in, outs);
  }

  void base_project(const Rows& in, std::span<const Projection> outs) {
    if (outs.size() == 1) {
      kernels::matmul(params_of(*outs[0].weight, *repacked_), in.data, in.n_rows, outs[0].out.data, pool_);
      return;
    }
    // Several products of one input in one call: the activations converted once, one parallel region.
    if (outs.size() > kMaxProducts) throw Error(fmt::format("[backend] project: {} products", outs.size()));
    std::array<kernels::MatmulParams, kMaxProducts> ps;
    std::array<float*, kMaxProducts> ys{};
    for (std::size_t i = 0; i < outs.size(); ++i) {
      ps[i] = params_of(*outs[i].weight, *repacked_);
      ys[i] = outs[i].out.data;
    }
    kernels::matmul_multi(std::span(ps).first(outs.size()), in.data, in.n_rows, std::span(ys).first(outs.size()),
                          pool_);
  }

  // The low-rank terms of the projections' adapters, each for its rows (Punica's SGMV, on the CPU), for
  // every projection of the call at once: the shrinks (t = x A^T, [rows, rank] per adapter and projection)
  // in one parallel region over tiles of four rows, then the expands (y += scale t B^T) in one over
  // (projection, column chunk), each adapter's rows added in the step's group order. Any rank, no padding;
  // each row's sums run in an order of their own (batch invariance).
  void add_loras(const Rows& in, std::span<const Projection> outs) {
    struct Work {
      const Projection* projection;
      const LoraPair* pair;
      const std::vector<std::int32_t>* rows;
      float scale;
      std::int64_t t_offset;  // into the shrunk activations, [rows, rank]
    };
    std::vector<Work> work;
    std::int64_t n_t = 0;
    for (const Projection& p : outs) {
      for (const LoraGroup& g : p.lora) {
        const LoraPair* pair = g.adapter->pair(p.site, p.layer);
        const std::vector<std::int32_t>& rows = p.site == ProjectionSite::output ? g.logit_rows : g.rows;
        if (pair == nullptr || rows.empty()) continue;
        if (pair->n_in != in.n_cols || pair->n_out != p.out.n_cols) {
          throw Error(fmt::format("[backend] LoRA pair of {} layer {}: [{}, {}] on a [{}, {}] projection",
                                  projection_site_name(p.site), p.layer, pair->n_out, pair->n_in, p.out.n_cols,
                                  in.n_cols));
        }
        work.push_back({&p, pair, &rows, g.scale * pair->scale, n_t});
        n_t += static_cast<std::int64_t>(rows.size()) * pair->rank;
      }
    }
    if (work.empty()) return;
    float* t = scratch(kLoraShrunk, 1, n_t).data;
    // Shrink: one task per (work, tile of four rows).
    constexpr std::int64_t kTile = 4;
    std::vector<std::pair<std::int32_t, std::int32_t>> tasks;
    for (std::size_t w = 0; w < work.size(); ++w) {
      for (std::size_t r = 0; r < work[w].rows->size(); r += kTile) {
        tasks.emplace_back(static_cast<std::int32_t>(w), static_cast<std::int32_t>(r));
      }
    }
    for_rows(static_cast<std::int64_t>(tasks.size()), 1, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const auto [wi, r] = tasks[static_cast<std::size_t>(i)];
        const Work& w = work[static_cast<std::size_t>(wi)];
        kernels::LoraShrinkParams sp;
        sp.n_in = w.pair->n_in;
        sp.rank = w.pair->rank;
        sp.a = w.pair->a.data();
        sp.x = in.data;
        sp.x_stride = in.n_cols;
        sp.rows = {w.rows->data() + r, std::min<std::int64_t>(kTile, static_cast<std::int64_t>(w.rows->size()) - r),
                   in.n_rows};
        kernels::lora_shrink(sp, t + w.t_offset + static_cast<std::int64_t>(r) * w.pair->rank);
      }
    });
    // Expand: one task per (projection, chunk of columns), its adapters in the step's order.
    constexpr std::int64_t kChunk = 256;
    tasks.clear();
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const std::int64_t n_chunks = (outs[i].out.n_cols + kChunk - 1) / kChunk;
      const bool any = std::any_of(work.begin(), work.end(), [&](const Work& w) { return w.projection == &outs[i]; });
      for (std::int64_t c = 0; any && c < n_chunks; ++c) {
        tasks.emplace_back(static_cast<std::int32_t>(i), static_cast<std::int32_t>(c));
      }
    }
    for_rows(static_cast<std::int64_t>(tasks.size()), 1, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const auto [pi, c] = tasks[static_cast<std::size_t>(i)];
        const Projection& p = outs[static_cast<std::size_t>(pi)];
        for (const Work& w : work) {
          if (w.projection != &p) continue;
          kernels::LoraExpandParams ep;
          ep.n_out = w.pair->n_out;
          ep.rank = w.pair->rank;
          ep.b = w.pair->b.data();
          ep.t = t + w.t_offset;
          ep.scale = w.scale;
          ep.col_begin = c * kChunk;
          ep.col_end = std::min(ep.n_out, (c + 1) * kChunk);
          ep.y = p.out.data;
          ep.y_stride = p.out.n_cols;
          ep.rows = {w.rows->data(), static_cast<std::int64_t>(w.rows->size()), p.out.n_rows};
          kernels::lora_expand(ep);
        }
      }
    });
  }

  void add_bias(const Rows& x, const Weight& bias) override {
    for (std::int64_t r = 0; r < x.n_rows; ++r) kernels::add({x.n_cols}, x.row(r), floats(bias), x.row(r));
  }

  void add(const Rows& acc, const Rows& x) override {
    for_rows(acc.n_rows, 16, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) kernels::add({acc.n_cols}, acc.row(t), x.row(t), acc.row(t));
    });
  }

  void swiglu(const Rows& gate, const Rows& up) override {
    for_rows(gate.n_rows, 4, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) kernels::swiglu({gate.n_cols}, gate.row(t), up.row(t), gate.row(t));
    });
  }

  void rope_append(const StepLayout& layout, const pal::RopeTable& rope, const Rows& q, const Rows& k, const Rows& v,
                   KvStorage& kv, std::int32_t layer) override {
    const std::int64_t head_dim = kv.config().head_dim;
    pal::rope(rope, layout.positions.data(), q.data, q.n_rows, static_cast<std::int32_t>(q.n_cols / head_dim), pool_);
    pal::rope(rope, layout.positions.data(), k.data, k.n_rows, static_cast<std::int32_t>(k.n_cols / head_dim), pool_);
    const std::int64_t row = k.n_cols;
    const bool f16 = kv.config().dtype == tensor::DType::f16;
    void* kp = kv.k_pool(layer);
    void* vp = kv.v_pool(layer);
    for_rows(k.n_rows, 16, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t off = static_cast<std::int64_t>(layout.kv_slots[static_cast<std::size_t>(t)]) * row;
        const float* ks = k.row(t);
        const float* vs = v.row(t);
        if (f16) {
          auto* kd = static_cast<std::uint16_t*>(kp) + off;
          auto* vd = static_cast<std::uint16_t*>(vp) + off;
          for (std::int64_t i = 0; i < row; ++i) {
            kd[i] = tensor::f32_to_f16(ks[i]);
            vd[i] = tensor::f32_to_f16(vs[i]);
          }
        } else {
          std::memcpy(static_cast<float*>(kp) + off, ks, sizeof(float) * row);
          std::memcpy(static_cast<float*>(vp) + off, vs, sizeof(float) * row);
        }
      }
    });
  }

  // Decode rows (sequences with one query token) through decode_attention, the others through
  // prefill_attention, gathered into contiguous queries and scattered back.
  void attention(const StepLayout& layout, const pal::AttentionParams& params, const Rows& q, KvStorage& kv,
                 std::int32_t layer, const Rows& out) override {
    const std::int64_t row = q.n_cols;
    for (const AttentionGroup* g : {&layout.decode, &layout.prefill}) {
      if (g->empty()) continue;
      const auto n_rows = static_cast<std::int64_t>(g->rows.size());
      const Rows gq = scratch(kGatheredQ, n_rows, row);
      const Rows go = scratch(kGatheredOut, n_rows, row);
      for (std::int64_t i = 0; i < n_rows; ++i) {
        std::memcpy(gq.row(i), q.row(g->rows[static_cast<std::size_t>(i)]), sizeof(float) * row);
      }
      pal::PagedKv p;
      p.k_pages = kv.k_pool(layer);
      p.v_pages = kv.v_pool(layer);
      p.dtype = kv.config().dtype;
      p.n_pages = kv.config().n_pages;
      p.n_kv_heads = kv.config().n_kv_head;
      p.head_dim = kv.config().head_dim;
      p.n_seqs = static_cast<std::int32_t>(g->seq_lens.size());
      p.page_indptr = g->page_indptr.data();
      p.page_indices = g->page_indices.data();
      p.seq_lens = g->seq_lens.data();
      if (g == &layout.decode) {
        pal::decode_attention(p, params, {gq.data, go.data}, pool_);
      } else {
        pal::prefill_attention(p, params, {g->qo_indptr.data(), gq.data, go.data}, pool_);
      }
      for (std::int64_t i = 0; i < n_rows; ++i) {
        std::memcpy(out.row(g->rows[static_cast<std::size_t>(i)]), go.row(i), sizeof(float) * row);
      }
    }
  }

  void gather_rows(const Rows& x, std::span<const std::int32_t> rows, const Rows& out) override {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(out.row(static_cast<std::int64_t>(i)), x.row(rows[i]), sizeof(float) * x.n_cols);
    }
  }

  void soft_cap(const Rows& x, float cap) override {
    const std::int64_t n = x.n_rows * x.n_cols;
    for (std::int64_t i = 0; i < n; ++i) x.data[i] = cap * std::tanh(x.data[i] / cap);
  }

  void begin(std::function<void()> step) override { step_thread_.begin(std::move(step)); }
  void wait() override { step_thread_.wait(); }

 private:
  static constexpr std::size_t kMaxProducts = 8;  // kernels::matmul_multi's bound
  // Scratch slots of the backend's own (the builders use the low ones).
  static constexpr int kLoraShrunk = 62, kGatheredQ = 63, kGatheredOut = 64;

  // fn(begin, end) over rows, on the pool when there are enough of them.
  void for_rows(std::int64_t n, std::int64_t grain, tensor::FunctionRef<void(std::int64_t, std::int64_t)> fn) {
    if (pool_ != nullptr && pool_->n_threads() > 1 && n > grain) {
      pool_->parallel_for(n, fn, grain);
    } else if (n > 0) {
      fn(0, n);
    }
  }

  std::unique_ptr<tensor::ThreadPool> owned_pool_;
  tensor::ThreadPool* pool_;
  bool repack_enabled_ = repack_enabled();
  std::shared_ptr<RepackedWeights> repacked_ = std::make_shared<RepackedWeights>();
  std::vector<std::vector<float>> scratch_;
  StepThread step_thread_;  // last: stopped (joined) before the pool and scratch go
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::int32_t n_threads) {
  if (n_threads < 0) throw Error(fmt::format("[backend] n_threads must be >= 0, got {}", n_threads));
  return std::make_unique<CpuBackend>(std::make_unique<tensor::ThreadPool>(n_threads), nullptr);
}

std::unique_ptr<Backend> make_cpu_backend(tensor::ThreadPool* pool) {
  return std::make_unique<CpuBackend>(nullptr, pool);
}

}  // namespace pie
