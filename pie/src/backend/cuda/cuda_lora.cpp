// LoRA on the CUDA backend (cuda_lora.h): residency of adapters in device memory and the step's tables.
#include "cuda_lora.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <string>

#include "cuda_sources.h"
#include "pie/error.h"
#include "pie/lora.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/jit.h"

namespace pie::cuda {
namespace {

namespace tc = tensor::cuda;

constexpr unsigned kShrinkWarps = 4;
constexpr unsigned kExpandThreads = 256;

const tc::Kernel& lora_kernel(const std::string& entry) {
  static std::mutex mutex;
  static std::map<std::string, tc::Kernel> kernels;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = kernels.find(entry); it != kernels.end()) return it->second;
  const tc::EmbeddedSource& src = embedded_source("lora_ops.cu");
  const tc::Module& module = tc::load_module(src.name, src.text, {});
  return kernels.emplace(entry, module.kernel(entry.c_str())).first->second;
}

// Floats rounded up to 16 bytes, so every matrix of an adapter's allocation starts 16-byte aligned (the
// shrink's float4 loads).
std::size_t padded(std::size_t n) { return (n + 3) & ~std::size_t{3}; }

}  // namespace

void launch_lora_shrink(const float* x, std::int32_t n_in, const std::int32_t* entry_group,
                        const std::int32_t* entry_row, std::int32_t n_entries, std::int32_t max_rank,
                        const LoraGroupDesc* groups, std::int32_t slot, float* t, const tc::Stream* stream) {
  if (n_entries <= 0 || max_rank <= 0) return;
  int n = n_in, s = slot;
  void* args[] = {&x, &n, &entry_group, &entry_row, &groups, &s, &t};
  const tc::Dim3 grid{static_cast<unsigned>(n_entries), (static_cast<unsigned>(max_rank) + kShrinkWarps - 1) / kShrinkWarps, 1};
  lora_kernel("lora_shrink").launch(grid, {kShrinkWarps * 32, 1, 1}, 0, stream, args);
}

void launch_lora_expand(const float* t, const std::int32_t* row_ptr, const std::int32_t* row_entries,
                        const std::int32_t* entry_group, std::int32_t n_rows, const LoraGroupDesc* groups,
                        std::int32_t slot, std::int32_t n_out, float* y, const tc::Stream* stream) {
  if (n_rows <= 0 || n_out <= 0) return;
  int s = slot, n = n_out;
  void* args[] = {&t, &row_ptr, &row_entries, &entry_group, &groups, &s, &n, &y};
  const tc::Dim3 grid{(static_cast<unsigned>(n_out) + kExpandThreads - 1) / kExpandThreads, static_cast<unsigned>(n_rows), 1};
  lora_kernel("lora_expand").launch(grid, {kExpandThreads, 1, 1}, 0, stream, args);
}

CudaLora::CudaLora(int ordinal, const tc::Stream* stream, std::size_t budget_bytes)
    : ordinal_(ordinal), stream_(stream), budget_(budget_bytes) {}

void CudaLora::prepare(const LoraAdapter& adapter) {
  std::lock_guard<std::mutex> lock(mutex_);
  tc::make_current(ordinal_);
  place(adapter);
}

void CudaLora::release(const LoraAdapter& adapter) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = resident_.find(adapter.uid());
  if (it == resident_.end()) return;
  if (in_open_step(it->second)) {
    released_late_.push_back(adapter.uid());
    return;
  }
  resident_.erase(it);
}

void CudaLora::end_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  step_open_ = false;
  for (std::uint64_t uid : released_late_) resident_.erase(uid);
  released_late_.clear();
}

std::size_t CudaLora::resident_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const auto& [id, r] : resident_) n += r.bytes;
  return n;
}

bool CudaLora::resident(const LoraAdapter& adapter) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return resident_.count(adapter.uid()) != 0;
}

std::size_t CudaLora::resident_adapters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return resident_.size();
}

