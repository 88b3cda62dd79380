// LoRA on the CUDA backend: adapters' pairs (A and B as the adapter holds them) copied to device memory once (on attach, or at their first
// step), kept there least-recently-used first under a byte budget, and the step's low-rank terms added to
// each projection by lora_ops.cu's shrink and expand (rows grouped by adapter, any rank, no padding).
// Private to the CUDA backend and its tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "pie/backend.h"
#include "tensor/cuda/memory_pool.h"
#include "tensor/cuda/stream.h"

namespace pie::cuda {

// Mirrors of lora_ops.cu's descriptors.
struct LoraPairDesc {
  const float* a = nullptr;  // [rank, n_in]
  const float* b = nullptr;  // [n_out, rank]
  std::int32_t rank = 0;      // 0: no pair in this slot
  float scale = 0;
};
struct LoraGroupDesc {
  const LoraPairDesc* pairs = nullptr;  // [(n_layer + 1) * 8]
  float scale = 0;
  std::int32_t unused = 0;
};
static_assert(sizeof(LoraPairDesc) == 24 && sizeof(LoraGroupDesc) == 16);

inline constexpr std::int64_t kLoraTStride = 256;  // LORA_T_STRIDE: floats per shrunk entry

// The slot of (site, layer) in an adapter's descriptor table.
inline std::int32_t lora_slot(ProjectionSite site, std::int32_t layer) {
  return (layer + 1) * 8 + static_cast<std::int32_t>(site);
}

// The kernels' launchers (device pointers; queued on `stream`). Shrink: t[e] = x[entry_row[e]] A^T for
// n_entries entries, max_rank the largest rank among them. Expand: y[r] += the terms of row r's entries
// (row_ptr [n_rows + 1] into row_entries).
void launch_lora_shrink(const float* x, std::int32_t n_in, const std::int32_t* entry_group,
                        const std::int32_t* entry_row, std::int32_t n_entries, std::int32_t max_rank,
                        const LoraGroupDesc* groups, std::int32_t slot, float* t, const tensor::cuda::Stream* stream);
void launch_lora_expand(const float* t, const std::int32_t* row_ptr, const std::int32_t* row_entries,
                        const std::int32_t* entry_group, std::int32_t n_rows, const LoraGroupDesc* groups,
                        std::int32_t slot, std::int32_t n_out, float* y, const tensor::cuda::Stream* stream);

// What the backend lends a step's LoRA work: the step's number, whether its launches are being captured
// into a graph (then nothing may synchronize: placing an adapter or growing a buffer throws
// LoraNotCapturable, and the backend runs the step again with plain launches), and page-locked staging
// of the step's host tables (valid until the step is done, as a captured copy reads them when it runs).
struct LoraStep {
  std::uint64_t id = 0;
  bool capturing = false;
  std::function<const void*(const void*, std::size_t)> stage;
};
struct LoraNotCapturable {};

class CudaLora {
 public:
  // budget_bytes: device memory the resident adapters may take (0: a quarter of the device's memory
  // free when the first adapter is placed). The adapters of one step stay resident together even past it.
  CudaLora(int ordinal, const tensor::cuda::Stream* stream, std::size_t budget_bytes = 0);

  // Places `adapter` (fitted) in device memory unless there already: one allocation, one copy per
  // matrix, no conversion. Throws pie::Error when device memory cannot be had.
  void prepare(const LoraAdapter& adapter);
  // Drops the device copy of `adapter` (a later step places it again); one the step under way reads goes
  // when that step ends.
  void release(const LoraAdapter& adapter);
  // Adds the low-rank terms of p.lora's adapters to p.out for their rows (in: the projection's input).
  // The step's tables are built and uploaded at its first call.
  void apply(const Rows& in, const Projection& p, const LoraStep& step);
  // The step's kernels are done (the backend waited for its stream): its adapters may be evicted again.
  void end_step();

  std::size_t resident_bytes() const;
  std::size_t resident_adapters() const;
  bool resident(const LoraAdapter& adapter) const;

 private:
  struct Resident {
    tensor::cuda::DeviceBuffer weights;  // every pair's A and B
    tensor::cuda::DeviceBuffer pairs;    // the descriptor table
    std::size_t bytes = 0;
    std::uint64_t last_step = 0;  // the last step that read it (never evicted during that step)
    std::uint64_t last_used = 0;  // the clock at its placement or last step: the LRU order
    std::int64_t max_rank = 0;
  };
  // The rows of one kind of projection (the decoder's, or the output head's logit rows) as entries.
  struct Entries {
    std::int32_t n_entries = 0, n_rows = 0;
    const std::int32_t* entry_group = nullptr;  // device
    const std::int32_t* entry_row = nullptr;
    const std::int32_t* row_ptr = nullptr;
    const std::int32_t* row_entries = nullptr;
  };
  Resident& place(const LoraAdapter& adapter);  // mutex held
  bool in_open_step(const Resident& r) const { return step_open_ && r.last_step == step_; }
  void evict_over_budget(std::size_t incoming);  // mutex held
  void build_step(std::span<const LoraGroup> groups, const LoraStep& step);  // mutex held

  int ordinal_;
  const tensor::cuda::Stream* stream_;
  std::size_t budget_ = 0;
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, Resident> resident_;  // by LoraAdapter::uid()
  std::uint64_t clock_ = 0;
  bool step_open_ = false;                   // the step's kernels are queued and not yet waited for
  std::vector<std::uint64_t> released_late_; // released while the open step reads them
  std::uint64_t step_ = 0;                                 // the step the tables below are for
  const LoraGroup* step_groups_ = nullptr;
  std::int32_t step_max_rank_ = 0;
  Entries decoder_, logits_;
  std::vector<std::int32_t> ints_host_;
  std::vector<LoraGroupDesc> groups_host_;
  tensor::cuda::DeviceBuffer ints_, groups_, t_;
};

}  // namespace pie::cuda
