// The device a model runs on, as the forward pass sees it: where the step's activations and the KV pages
// live, and the operations a decoder block is built from. The architecture builders (pie/src/models/, one
// file per architecture) call these operations and nothing else; each backend implements them once: the
// CPU backend over kernels/ and pal/ on a thread pool (make_cpu_backend), CUDA over its kernels.
//
// A forward pass is one unit of device work: begin() starts the builder's calls and returns while the
// device works (the CPU backend runs them on its own thread, so the caller's threads stay free for the
// grammar masks); wait() returns once they are done and the logits are in host memory.
//
// Batch invariance: every operation computes each row from that row alone (and attention each query row
// from its own sequence), in an order that depends on the row's length only, so a token's logits are
// bit-identical whatever else the step holds. The CUDA backend's tensor-core products of many tokens trade
// this for speed unless CudaOptions::batch_invariant asks to keep it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pal/attention.h"
#include "pal/rope.h"
#include "pie/device_sampling.h"
#include "pie/kv_storage.h"
#include "pie/model.h"

namespace tensor {
class ThreadPool;
}

namespace pie {

// A dense row-major f32 matrix in the backend's memory: [n_rows, n_cols], rows n_cols floats apart.
// A step's activations (one row per token) are these.
struct Rows {
  float* data = nullptr;
  std::int64_t n_rows = 0;
  std::int64_t n_cols = 0;
  float* row(std::int64_t r) const { return data + r * n_cols; }
  // The same memory as [n_rows * n_cols / cols, cols] (per-head views of [tokens, heads * head_dim]).
  Rows reshaped(std::int64_t cols) const { return {data, n_rows * n_cols / cols, cols}; }
};

// Which projection of the model a product computes; adapters (LoRA) name the projections they modify
// by site and layer, and a backend may fuse them into the product.
enum class ProjectionSite : std::uint8_t { q, k, v, o, gate, up, down, output };

struct LoraAdapter;  // pie/lora.h

// One adapter of a step and the rows that use it (a row may be in several groups: stacked adapters).
// The backend adds scale * pair.scale * (x A^T) B^T to those rows of each projection the adapter has a
// pair for, rows grouped by adapter (shrink, then expand into the output, as Punica's SGMV does).
struct LoraGroup {
  const LoraAdapter* adapter = nullptr;  // fitted to the model (fit_lora_adapter)
  float scale = 1.0f;                    // the request's
  std::vector<std::int32_t> rows;        // the step's token rows using it, ascending
  std::vector<std::int32_t> logit_rows;  // the same as indices into the logit rows (the output projection)
};

struct Projection {
  ProjectionSite site = ProjectionSite::q;
  std::int32_t layer = -1;  // -1 for the output projection
  const Weight* weight = nullptr;  // [n_out, n_in]
  Rows out;                        // [n_tokens, n_out]
  std::span<const LoraGroup> lora; // the adapters of the step (empty: none)
};

// The sequences of a step as attention reads them: one group of decode rows (one query token per
// sequence) or of prefill chunks (several), in pal's layout. Host memory; the runner fills it.
struct AttentionGroup {
  std::vector<std::int32_t> page_indptr{0};  // [n_seqs + 1]
  std::vector<std::int32_t> page_indices;
  std::vector<std::int32_t> seq_lens;        // [n_seqs]
  std::vector<std::int32_t> qo_indptr{0};    // [n_seqs + 1]: rows of the gathered queries
  std::vector<std::int32_t> rows;            // the step's row (token) index of each gathered query
  bool empty() const { return seq_lens.empty(); }
};

// Where each of the step's tokens goes: its position and KV slot, and the attention groups.
struct StepLayout {
  std::vector<std::int32_t> positions;  // [n_tokens]
  std::vector<std::int32_t> kv_slots;   // [n_tokens]: page * kKvPageSize + slot of its K/V
  AttentionGroup decode, prefill;
  std::vector<LoraGroup> lora;          // the step's adapters (empty: none)
  std::int64_t n_tokens() const { return static_cast<std::int64_t>(positions.size()); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual tensor::Device device() const = 0;
  // Whether project() applies Projection::lora (the runner refuses a batch with adapters otherwise).
  virtual bool supports_lora() const { return false; }
  // Places a fitted adapter's pairs where project() reads them (device memory on a GPU) ahead of its first
  // step, so that the step does not pay for it; without this, project() places it at first use. May be
  // called from any thread, a step under way or not. Throws pie::Error when it cannot be placed.
  virtual void prepare_lora(const LoraAdapter& adapter) { (void)adapter; }
  // Drops the backend's copy of an adapter's pairs, if it keeps one (a later step naming it places it again).
  virtual void release_lora(const LoraAdapter& adapter) { (void)adapter; }

  // The model's weights resident in the backend's memory for as long as the returned pointer lives: the
  // model's own tensors for the CPU backend, device copies on a GPU. Throws pie::Error when they cannot
  // be placed there.
  virtual std::shared_ptr<const ModelWeights> upload(std::shared_ptr<const Model> model) = 0;
  // KV pages in the backend's memory. Throws pie::Error on a bad config or when memory cannot be had.
  virtual std::unique_ptr<KvStorage> make_kv_storage(const KvCacheConfig& config) = 0;

  // Scratch activations: slot `slot` (a small integer the builder chooses) as [n_rows, n_cols], reused
  // from step to step (grown, never shrunk). Contents are undefined until written.
  virtual Rows scratch(int slot, std::int64_t n_rows, std::int64_t n_cols) = 0;
  // Host memory the backend's results can be read from after wait(): `host` itself when the backend
  // computes in host memory, else a device buffer copied to `host` at wait().
  virtual Rows output_rows(std::span<float> host, std::int64_t n_rows, std::int64_t n_cols) = 0;

  // out[t] = table[tokens[t]] (any weight type), tokens < table.n_out.
  virtual void embed(const Weight& table, std::span<const std::int32_t> tokens, const Rows& out) = 0;
  // out[r] = x[r] / rms(x[r]) * weight (weight: f32 of n_cols); out may be x.
  virtual void rms_norm(const Rows& x, const Weight& weight, float eps, const Rows& out) = 0;
  // acc += x, then out = rms_norm(acc) (a residual add and the next block's norm): add() then rms_norm()
  // unless the backend does both in one pass. out may not be x.
  virtual void add_rms_norm(const Rows& acc, const Rows& x, const Weight& weight, float eps, const Rows& out) {
    add(acc, x);
    rms_norm(acc, weight, eps, out);
  }
  // Every projection of `in` (all [n_rows] of them) in one call: outs[i].out = in W_i^T, plus the
  // low-rank terms of outs[i].lora's adapters for their rows.
  virtual void project(const Rows& in, std::span<const Projection> outs) = 0;
  // x[r] += bias (f32 of n_cols) for every row.
  virtual void add_bias(const Rows& x, const Weight& bias) = 0;
  // acc += x, element-wise.
  virtual void add(const Rows& acc, const Rows& x) = 0;
  // gate = silu(gate) * up, element-wise (SwiGLU).
  virtual void swiglu(const Rows& gate, const Rows& up) = 0;
  // RoPE on the heads of q and k at the step's positions, then k and v written to the KV pages of
  // `layer` at the step's slots.
  virtual void rope_append(const StepLayout& layout, const pal::RopeTable& rope, const Rows& q, const Rows& k,
                           const Rows& v, KvStorage& kv, std::int32_t layer) = 0;
  // Paged attention of every query row of q ([n_tokens, n_heads * head_dim]) over the KV pages of
  // `layer`, into out (same shape).
  virtual void attention(const StepLayout& layout, const pal::AttentionParams& params, const Rows& q,
                         KvStorage& kv, std::int32_t layer, const Rows& out) = 0;
  // out[i] = x[rows[i]].
  virtual void gather_rows(const Rows& x, std::span<const std::int32_t> rows, const Rows& out) = 0;
  // x = cap * tanh(x / cap), element-wise.
  virtual void soft_cap(const Rows& x, float cap) = 0;

  // Runs `step` (a forward pass's calls of the operations above) as one unit of device work: returns once
  // it is under way. One at a time: begin() after begin() without wait() throws pie::Error.
  virtual void begin(std::function<void()> step) = 0;
  // Returns when the step begun is done and its output rows are in host memory; rethrows what the step
  // threw. No effect without a step begun.
  virtual void wait() = 0;

  // Sampling where the logits are (device_sampling.h). Whether sample_rows() is implemented.
  virtual bool samples_on_device() const { return false; }
  // The logits of the next step begun stay in the backend's memory: its wait() leaves the host rows
  // untouched (nothing is copied), and sample_rows() reads them. Holds for that one step.
  virtual void keep_logits_on_device() {}
  // Samples rows of the last step's output rows (after its wait(), before the next begin()): out[i] for
  // rows[i]. Throws pie::Error when the backend has no such rows or cannot sample (a device fault);
  // a row's own failure (a NaN logit) is its result's status.
  virtual void sample_rows(std::span<const DeviceSampleRow> rows, std::span<DeviceSampleResult> out);
};

// Options of the CUDA backend.
struct CudaOptions {
  // Products of many tokens (prefill chunks, large batches) run on tensor cores through cuBLAS, whose
  // order of summation follows the product's shape: a token's logits then move (within rounding) with
  // what else the step holds. true keeps the backend's own kernels at every size: a token's logits are
  // bit-identical whatever the batch (docs/architecture.md, "Batch invariance"), at their slower speed.
  bool batch_invariant = false;
  // The fewest tokens a product sends to cuBLAS (0: the measured defaults of gemm.cpp).
  std::int32_t gemm_min_tokens = 0;
  // The bytes of a slab of quantized rows expanded to f16 for cuBLAS (0: 128 MiB).
  std::size_t gemm_slab_bytes = 0;
  // At most this many parts a tensor-core product's sum is cut into, as many as its output tiles
  // leave multiprocessors idle (0 or 1: never cut, the default; measured slower in the engine).
  std::int32_t gemm_splits = 0;
  // q8_0 products of 32-64 tokens on int8 tensor cores, their activations rounded to 8 bits as the matvec
  // kernels round them (mmq_ops.cu); false sends them to cuBLAS with f16 activations, as the other block
  // types. ORCHARD_CUDA_MMQ=0 turns them off too.
  bool int8_products = true;
};

// The CUDA backend on device `ordinal`: weights in device memory in their file type (f32, f16, bf16, q8_0,
// q4_0, q4_1, q4_K, q5_K, q6_K), f16 KV pages in device memory, the step's kernels queued on a stream of its
// own by begin() (which returns once they are queued), the logits copied back by wait(). Throws pie::Error
// saying why when CUDA cannot be used here (no build support, no driver, no device).
std::unique_ptr<Backend> make_cuda_backend(int ordinal = 0, const CudaOptions& options = {});

// Which device a forward pass runs on, as asked (`--device`): automatic takes CUDA when a usable GPU is
// present.
enum class DeviceRequest : std::uint8_t { automatic, cpu, cuda };
// "auto", "cpu", "cuda" -> the request; throws pie::Error naming the value otherwise.
DeviceRequest parse_device_request(std::string_view text);
struct DeviceChoice {
  tensor::Device device = tensor::Device::cpu;
  std::string reason;  // why, for the log: "asked for", "a usable GPU: NVIDIA H100 ...", "no GPU: ..."
};
// Resolves a request. Throws pie::Error (the reason) when cuda is asked for and cannot be used.
DeviceChoice choose_device(DeviceRequest request);
// The backend of a choice: make_cuda_backend(0, cuda) or make_cpu_backend(n_threads).
std::unique_ptr<Backend> make_backend(tensor::Device device, std::int32_t n_threads, const CudaOptions& cuda = {});

// `backend` itself, or, when ORCHARD_INJECT_STEP_FAULTS names steps ("3" or "3,7": counted from 1, in the
// order begin() is called), a wrapper whose wait() of those steps throws pie::Error as a device fault inside
// the step would: a test hook for the handling of faults (the engine wraps its backend with it). Throws
// pie::Error naming the variable when its value is malformed.
std::unique_ptr<Backend> with_injected_faults(std::unique_ptr<Backend> backend);

// The CPU backend: kernels/ and pal/ (AVX-512 / AVX2 where the CPU has them) on a pool of n_threads
// (0: every core), each step run by a thread of its own. Throws pie::Error on a negative n_threads.
std::unique_ptr<Backend> make_cpu_backend(std::int32_t n_threads);
// The same on a pool the caller owns and keeps alive (nullptr: one thread computes everything).
std::unique_ptr<Backend> make_cpu_backend(tensor::ThreadPool* pool);

}  // namespace pie