CudaLora::Resident& CudaLora::place(const LoraAdapter& adapter) {
  if (auto it = resident_.find(adapter.uid()); it != resident_.end()) {
    it->second.last_used = ++clock_;
    return it->second;
  }
  if (adapter.n_slots() == 0) {
    throw Error(fmt::format("[backend:cuda] LoRA adapter '{}' is not fitted to a model", adapter.name));
  }
  std::size_t floats = 0;
  for (const LoraPair& p : adapter.pairs) {
    if (p.rank < 1 || p.rank > kLoraTStride) {
      throw Error(fmt::format("[backend:cuda] LoRA adapter '{}': {} layer {} has rank {}; ranks are 1 to {}",
                              adapter.name, projection_site_name(p.site), p.layer, p.rank, kLoraTStride));
    }
    floats += padded(p.a.size()) + padded(p.b.size());
  }
  const std::size_t bytes = floats * sizeof(float);
  if (budget_ == 0) budget_ = std::max<std::size_t>(tc::memory_info(ordinal_).free / 4, 1);
  evict_over_budget(bytes);
  const tc::MemoryInfo mem = tc::memory_info(ordinal_);
  if (bytes > mem.free) {
    throw Error(fmt::format("[backend:cuda] LoRA adapter '{}' needs {} bytes of GPU memory; {} bytes are free",
                            adapter.name, bytes, mem.free));
  }
  Resident r;
  r.weights = tc::MemoryPool::global().allocate(std::max<std::size_t>(bytes, 16));
  std::vector<LoraPairDesc> descs(static_cast<std::size_t>(adapter.n_slots()));
  std::size_t offset = 0;  // floats
  for (const LoraPair& p : adapter.pairs) {
    LoraPairDesc& d = descs[static_cast<std::size_t>(lora_slot(p.site, p.layer))];
    d.a = r.weights.as<const float>() + offset;
    r.weights.copy_from_host(p.a.data(), p.a.size() * sizeof(float), offset * sizeof(float), stream_);
    offset += padded(p.a.size());
    d.b = r.weights.as<const float>() + offset;
    r.weights.copy_from_host(p.b.data(), p.b.size() * sizeof(float), offset * sizeof(float), stream_);
    offset += padded(p.b.size());
    d.rank = static_cast<std::int32_t>(p.rank);
    d.scale = p.scale;
    r.max_rank = std::max(r.max_rank, p.rank);
  }
  r.pairs = tc::MemoryPool::global().allocate(descs.size() * sizeof(LoraPairDesc));
  r.pairs.copy_from_host(descs.data(), descs.size() * sizeof(LoraPairDesc), 0, stream_);
  // The copies read pageable host memory: the stream is waited for so that nothing queued later can see
  // the allocation before its bytes (and the descriptors' host vector may go).
  stream_->synchronize();
  r.bytes = bytes;
  r.last_used = ++clock_;
  return resident_.emplace(adapter.uid(), std::move(r)).first->second;
}

void CudaLora::evict_over_budget(std::size_t incoming) {
  std::size_t total = incoming;
  for (const auto& [id, r] : resident_) total += r.bytes;
  while (total > budget_) {
    // The least recently used adapter that the current step does not read.
    auto victim = resident_.end();
    for (auto it = resident_.begin(); it != resident_.end(); ++it) {
      if (in_open_step(it->second)) continue;
      if (victim == resident_.end() || it->second.last_used < victim->second.last_used) victim = it;
    }
    if (victim == resident_.end()) return;  // every one is the step's: kept past the budget
    total -= victim->second.bytes;
    resident_.erase(victim);
  }
}

void CudaLora::build_step(std::span<const LoraGroup> groups, const LoraStep& step) {
  // Placing an adapter synchronizes: not inside a graph's capture (the step runs again with plain launches).
  if (step.capturing) {
    for (const LoraGroup& g : groups) {
      if (resident_.count(g.adapter->uid()) == 0) throw LoraNotCapturable{};
    }
  }
  step_ = step.id;
  step_open_ = true;
  step_groups_ = groups.data();
  groups_host_.clear();
  step_max_rank_ = 0;
  // Residency first (marking each adapter as the step's, so that placing the next never evicts it).
  for (const LoraGroup& g : groups) {
    Resident& r = place(*g.adapter);
    r.last_step = step.id;
    step_max_rank_ = std::max(step_max_rank_, static_cast<std::int32_t>(r.max_rank));
  }
  for (const LoraGroup& g : groups) {
    groups_host_.push_back({resident_.at(g.adapter->uid()).pairs.as<const LoraPairDesc>(), g.scale, 0});
  }
  // Entries (group, row) in group order for the decoder's rows and for the logit rows, then for each row
  // the entries that name it (CSR), all in one integer upload.
  ints_host_.clear();
  std::array<std::size_t, 4> offsets[2];
  std::int32_t n_entries[2] = {0, 0}, n_rows[2] = {0, 0};
  for (int kind = 0; kind < 2; ++kind) {
    auto rows_of = [&](const LoraGroup& g) -> const std::vector<std::int32_t>& { return kind == 0 ? g.rows : g.logit_rows; };
    std::vector<std::int32_t> group_of, row_of;
    std::int32_t max_row = -1;
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      for (std::int32_t r : rows_of(groups[gi])) {
        group_of.push_back(static_cast<std::int32_t>(gi));
        row_of.push_back(r);
        max_row = std::max(max_row, r);
      }
    }
    const auto n = static_cast<std::int32_t>(group_of.size());
    n_entries[kind] = n;
    n_rows[kind] = max_row + 1;
    std::vector<std::int32_t> row_ptr(static_cast<std::size_t>(max_row) + 2, 0), row_entries(static_cast<std::size_t>(n));
    for (std::int32_t r : row_of) ++row_ptr[static_cast<std::size_t>(r) + 1];
    for (std::size_t i = 1; i < row_ptr.size(); ++i) row_ptr[i] += row_ptr[i - 1];
    std::vector<std::int32_t> fill(row_ptr.begin(), row_ptr.end() - 1);
    for (std::int32_t e = 0; e < n; ++e) row_entries[static_cast<std::size_t>(fill[static_cast<std::size_t>(row_of[static_cast<std::size_t>(e)])]++)] = e;
    offsets[kind] = {ints_host_.size(), 0, 0, 0};
    ints_host_.insert(ints_host_.end(), group_of.begin(), group_of.end());
    offsets[kind][1] = ints_host_.size();
    ints_host_.insert(ints_host_.end(), row_of.begin(), row_of.end());
    offsets[kind][2] = ints_host_.size();
    ints_host_.insert(ints_host_.end(), row_ptr.begin(), row_ptr.end());
    offsets[kind][3] = ints_host_.size();
    ints_host_.insert(ints_host_.end(), row_entries.begin(), row_entries.end());
  }
  auto grow = [&](tc::DeviceBuffer& b, std::size_t bytes) {
    if (b.bytes() < bytes) {
      if (step.capturing) throw LoraNotCapturable{};
      if (!b.empty()) stream_->synchronize();
      b = tc::MemoryPool::global().allocate(std::max<std::size_t>(bytes, 256));
    }
  };
  grow(ints_, ints_host_.size() * sizeof(std::int32_t));
  grow(groups_, groups_host_.size() * sizeof(LoraGroupDesc));
  grow(t_, static_cast<std::size_t>(std::max(n_entries[0], n_entries[1])) * kLoraTStride * sizeof(float));
  const std::size_t int_bytes = ints_host_.size() * sizeof(std::int32_t);
  const std::size_t group_bytes = groups_host_.size() * sizeof(LoraGroupDesc);
  if (int_bytes > 0) ints_.copy_from_host(step.stage(ints_host_.data(), int_bytes), int_bytes, 0, stream_);
  if (group_bytes > 0) groups_.copy_from_host(step.stage(groups_host_.data(), group_bytes), group_bytes, 0, stream_);
  for (int kind = 0; kind < 2; ++kind) {
    Entries& e = kind == 0 ? decoder_ : logits_;
    const std::int32_t* base = ints_.as<const std::int32_t>();
    e.n_entries = n_entries[kind];
    e.n_rows = n_rows[kind];
    e.entry_group = base + offsets[kind][0];
    e.entry_row = base + offsets[kind][1];
    e.row_ptr = base + offsets[kind][2];
    e.row_entries = base + offsets[kind][3];
  }
}

void CudaLora::apply(const Rows& in, const Projection& p, const LoraStep& step) {
  if (p.lora.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (step.id != step_ || p.lora.data() != step_groups_) build_step(p.lora, step);
  const Entries& e = p.site == ProjectionSite::output ? logits_ : decoder_;
  if (e.n_entries == 0) return;
  if (e.n_rows > p.out.n_rows) {
    throw Error(fmt::format("[backend:cuda] LoRA rows up to {} on a projection of {} rows", e.n_rows - 1, p.out.n_rows));
  }
  // Every pair of the step's adapters at this slot must fit the projection (fit_lora_adapter checked it
  // against the model; a stale adapter of another model is caught here).
  for (const LoraGroup& g : p.lora) {
    const LoraPair* pair = g.adapter->pair(p.site, p.layer);
    if (pair != nullptr && (pair->n_in != in.n_cols || pair->n_out != p.out.n_cols)) {
      throw Error(fmt::format("[backend:cuda] LoRA pair of {} layer {}: [{}, {}] on a [{}, {}] projection",
                              projection_site_name(p.site), p.layer, pair->n_out, pair->n_in, p.out.n_cols, in.n_cols));
    }
  }
  const std::int32_t slot = lora_slot(p.site, p.layer);
  const auto* groups = groups_.as<const LoraGroupDesc>();
  float* t = t_.as<float>();
  launch_lora_shrink(in.data, static_cast<std::int32_t>(in.n_cols), e.entry_group, e.entry_row, e.n_entries,
                     step_max_rank_, groups, slot, t, stream_);
  launch_lora_expand(t, e.row_ptr, e.row_entries, e.entry_group, e.n_rows, groups, slot,
                     static_cast<std::int32_t>(p.out.n_cols), p.out.data, stream_);
}

}  // namespace pie::cuda
